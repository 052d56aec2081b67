# Ported client: the directory-update pull-queue producer and consumer of Google's Titan
# filesystem for App Engine.
# Source: googlearchive/titan, titan/files/dirs.py at commit
# b0d95b7dc12030e0e3f87ddb4e0dc9c3083319b0; licence Apache-2.0 (header below).
# Kept as written: the constants, add_titan_dir_delete_task, DirTaskConsumer.process_next_window,
# ModifiedPath, DirService.compute_affected_dirs and _get_window. Adapted (the rest of the
# module needs Titan's file system and Python 2): add_titan_dir_delete_task lives on a plain
# class with `path` and `namespace` instead of the files.File mixin; Dir.validate_path checks
# only that the path is absolute; DirService.update_affected_dirs records its arguments instead
# of writing directory entities. titan_dirs_pullqueue.py is this file with its taskqueue import
# changed.
#
# Copyright 2012 Google Inc. All Rights Reserved.
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

import datetime
import json
import os
import time
from google.appengine.api import taskqueue
from titan.common import utils

WINDOW_SIZE_SECONDS = 10
TASKQUEUE_NAME = 'titan-dirs'
TASKQUEUE_LEASE_SECONDS = 3 * WINDOW_SIZE_SECONDS  # 30 second leasing buffer.
TASKQUEUE_LEASE_MAX_TASKS = 1000
TASKQUEUE_LEASE_ETA_BUFFER = TASKQUEUE_LEASE_SECONDS
DEFAULT_CRON_RUNTIME_SECONDS = 60
INITIALIZER_BATCH_SIZE = 100
INITIALIZER_NUM_BATCHES = 50

_STATUS_AVAILABLE = 1
_STATUS_DELETED = 2

class Error(Exception):
  pass

class NamespaceMismatchError(Error):
  pass

class DirManagerMixin(object):
  """Adapted: a deleted file's path and namespace (files.File in Titan)."""

  def __init__(self, path, namespace=None):
    self.path = path
    self.namespace = namespace

  def add_titan_dir_delete_task(self):
    """Add a task to the pull queue about which path was deleted."""
    now = time.time()
    window = _get_window(now)
    path_data = {
        'path': self.path,
        'namespace': self.namespace,
        'modified': now,
        'action': _STATUS_DELETED,
    }
    # Important: unlock tasks in the same window at the same time, and
    # after the window itself has passed.
    current_task_eta = datetime.datetime.utcfromtimestamp(
        window + TASKQUEUE_LEASE_ETA_BUFFER)
    task = taskqueue.Task(
        method='PULL',
        payload=json.dumps(path_data),
        tag=str(window),
        eta=current_task_eta)
    task.add(queue_name=TASKQUEUE_NAME)

    # Evil, but really really convenient. If in test or dev_appserver, just
    # update the directory entities synchronously with the request.
    server_software = os.environ.get('SERVER_SOFTWARE', '')
    if server_software.lower().startswith(('dev', 'test')):
      dir_task_consumer = DirTaskConsumer()
      dir_task_consumer.process_next_window()

class DirTaskConsumer(object):
  """Service which consumes and processes path-modification tasks."""

  def process_next_window(self):
    """Lease one window-worth of tasks and update the corresponding dirs.

    Returns:
      A list of ModifiedPaths.
    """
    queue = taskqueue.Queue(TASKQUEUE_NAME)
    # Don't specify a tag; this pulls the oldest tasks of the same tag.
    tasks = queue.lease_tasks_by_tag(lease_seconds=TASKQUEUE_LEASE_SECONDS,
                                     max_tasks=TASKQUEUE_LEASE_MAX_TASKS)
    if not tasks:
      return {}

    # Keep leasing similar tasks if we hit the per-request leasing max.
    have_all_tasks = True if len(tasks) < TASKQUEUE_LEASE_MAX_TASKS else False
    while not have_all_tasks:
      tasks_in_window = queue.lease_tasks_by_tag(
          lease_seconds=TASKQUEUE_LEASE_SECONDS,
          max_tasks=TASKQUEUE_LEASE_MAX_TASKS,
          tag=tasks[0].tag)
      tasks.extend(tasks_in_window)
      if len(tasks_in_window) < TASKQUEUE_LEASE_MAX_TASKS:
        have_all_tasks = True

    # Package each task's data into a ModifiedPath and pass it on.
    # Don't deal with ordering or chronologically collapsing paths here.
    modified_paths = []
    for task in tasks:
      path_data = json.loads(task.payload)
      modified_path = ModifiedPath(
          path=path_data['path'],
          namespace=path_data['namespace'],
          modified=path_data['modified'],
          action=path_data['action'],
      )
      modified_paths.append(modified_path)

    # Compute the affected directories and then update them if needed.
    dir_service = DirService()
    affected_dirs = dir_service.compute_affected_dirs(modified_paths)
    dir_service.update_affected_dirs(**affected_dirs)

    for tasks_to_delete in utils.chunk_generator(tasks):
      queue.delete_tasks(tasks_to_delete)

    return modified_paths

class ModifiedPath(object):
  """Simple container for metadata about the type of path modification."""

  WRITE = 1
  DELETE = 2

  def __init__(self, path, namespace, modified, action):
    """Constructor.

    Args:
      path: Absolute path of modified file (including filename).
      namespace: The namespace of the modified file.
      modified: Unix timestamp float.
      action: One of ModifiedPath.WRITE or ModifiedPath.DELETE.
    """
    Dir.validate_path(path, namespace=namespace)
    self.path = path
    self.namespace = namespace
    self.modified = modified
    self.action = action

  def serialize(self):
    results = {
        'path': self.path,
        'namespace': self.namespace,
        'modified': self.modified,
        'action': self.action,
    }
    return results

class DirService(object):
  """Service for managing directory entities."""

  updates = []
  """Adapted: what update_affected_dirs was asked to write."""

  def compute_affected_dirs(self, modified_paths):
    """Compute which dirs are affected by path modifications.

    Args:
      modified_paths: A list of ModifiedPath objects.
    Raises:
      NamespaceMismatchError: If mixing namespaces.
    Returns:
      A dictionary containing 'dirs_with_adds' and 'dirs_with_deletes',
      both of which are sets of strings containing the affect dir paths.
    """
    if modified_paths:
      namespace = modified_paths[0].namespace
    # First, merge file path modifications.
    # Perform an in-order pass to get the final modified state of each file.
    sorted_paths = sorted(modified_paths, key=lambda path: path.modified)
    new_modified_paths = {}
    for modified_path in sorted_paths:
      if modified_path.namespace != namespace:
        raise NamespaceMismatchError(
            'Namespace "{}" does not match namespace "{}".'.format(
                modified_path.namespace, namespace))
      new_modified_paths[modified_path.path] = modified_path
    sorted_paths = sorted(new_modified_paths.values(),
                          key=lambda path: path.modified)

    # Second, generate the set of affected directory paths.
    # This does not need to collapse dirs which are added and then deleted,
    # the dir should be present in both lists if it is affected by both an
    # add and a delete.
    dirs_with_adds = set()
    dirs_with_deletes = set()
    for modified_path in sorted_paths:
      current_dirs = utils.split_path(modified_path.path)
      if modified_path.action == ModifiedPath.WRITE:
        dirs_with_adds = dirs_with_adds.union(set(current_dirs))
      elif modified_path.action == ModifiedPath.DELETE:
        dirs_with_deletes = dirs_with_deletes.union(set(current_dirs))

    # Ignore root dir; it's hard-coded elsewhere to always exist.
    dirs_with_adds.discard('/')
    dirs_with_deletes.discard('/')

    affected_dirs = {
        'namespace': namespace,
        'dirs_with_adds': dirs_with_adds,
        'dirs_with_deletes': dirs_with_deletes,
    }
    return affected_dirs

  def update_affected_dirs(self, dirs_with_adds, dirs_with_deletes,
                           namespace=None):
    """Adapted: records the directories instead of writing their entities (and drops the
    `async` parameter, a keyword in Python 3)."""
    DirService.updates.append((namespace, sorted(dirs_with_adds), sorted(dirs_with_deletes)))

class Dir(object):
  """Adapted: only the path check ModifiedPath uses."""

  @staticmethod
  def validate_path(path, namespace=None):
    if not path.startswith('/'):
      raise ValueError(path)

def _get_window(timestamp=None, window_size=WINDOW_SIZE_SECONDS):
  """Get the window for the given unix time and window size."""
  return int(window_size * round(float(timestamp) / window_size))
