#
# Copyright 2007 Google LLC
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
#
# Modified for pullqueue: a selection of the tests of
# tests/google/appengine/api/taskqueue/taskqueue_test.py (appengine-python-standard,
# commit f4253392cb48ff026f8f99bea5c31df932804270), run against both Google's SDK and
# pullqueue.compat.taskqueue. Test bodies are upstream's; the lines changed are marked
# "pullqueue port:" and tests/upstream/README.md lists every change and every test left out.


"""Tests for the 'taskqueue' module."""


import datetime
import os
import time

import six

from google.appengine.api import module_testutil
from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as taskqueue_service_pb2
from google.appengine.runtime.context import ctx_test_util

from tests.upstream import harness

# pullqueue port: the module under test is the SDK's or pullqueue's, as the loader
# (tests/upstream/test_taskqueue.py) sets IMPLEMENTATION; absltest and mox are stand-ins.
taskqueue = harness.module(IMPLEMENTATION)
absltest = harness.absltest(IMPLEMENTATION)
mox = harness.NoMox


InvalidEtaError = taskqueue.InvalidEtaError
InvalidTaskError = taskqueue.InvalidTaskError
TaskRetryOptions = taskqueue.TaskRetryOptions
Task = taskqueue.Task
Queue = taskqueue.Queue
QueueStatistics = taskqueue.QueueStatistics
TaskQueueServiceError = taskqueue_service_pb2.TaskQueueServiceError
DEFAULT_HOSTNAME = 'app-id.appsplot.com'


@ctx_test_util.isolated_context()
class HttpEnvironTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    ctx_test_util.set_both('DEFAULT_VERSION_HOSTNAME', DEFAULT_HOSTNAME)
    ctx_test_util.set_both('HTTP_HOST', DEFAULT_HOSTNAME)


class TaskRetryOptionsTest(absltest.TestCase):
  """Tests for the TaskRetryOptionsTest class."""

  def testNoFieldsSet(self):
    options = TaskRetryOptions()
    self.assertEqual(None, options.min_backoff_seconds)
    self.assertEqual(None, options.max_backoff_seconds)
    self.assertEqual(None, options.max_doublings)
    self.assertEqual(None, options.task_retry_limit)
    self.assertEqual(None, options.task_age_limit)

  def testSetAllFields(self):
    options = TaskRetryOptions(min_backoff_seconds=3,
                               max_backoff_seconds=5,
                               max_doublings=8,
                               task_retry_limit=10,
                               task_age_limit=600)
    self.assertEqual(3, options.min_backoff_seconds)
    self.assertEqual(5, options.max_backoff_seconds)
    self.assertEqual(8, options.max_doublings)
    self.assertEqual(10, options.task_retry_limit)
    self.assertEqual(600, options.task_age_limit)

  def testIllegalConstructorArgument(self):
    self.assertRaises(TypeError,
                      TaskRetryOptions,
                      min_backoff_seconds=1,
                      max_backoff_seconds=5,
                      foo=23)

  def testNegativeMinBackoffSeconds(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      min_backoff_seconds=-1)

  def testNegativeMaxBackoffSeconds(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      max_backoff_seconds=-5)

  def testMinBackoffLessThanMaxBackoffSeconds(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      min_backoff_seconds=5,
                      max_backoff_seconds=3)

  def testNegativeMaxDoublings(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      max_doublings=-1)

  def testNegativeTaskRetryLimit(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      task_retry_limit=-1)

  def testNegativeTaskAgeLimit(self):
    self.assertRaises(taskqueue.InvalidTaskRetryOptionsError,
                      TaskRetryOptions,
                      task_age_limit=-1)


@ctx_test_util.both_context_modes()
class TaskTest(HttpEnvironTest):
  """Tests for the Task class."""

  def setUp(self):
    """Sets up the test harness."""
    super().setUp()
    self.payload = b'this is the example payload'
    self.unicode_payload = u'\xfcmlauts are fun'
    self.encoded_payload = b'\xc3\xbcmlauts are fun'
    self.params = {
        'one$funny&': 'fish',
        'red': 'blue with spaces',
        'fish': ['guppy', 'flounder'],
    }
    self.params_query = ('one%24funny%26=fish&fish=guppy&fish=flounder'
                         '&red=blue+with+spaces')


    self.now_timestamp = time.time()
    self.now_time = datetime.datetime.fromtimestamp(self.now_timestamp)
    # pullqueue port: datetime.timezone.utc for the SDK's private taskqueue._UTC, and
    # time.time stubbed at now_timestamp (as an app's own test does) instead of patching the
    # SDK's private Task._Task__determine_eta_posix (the effect upstream wants: ETAs taken at
    # now_timestamp).
    self.now_utctime = self.now_time.replace(tzinfo=datetime.timezone.utc)
    self.restore_clock = harness.freeze_clock(
        IMPLEMENTATION, lambda: self.now_timestamp)

  def tearDown(self):
    """Tears down the test harness."""
    self.restore_clock()  # pullqueue port: see setUp
    super().tearDown()

  def assertParamsEqual(self, expected, actual):
    self.assertSetEqual(set(expected.split('&')), set(actual.split('&')))

  def testNotEnqueued(self):
    """Tests that the enqueued attribute is False after initialization."""
    t = Task()
    self.assertFalse(t.was_enqueued)

  def testPullParameters(self):
    """Tests a Task with a POST method and form parameters."""
    t = Task(params=self.params, method='PULL')
    self.assertEqual('PULL', t.method)
    self.assertParamsEqual(self.params_query, t.payload.decode('utf8'))
    self.assertEqual(None, t.name)

  def testNonStringPayload(self):
    """Tests that non-string payloads will cause an error."""
    self.assertRaises(
        InvalidTaskError, Task,
        object())
    self.assertRaises(
        InvalidTaskError, Task,
        1)
    self.assertRaises(
        InvalidTaskError, Task,
        ['list', 'of', 'strings'])

  def testPostParamsAndBodyError(self):
    """Tests when a POST Task has parameters and a body payload."""
    self.assertRaises(
        InvalidTaskError, Task,
        self.payload, params=self.params)

  def testPostQueryStringInUrlError(self):
    """Tests that a query string showing up for a POST request will error."""
    self.assertRaises(
        InvalidTaskError, Task,
        url='/path/to/my/stuff?foo=bar')

  def testBadMethod(self):
    """Tests when an invalid method is specified."""
    self.assertRaises(
        InvalidTaskError, Task,
        method='stuff')

  def testTag(self):
    """Tests with a Task with a tag."""
    tags = [None, '', 'My test Tag', u'\u30cb\u30e3\u30f3', '\x00\x01\x02\x03']
    for tag in tags:
      t = Task(method='PULL', payload='data', tag=tag)
      self.assertEqual(tag, t.tag)

  def testCountdown(self):
    """Tests specifying a countdown for a Task."""
    t = Task(countdown=15)
    self.assertEqual(self.now_utctime + datetime.timedelta(seconds=15), t.eta)

  def testEta(self):
    """Tests specifying an explicit ETA for a Task."""
    self.now_timestamp = time.time()
    self.now_time = datetime.datetime.fromtimestamp(self.now_timestamp)
    # pullqueue port: datetime.timezone.utc for the SDK's private taskqueue._UTC
    self.now_utctime = self.now_time.replace(tzinfo=datetime.timezone.utc)
    self.now_timestamp += 15
    self.now_time += datetime.timedelta(seconds=15)
    t = Task(eta=self.now_time)
    self.assertEqual(self.now_utctime + datetime.timedelta(seconds=15), t.eta)

  def testDefaultEta(self):
    """Test that the default ETA is the current time."""
    t = Task()
    self.assertEqual(self.now_utctime, t.eta)

  def testRetryOptions(self):
    """Tests specifying TaskRetryOptions for a Task."""
    retry_options = TaskRetryOptions(min_backoff_seconds=1,
                                     max_backoff_seconds=2)
    t = Task(retry_options=retry_options)
    self.assertEqual(retry_options, t.retry_options)

  def testMaxTaskSize(self):
    """Tests the max allowed size of a Task."""
    self.assertRaises(
        taskqueue.TaskTooLargeError, Task,
        'a' * (taskqueue.MAX_TASK_SIZE_BYTES + 1))
    self.assertRaises(
        taskqueue.TaskTooLargeError, Task,
        'a' * (taskqueue.MAX_PULL_TASK_SIZE_BYTES + 1), method='PULL')
    self.assertRaises(
        taskqueue.TaskTooLargeError, Task,
        'a' * (taskqueue.MAX_PUSH_TASK_SIZE_BYTES + 1))

  def testMaxNameLength(self):
    """Tests the max allowed length of a Task name."""
    self.assertRaises(
        taskqueue.InvalidTaskNameError, Task,
        name=('a' * (taskqueue.MAX_TASK_NAME_LENGTH + 1)))

  def testDefaultDispatchDeadline(self):
    """Tests the default dispatch deadline is None."""
    t = Task()
    self.assertIsNone(t.dispatch_deadline_usec)

  def testNamePattern(self):
    """Tests the task name must match a pattern."""
    self.assertRaises(taskqueue.InvalidTaskNameError, Task, name='ba.d')
    self.assertRaises(taskqueue.InvalidTaskNameError, Task, name='ba/d')
    self.assertRaises(taskqueue.InvalidTaskNameError, Task, name='ba$d.')
    Task(name='good')
    Task(name='GooD')
    Task(name='Go-oD')
    Task(name='Go_oD')
    Task(name='-GooD')
    Task(name='GooD-')
    Task(name='1234')
    Task(name='1234-foo')

  def testInvalidCountdown(self):
    """Tests when the task countdown is invalid."""
    self.assertRaises(
        taskqueue.InvalidEtaError, Task,
        countdown=(3600 * 24 * 30 + 300))
    Task(countdown=(3600 * 24 * 30))

  def testBadKeywordArgument(self):
    """Tests that unknown keyword arguments will raise an error.

    This prevents bozo typos like 'parmas' from breaking user code.
    """
    self.assertRaises(
        TypeError, Task, parmas=self.params)


class DeleteTasksTest(absltest.TestCase):
  """Tests for Queue.delete_tasks method."""

  def setUp(self):
    """Sets up the test harness."""
    # pullqueue port: no RPC mocks; the queue is real (the SDK's stub, or pullqueue's
    # memory backend) and MockSuccessfulRPC puts in it what the mocked response describes.
    self.mox = mox.Mox()

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def DeleteTasks(self, queue, tasks):
    """Exercise the synchronous method delete_tasks."""
    return queue.delete_tasks(tasks)

  def MockSuccessfulRPC(self, expected_request, populate_response):
    """pullqueue port: arrange the queue so a real Delete answers what the mock answered."""
    harness.arrange_delete(IMPLEMENTATION, expected_request, populate_response)

  def testDeleteSingleTask(self):
    """Tests deleting one task."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name = 'task1'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task = Task(name=task_name)
    task = self.DeleteTasks(Queue('default'), task)
    self.mox.VerifyAll()

    self.assertTrue(task.was_deleted)

  def testDeleteListOfTasks(self):
    """Tests deleting a list of tasks."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name_one = 'task1'
    task_name_two = 'task2'
    task_name_three = 'task3'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name_one.encode('utf8'))
    expected_request.task_name.append(task_name_two.encode('utf8'))
    expected_request.task_name.append(task_name_three.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task1 = Task(name=task_name_one)
    task2 = Task(name=task_name_two)
    task3 = Task(name=task_name_three)
    tasks = [task1, task2, task3]
    tasks = self.DeleteTasks(Queue('default'), tasks)
    self.mox.VerifyAll()

    self.assertLen(tasks, 3)
    self.assertTrue(tasks[0].was_deleted)
    self.assertTrue(tasks[1].was_deleted)
    self.assertTrue(tasks[2].was_deleted)

  def testDeleteTombstonedTaskError(self):
    """Tests TombstonedTaskError returned from MakeSyncCall."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(
          taskqueue_service_pb2.TaskQueueServiceError.TOMBSTONED_TASK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name_one = 'task1'
    task_name_two = 'isTombstoned'
    task_name_three = 'task3'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name_one.encode('utf8'))
    expected_request.task_name.append(task_name_two.encode('utf8'))
    expected_request.task_name.append(task_name_three.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task1 = Task(name=task_name_one)
    task2 = Task(name=task_name_two)
    task3 = Task(name=task_name_three)
    tasks = [task1, task2, task3]
    tasks = self.DeleteTasks(Queue('default'), tasks)
    self.mox.VerifyAll()

    self.assertTrue(tasks[0].was_deleted)
    self.assertFalse(tasks[1].was_deleted)
    self.assertTrue(tasks[2].was_deleted)

  def testDeleteTwice(self):
    """Tests deleting a list of tasks twice."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name_one = 'task1'
    task_name_two = 'T2'
    task_name_three = 't-three'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name_one.encode('utf8'))
    expected_request.task_name.append(task_name_two.encode('utf8'))
    expected_request.task_name.append(task_name_three.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task1 = Task(name=task_name_one)
    task2 = Task(name=task_name_two)
    task3 = Task(name=task_name_three)
    tasks = [task1, task2, task3]
    tasks = self.DeleteTasks(Queue('default'), tasks)
    self.mox.VerifyAll()

    self.assertRaises(taskqueue.BadTaskStateError,
                      self.DeleteTasks,
                      Queue('default'),
                      tasks)

  def testDeleteNoTaskName(self):
    """Tests deleting tasks that have no name specified."""
    task1 = Task()
    tasks = [task1]

    self.assertRaises(taskqueue.BadTaskStateError,
                      self.DeleteTasks,
                      Queue('default'),
                      tasks)

  def testDeleteDuplicateTaskNames(self):
    """Tests deleting list of duplicate task names."""

    task1 = Task(name='T1')
    task2 = Task(name='T2')
    task3 = Task(name='T1')
    tasks = [task1, task2, task3]

    self.assertRaises(taskqueue.DuplicateTaskNameError,
                      self.DeleteTasks,
                      Queue('default'),
                      tasks)

  def testDeleteNonExistingTask(self):
    """Tests deleting a task that does not exist."""

    def SetResponse(service, method, request, response):
      response.result.append(TaskQueueServiceError.OK)
      response.result.append(TaskQueueServiceError.UNKNOWN_TASK)

    task_name_one = 'task1'
    task_name_two = 'task2'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name_one.encode('utf8'))
    expected_request.task_name.append(task_name_two.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task1 = Task(name=task_name_one)
    task2 = Task(name=task_name_two)
    tasks = [task1, task2]
    tasks = self.DeleteTasks(Queue('default'), tasks)
    self.mox.VerifyAll()

    self.assertTrue(tasks[0].was_deleted)
    self.assertFalse(tasks[1].was_deleted)


class AsyncDeleteTasksTest(DeleteTasksTest):
  """Tests for Queue.delete_tasks_async method.

  This will run all the tests in the superclass.
  """

  def DeleteTasks(self, queue, tasks):
    """Exercise the asynchronous method delete_tasks_async."""
    return queue.delete_tasks_async(tasks).get_result()


class DeleteTasksByNameTest(absltest.TestCase):
  """Tests for Queue.delete_tasks_by_name method."""

  def setUp(self):
    """Sets up the test harness."""
    # pullqueue port: no RPC mocks; the queue is real (the SDK's stub, or pullqueue's
    # memory backend) and MockSuccessfulRPC puts in it what the mocked response describes.
    self.mox = mox.Mox()

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def DeleteTasksByName(self, queue, task_name):
    """Exercise the synchronous method delete_tasks_by_name."""
    return queue.delete_tasks_by_name(task_name)

  def MockSuccessfulRPC(self, expected_request, populate_response):
    """pullqueue port: arrange the queue so a real Delete answers what the mock answered."""
    harness.arrange_delete(IMPLEMENTATION, expected_request, populate_response)

  def testDeleteSingleTask(self):
    """Tests deleting one task."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name = 'task1'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task = self.DeleteTasksByName(Queue('default'), task_name)
    self.mox.VerifyAll()

    self.assertTrue(task.was_deleted)

  def testDeleteListOfTasks(self):
    """Tests deleting a list of tasks."""

    def SetResponse(service, method, request, response):
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)
      response.result.append(taskqueue_service_pb2.TaskQueueServiceError.OK)

    task_name_one = 'task1'
    task_name_two = 'task2'
    task_name_three = 'task3'
    expected_request = taskqueue_service_pb2.TaskQueueDeleteRequest()
    expected_request.queue_name = b'default'
    expected_request.task_name.append(task_name_one.encode('utf8'))
    expected_request.task_name.append(task_name_two.encode('utf8'))
    expected_request.task_name.append(task_name_three.encode('utf8'))

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task_names = [task_name_one, task_name_two, task_name_three]
    tasks = self.DeleteTasksByName(Queue('default'), task_names)
    self.mox.VerifyAll()

    self.assertLen(tasks, 3)
    self.assertTrue(tasks[0].was_deleted)
    self.assertTrue(tasks[1].was_deleted)
    self.assertTrue(tasks[2].was_deleted)

  def testDeleteDuplicateTaskNames(self):
    """Tests deleting list of duplicate task names."""

    task_names = ['T1', 'T2', 'T1']

    self.assertRaises(taskqueue.DuplicateTaskNameError,
                      self.DeleteTasksByName,
                      Queue('default'),
                      task_names)


class AsyncDeleteTasksByNameTest(DeleteTasksByNameTest):
  """Tests for Queue.delete_tasks_by_name_async method.

  This will run all the tests in the superclass.
  """

  def DeleteTasksByName(self, queue, task_name):
    """Exercise the asynchronous method delete_tasks_by_name_async."""
    return queue.delete_tasks_by_name_async(task_name).get_result()


class LeaseTasksTest(absltest.TestCase):
  """Tests for Queue.lease_tasks method."""

  def setUp(self):
    """Sets up the test harness."""
    self.mox = mox.Mox()  # pullqueue port: no RPC mocks (the tests below make no call)
    self.now_timestamp = time.time()

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def LeaseTasks(self, queue, *args, **kwargs):
    """Exercise the synchronous method lease_tasks."""
    return queue.lease_tasks(*args, **kwargs)

  def testLeaseTasksNegativeLeaseTime(self):
    """Tests lease_tasks with negative lease time value."""
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      self.LeaseTasks,
                      Queue('default'),
                      -1.0,
                      10)

  def testLeaseTasksTooLongLeaseTime(self):
    """Tests lease_tasks with too large lease time value."""
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      self.LeaseTasks,
                      Queue('default'),
                      86400 * 30.0,
                      10)

  def testLeaseTasksNegativeNumberOfTasks(self):
    """Tests lease_tasks with negative number of max tasks."""
    self.assertRaises(taskqueue.InvalidMaxTasksError,
                      self.LeaseTasks,
                      Queue('default'),
                      100.0,
                      -1)

  def testLeaseTooLargeMaxNumberOfTasks(self):
    """Tests lease_tasks with too large max number."""
    self.assertRaises(taskqueue.InvalidMaxTasksError,
                      self.LeaseTasks,
                      Queue('default'),
                      100.0,
                      1024)

  def testLeaseTasksParameterWrongType(self):
    """Tests lease_tasks with wrong type of parameters."""
    self.assertRaises(TypeError,
                      self.LeaseTasks,
                      Queue('default'),
                      '100.0',
                      12)

  def testLeaseTasksParameterWrongValue(self):
    """Tests lease_tasks with invalid value."""
    self.assertRaises(TypeError,
                      self.LeaseTasks,
                      Queue('default'),
                      100.0,
                      5.8)

  def testLeaseTasksNullDeadline(self):
    """Tests lease_tasks with null deadline value."""

    self.assertRaises(TypeError,
                      Queue('default').lease_tasks,
                      123.0,
                      45,
                      deadline=None)

  def testLeaseTasksNegativeDeadline(self):
    """Tests lease_tasks with negative deadline value."""
    self.assertRaises(taskqueue.InvalidDeadlineError,
                      Queue('default').lease_tasks,
                      1.0,
                      10,
                      deadline=-600.0)


class AsyncLeaseTasksTest(LeaseTasksTest):
  """Tests for Queue.lease_tasks_async method.

  This will run all the tests in the superclass.
  """

  def LeaseTasks(self, queue, lease_seconds, max_tasks, deadline=None):
    """Exercise the asynchronous method lease_tasks_async."""
    if deadline is None:
      return queue.lease_tasks_async(lease_seconds, max_tasks).get_result()
    else:
      rpc = taskqueue.create_rpc(deadline=deadline)
      returned_rpc = queue.lease_tasks_async(lease_seconds, max_tasks, rpc)
      self.assertIs(returned_rpc, rpc)
      return rpc.get_result()


class LeaseTasksByTagTest(absltest.TestCase):
  """Tests for Queue.lease_tasks_by_tag method."""

  def setUp(self):
    """Sets up the test harness."""
    self.mox = mox.Mox()  # pullqueue port: no RPC mocks (the tests below make no call)
    self.now_timestamp = time.time()

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def LeaseTasksByTag(self, queue, *args, **kwargs):
    """Exercise the synchronous method lease_tasks_by_tag."""
    return queue.lease_tasks_by_tag(*args, **kwargs)

  def testLeaseTasksNegativeLeaseTime(self):
    """Tests lease_tasks with negative lease time value."""
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      -1.0,
                      10)

  def testLeaseTasksTooLongLeaseTime(self):
    """Tests lease_tasks with too large lease time value."""
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      86400 * 30.0,
                      10)

  def testLeaseTasksNegativeNumberOfTasks(self):
    """Tests lease_tasks with negative number of max tasks."""
    self.assertRaises(taskqueue.InvalidMaxTasksError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      100.0,
                      -1)

  def testLeaseTooLargeMaxNumberOfTasks(self):
    """Tests lease_tasks with too large max number."""
    self.assertRaises(taskqueue.InvalidMaxTasksError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      100.0,
                      1024)

  def testLeaseTasksParameterWrongType(self):
    """Tests lease_tasks with wrong type of parameters."""
    self.assertRaises(TypeError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      '100.0',
                      12)

  def testLeaseTasksParameterWrongValue(self):
    """Tests lease_tasks with invalid value."""
    self.assertRaises(TypeError,
                      self.LeaseTasksByTag,
                      Queue('default'),
                      100.0,
                      5.8)

  def testLeaseTasksParameterWrongType2(self):
    """Tests lease_tasks with wrong type of parameters.

    This test uses the wrong deadline type.
    """

    self.assertRaises(TypeError,
                      Queue('default').lease_tasks_by_tag,
                      100.0,
                      12,
                      tag='my-tag',
                      deadline=3J)


class AsyncLeaseTasksByTagTest(LeaseTasksByTagTest):
  """Tests for Queue.lease_tasks_by_tag_async method.

  This will run all the tests in the superclass.
  """

  def LeaseTasksByTag(self,
                      queue,
                      lease_seconds,
                      max_tasks,
                      tag=None,
                      deadline=None):
    """Exercise the asynchronous method lease_tasks_by_tag_async."""
    if deadline is None:
      if tag is None:
        return queue.lease_tasks_by_tag_async(
            lease_seconds, max_tasks).get_result()
      else:
        return queue.lease_tasks_by_tag_async(
            lease_seconds, max_tasks, tag).get_result()
    else:
      rpc = taskqueue.create_rpc(deadline=deadline)
      returned_rpc = queue.lease_tasks_by_tag_async(
          lease_seconds, max_tasks, tag, rpc)
      self.assertIs(returned_rpc, rpc)
      return rpc.get_result()


@ctx_test_util.both_context_modes()
class QueueAddTest(HttpEnvironTest):
  """Tests for the Queue class and anything that puts Tasks in a queue."""

  def setUp(self):
    """Sets up the test harness."""
    super().setUp()
    self.now = datetime.datetime(2009, 5, 5, 21, 50, 28, 517317)
    self.now_timestamp_usec = 1241560228517317
    self.params = {'one': 'two'}
    self.headers = {'red': 'blue', 'five': 'six'}
    self.payload = b'some-data'
    # pullqueue port: the queue is real (no fresh APIProxyStubMap, no RPC mocks)

  def SetupMox(self):
    self.mox = mox.Mox()  # pullqueue port: no RPC mocks (the tests below make no call)

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()
    super().tearDown()

  def Add(self, queue, *args, **kwargs):
    """Exercise Queue's synchronous method add."""
    self.assertIsInstance(queue, Queue)
    return queue.add(*args, **kwargs)

  def TaskAdd(self, task, *args, **kwargs):
    """Exercise Task's synchronous method add."""
    self.assertIsInstance(task, Task)
    return task.add(*args, **kwargs)

  def MockSuccessfulRPC(self, expected_request, populate_response):
    """pullqueue port: arrange the queue so a real BulkAdd answers what the mock answered."""
    harness.arrange_add(IMPLEMENTATION, expected_request, populate_response)

  def testTransactionalAddOutsideOfTransaction(self):
    """Tests adding a Task with transactional set outside of a transaction."""
    self.SetupMox()

    self.assertRaises(taskqueue.BadTransactionStateError,
                      self.TaskAdd,
                      Task(eta=self.now, params=self.params, method='GET'),
                      transactional=True)
    self.assertRaises(taskqueue.BadTransactionStateError,
                      taskqueue.add,
                      method='PULL',
                      payload='payload',
                      transactional=True)

  def testNoTasks(self):
    """Tests adding an empty list of tasks to a Queue."""
    self.SetupMox()

    self.assertEqual([], Queue().add([]))

  def testTooManyTasks(self):
    """Tests adding a list containing too many tasks to a Queue."""
    self.SetupMox()
    tasks = [Task() for _ in range(taskqueue.MAX_TASKS_PER_ADD + 1)]
    self.assertRaises(taskqueue.TooManyTasksError, self.Add, Queue(), tasks)

  def testDuplicateTaskNames(self):
    """Tests adding Tasks with duplicate names to a Queue."""
    self.SetupMox()
    self.assertRaises(taskqueue.DuplicateTaskNameError,
                      self.Add,
                      Queue(),
                      [Task(name='A'), Task(name='B'), Task(name='B')])

  def testAddPullTasksMultipleResults(self):
    """Tests adding multiple tasks in a call."""
    self.SetupMox()

    def SetResponse(service, method, request, response):
      task_result1 = response.taskresult.add()
      task_result1.result = taskqueue_service_pb2.TaskQueueServiceError.OK
      task_result2 = response.taskresult.add()
      task_result2.result = taskqueue_service_pb2.TaskQueueServiceError.OK
      task_result3 = response.taskresult.add()
      task_result3.result = taskqueue_service_pb2.TaskQueueServiceError.OK

    expected_request = taskqueue_service_pb2.TaskQueueBulkAddRequest()
    add_request1 = expected_request.add_request.add()
    add_request1.queue_name = b'Aqueue'
    add_request1.task_name = b'A'
    add_request1.eta_usec = self.now_timestamp_usec
    add_request1.mode = taskqueue_service_pb2.TaskQueueMode.PULL
    add_request1.body = b'123'

    add_request2 = expected_request.add_request.add()
    add_request2.queue_name = b'Aqueue'
    add_request2.task_name = b'B'
    add_request2.eta_usec = self.now_timestamp_usec
    add_request2.mode = taskqueue_service_pb2.TaskQueueMode.PULL
    add_request2.body = b'456'

    add_request3 = expected_request.add_request.add()
    add_request3.queue_name = b'Aqueue'
    add_request3.task_name = b'C'
    add_request3.eta_usec = self.now_timestamp_usec
    add_request3.mode = taskqueue_service_pb2.TaskQueueMode.PULL
    add_request3.body = b'789'

    self.MockSuccessfulRPC(expected_request, SetResponse)

    task1 = Task(name='A', eta=self.now, payload='123', method='PULL')
    task2 = Task(name='B', eta=self.now, payload='456', method='PULL')
    task3 = Task(name='C', eta=self.now, payload='789', method='PULL')
    tasks = [task1, task2, task3]
    queue = Queue('Aqueue')
    self.mox.ReplayAll()
    t = self.Add(queue, tasks)
    self.mox.VerifyAll()

    self.assertTrue(t[0].was_enqueued)
    self.assertTrue(t[1].was_enqueued)
    self.assertTrue(t[2].was_enqueued)

  def testPullTaskSingleTaskWithPayload(self):
    """Tests adding a pull task with payload data."""
    self.SetupMox()

    def SetResponse(service, method, request, response):
      task_result = response.taskresult.add()
      task_result.result = taskqueue_service_pb2.TaskQueueServiceError.OK

    expected_request = taskqueue_service_pb2.TaskQueueBulkAddRequest()
    add_request = expected_request.add_request.add()
    add_request.queue_name = b'default'
    add_request.task_name = b'T'
    add_request.eta_usec = self.now_timestamp_usec
    add_request.mode = taskqueue_service_pb2.TaskQueueMode.PULL
    add_request.body = self.payload

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()
    task = Task(name='T', payload=self.payload, eta=self.now, method='PULL')
    queue = Queue()
    t = self.Add(queue, task)
    self.mox.VerifyAll()

    self.assertTrue(t.was_enqueued)

  def testPullTaskWithoutPayload(self):
    """Tests adding a pull task that without payload data."""
    self.SetupMox()

    self.assertRaises(InvalidTaskError,
                      Task,
                      eta=self.now,
                      method='PULL')

  def testPullTaskWithUrl(self):
    """Tests adding pull task with url."""
    self.SetupMox()
    self.assertRaises(InvalidTaskError, Task,
                      payload=self.payload,
                      eta=self.now,
                      url='/useless_url',
                      method='PULL')

  def testPullTaskWithPayloadAndParams(self):
    """Tests adding pull task with both payload and params."""
    self.SetupMox()
    self.assertRaises(InvalidTaskError, Task,
                      payload=self.payload,
                      eta=self.now,
                      params={'A': 'b',
                              'B': 'a'},
                      method='PULL')

  def testPullTaskWithHeaders(self):
    """Tests adding pull task with headers."""
    self.SetupMox()
    self.assertRaises(InvalidTaskError, Task,
                      payload=self.payload,
                      eta=self.now,
                      headers={'A': 'b',
                               'B': 'a'},
                      method='PULL')

  def testPullTasksWithTag(self):
    self.SetupMox()
    tags = [
        None, '', 'My test Tag', u'\u30cb\u30e3\u30f3', '\x00\x01\x02\x03']

    def SetResponse(service, method, request, response):
      for _ in request.add_request:
        task_result = response.taskresult.add()
        task_result.result = taskqueue_service_pb2.TaskQueueServiceError.OK

    expected_request = taskqueue_service_pb2.TaskQueueBulkAddRequest()
    for i, tag in enumerate(tags):
      add_request = expected_request.add_request.add()
      add_request.queue_name = b'default'
      add_request.task_name = b'task-%d' % i
      add_request.eta_usec = self.now_timestamp_usec
      add_request.mode = taskqueue_service_pb2.TaskQueueMode.PULL
      add_request.body = self.payload
      if tag:
        if isinstance(tag, six.text_type):
          add_request.tag = tag.encode('utf-8')
        else:
          add_request.tag = tag


    expected_request.ByteSize()

    self.MockSuccessfulRPC(expected_request, SetResponse)

    self.mox.ReplayAll()

    tasks = []
    for i, tag in enumerate(tags):
      tasks.append(Task(name='task-%d' % i,
                        payload=self.payload,
                        eta=self.now,
                        method='PULL',
                        tag=tag))

    self.Add(Queue(), tasks)
    self.mox.VerifyAll()

    for task in tasks:
      self.assertTrue(task.was_enqueued)

  def testPullTasksWithOversizedTag(self):
    self.SetupMox()
    self.assertRaises(
        taskqueue.InvalidTagError,
        Task, payload=self.payload, method='PULL', tag='a'*501)


@ctx_test_util.both_context_modes()
class AsyncQueueAddTest(QueueAddTest):
  """Tests for Queue.add_async method.

  This will run all the tests in the superclass.
  """

  def Add(self, queue, *args, **kwargs):
    """Exercise Queue's asynchronous method add_async."""
    self.assertIsInstance(queue, Queue)
    return queue.add_async(*args, **kwargs).get_result()

  def TaskAdd(self, task, *args, **kwargs):
    """Exercise Task's asynchronous method add_async."""
    self.assertIsInstance(task, Task)
    return task.add_async(*args, **kwargs).get_result()


class QueueTest(absltest.TestCase):
  """Tests non-adding methods of the Queue class."""

  def testAccessors(self):
    """Tests getting a Queue's name."""
    queue = Queue('meepa')
    self.assertEqual('meepa', queue.name)

  def testQueueNameTooLong(self):
    """Tests when the queue name is too long."""
    self.assertRaises(
        taskqueue.InvalidQueueNameError, Queue, 'a' *
        (taskqueue.MAX_QUEUE_NAME_LENGTH + 1))

  def testQueueNamePattern(self):
    """Tests that the queue name is validated."""
    self.assertRaises(
        taskqueue.InvalidQueueNameError, Queue, 'bad.')
    self.assertRaises(
        taskqueue.InvalidQueueNameError, Queue, 'ba/d')
    self.assertRaises(
        taskqueue.InvalidQueueNameError, Queue, 'ba_d')
    self.assertRaises(
        taskqueue.InvalidQueueNameError, Queue, 'ba$d')
    Queue(name='good')
    Queue(name='GooD')
    Queue(name='Go-oD')
    Queue(name='-GooD')
    Queue(name='GooD-')
    Queue(name='1234')
    Queue(name='1234-foo')

  def testDefaultName(self):
    queue = Queue()
    self.assertEqual(queue.name, 'default')

  def testEqMethod(self):
    queue_names = ('default', 'queue-0', 'good', 'GooD')
    for queue_name in queue_names:
      q1 = Queue(queue_name)
      q2 = Queue(queue_name)
      self.assertEqual(q1, q2)

    for name1, name2 in zip(queue_names, queue_names[1:]):
      q1 = Queue(name1)
      q2 = Queue(name2)
      self.assertNotEqual(q1, q2)


class QueueStatisticsTest(absltest.TestCase):
  """Tests the FetchQueueStats calls."""

  def setUp(self):
    self.mox = mox.Mox()  # pullqueue port: no RPC mocks (the tests below make no call)

  def tearDown(self):
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def Fetch(self, *args, **kwargs):
    """Exercise the synchronous method QueueStatistics.fetch."""
    return QueueStatistics.fetch(*args, **kwargs)

  def FetchStatistics(self, queue, *args, **kwargs):
    """Exercise the synchronous method fetch_statistics."""
    return queue.fetch_statistics(*args, **kwargs)

  def testEq(self):
    queue = Queue()
    stat1 = QueueStatistics(queue, 10, 20)
    stat2 = QueueStatistics(queue, 10, 20)
    self.assertEqual(stat1, stat2)

  def testNoQueues(self):

    self.assertEqual([], QueueStatistics.fetch([]))

  def testFetchBadDeadline(self):
    """Tests fetch with a null deadline."""

    self.assertRaises(TypeError,
                      QueueStatistics.fetch,
                      Queue('default'),
                      deadline=None)

  def testFetchStatisticsBadDeadline(self):
    """Tests fetch_statistics with a null deadline."""

    self.assertRaises(TypeError,
                      Queue('default').fetch_statistics,
                      deadline=None)


class AsyncQueueStatisticsTest(QueueStatisticsTest):
  """Tests the asynchronous FetchQueueStats calls.

  This will run all the tests in the superclass.
  """

  def Fetch(self, queue_or_queues, deadline=None):
    """Exercise the asynchronous method QueueStatistics.fetch_async."""
    if deadline is None:
      return QueueStatistics.fetch_async(queue_or_queues).get_result()
    else:
      rpc = taskqueue.create_rpc(deadline=deadline)
      returned_rpc = QueueStatistics.fetch_async(queue_or_queues, rpc)
      self.assertIs(returned_rpc, rpc)
      return rpc.get_result()

  def FetchStatistics(self, queue, deadline=None):
    """Exercise the asynchronous method fetch_statistics_async."""
    if deadline is None:
      return queue.fetch_statistics_async().get_result()
    else:
      rpc = taskqueue.create_rpc(deadline=deadline)
      returned_rpc = queue.fetch_statistics_async(rpc)
      self.assertIs(returned_rpc, rpc)
      return rpc.get_result()


class ModifyTaskLeaseTest(absltest.TestCase):
  """Tests for Queue.modify_task_lease method."""

  def setUp(self):
    """Sets up the test harness."""
    self.now_timestamp = time.time()

  def SetupMox(self):
    self.mox = mox.Mox()  # pullqueue port: no RPC mocks (the tests below make no call)

  def tearDown(self):
    """Tears down the test harness."""
    self.mox.ResetAll()
    self.mox.UnsetStubs()

  def testModifyTaskLeaseNegativeLeaseTime(self):
    """Tests modify_task_lease with a negative lease time value."""
    self.SetupMox()
    q = Queue('default')
    task = Task(payload='bar', method='PULL', name='foo')
    # pullqueue port: the SDK's private fields, set through the harness
    harness.set_lease_fields(task, queue_name='default', eta_posix=1)
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      q.modify_task_lease, task, -1)

  def testModifyTaskLeaseTooLargeLeaseTime(self):
    """Tests modify_task_lease with too large lease time value."""
    self.SetupMox()
    q = Queue('default')
    task = Task(payload='bar', method='PULL', name='foo')
    # pullqueue port: the SDK's private fields, set through the harness
    harness.set_lease_fields(task, queue_name='default', eta_posix=1)
    self.assertRaises(taskqueue.InvalidLeaseTimeError,
                      q.modify_task_lease, task, 86400 * 30.0)

  def testModifyTaskLeaseInvalidLeaseTime(self):
    """Tests modify_task_lease with lease_seconds of incorrect type."""
    self.SetupMox()
    q = Queue('default')
    task = Task(payload='bar', method='PULL', name='foo')
    # pullqueue port: the SDK's private fields, set through the harness
    harness.set_lease_fields(task, queue_name='default', eta_posix=1)
    self.assertRaises(TypeError,
                      q.modify_task_lease, task, '100')


class ModuleInterfaceTest(module_testutil.ModuleInterfaceTest,
                          absltest.TestCase):
  """Verify the module interface is correctly exported.

  This validates that all attributes in __all__ are present in the module, and
  that no private atributes are accidently exported.

  Note: All tests are inherited from module_testutil.ModuleInterfaceTest.
  """

  MODULE = taskqueue
