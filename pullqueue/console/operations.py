"""The console's actions beyond delete and purge: pause and resume a queue, make a task available
now, and the bulk actions of a tag (delete its tasks, make its future tasks available now,
redrive its dead letters).

Each takes the posted form and returns the sentence the result page shows, with exact counts;
the console's route calls them only after the CSRF check and the typed queue name, never under
--read-only. A bulk action works in batches, each complete before the next: interrupted, it
leaves the batches done done and the rest untouched, and running it again finishes the job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from pullqueue import pause as pausing
from pullqueue.adapters.base import Backend, ListingBackend, PagingBackend
from pullqueue.console.actions import ActionRefused, redrive_dead_letters
from pullqueue.console.taskview import find_task, is_pubsub
from pullqueue.errors import Error
from pullqueue.inspection import iso
from pullqueue.queue import Queue
from pullqueue.task import Task

BATCH = 500
"""Tasks a bulk action reads and changes per step."""

Operation = Callable[[Backend, str, Mapping[str, str]], str]


def pause_queue(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Pause the queue; says whether it already was, and how soon workers see it."""
    before = pausing.paused_since(backend, queue, fresh=True)
    if before is not None:
        return f"queue {queue!r} was already paused (since {iso(before)}); nothing changed"
    pausing.pause(backend, queue)
    return (
        f"paused queue {queue!r}: leases answer as an empty queue, adds are still accepted;"
        f" {pausing.reach(backend)}"
    )


def resume_queue(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Resume the queue; says whether it was paused."""
    before = pausing.paused_since(backend, queue, fresh=True)
    if before is None:
        return f"queue {queue!r} was not paused; nothing changed"
    pausing.resume(backend, queue)
    return f"resumed queue {queue!r}: leases hand out tasks again; {pausing.reach(backend)}"


def _required(form: Mapping[str, str], field: str, queue: str) -> str:
    value = form.get(field, "")
    if not value:
        raise ActionRefused(f"the form has no {field}; nothing was changed", queue=queue)
    return value


def _handle(row_name: str, eta: float) -> Task:
    """A task handle that names the task's current lease (its ETA is the legacy lease token)."""
    return Task.restore(payload=b"", name=row_name, tag=None, eta_posix=eta)


def run_task_now(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Make one task available now: a future ETA brought to now, or a worker's lease ended."""
    name = _required(form, "name", queue)
    if is_pubsub(backend):
        raise ActionRefused(
            "Pub/Sub hides a task until its ETA (or a worker's lease) by its ack deadline, which"
            " only the holder can change; nothing was changed",
            queue=queue,
            task=name,
        )
    row = find_task(backend, queue, name)
    if row is None or row.name is None or row.eta is None:
        return f"task {name!r} was not found in queue {queue!r}; nothing was changed"
    if row.state == "available":
        return f"task {name!r} of queue {queue!r} is available already; nothing was changed"
    was = row.state
    Queue(queue, backend).modify_lease(_handle(row.name, row.eta), 0)
    if was == "leased":
        return f"ended the lease on task {name!r} of queue {queue!r}: it is available now"
    return f"task {name!r} of queue {queue!r} was due {iso(row.eta)}: it is available now"


def _tag_tasks(backend: Backend, queue: str, tag: str) -> Iterator[list[Task]]:
    """The tasks of a tag in (ETA, name) order, BATCH at a time, read afresh for each batch."""
    if isinstance(backend, PagingBackend):
        after: tuple[float, str] | None = None
        while page := backend.task_page(queue, tag=tag, after=after, limit=BATCH):
            yield page
            last = page[-1]
            after = (last.eta_posix or 0.0, last.name or "")
    elif isinstance(backend, ListingBackend):
        tasks = [t for t in backend.list_tasks(queue) if t.tag == tag]
        for start in range(0, len(tasks), BATCH):
            yield tasks[start : start + BATCH]
    else:
        raise ActionRefused(f"{backend.url} cannot list a tag's tasks", queue=queue)


def delete_tag(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Delete every task of a tag, leased ones included; says how many."""
    tag = _required(form, "tag", queue)
    if is_pubsub(backend):
        return _delete_tag_pubsub(backend, queue, tag)
    target = Queue(queue, backend)
    now = backend.now()
    deleted = leased = 0
    for batch in _tag_tasks(backend, queue, tag):
        gone = target.delete(
            [Task.restore(payload=b"", name=t.name or "", tag=tag, eta_posix=0) for t in batch]
        )
        for task, old in zip(gone, batch, strict=True):
            if task.was_deleted:
                deleted += 1
                leased += bool(old.retry_count and (old.eta_posix or 0) > now)
    if not deleted:
        return f"queue {queue!r} has no task with tag {tag!r}; nothing was deleted"
    return (
        f"deleted {deleted:,} tasks with tag {tag!r} from queue {queue!r}"
        f" ({leased:,} of them leased by a worker)"
    )


def _delete_tag_pubsub(backend: Backend, queue: str, tag: str) -> str:
    """Pull the tag's subscriptions, acknowledge its tasks, give the others back."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.peek import give_back, pull_all

    assert isinstance(backend, PubSubBackend)
    topology = backend.topology(queue)
    deleted = 0
    for source in topology.sources_of(tag):
        while True:
            kept, others = pull_all(
                backend,
                queue,
                source,
                BATCH,
                lambda d: d.tag == tag and topology.rules[d.subscription].serves(d.attributes),
            )
            try:
                if kept:
                    lost = backend.rpc.ack(source, [d.ack_id for d in kept], queue=queue)
                    deleted += len(kept) - len(lost)
            finally:
                give_back(backend, queue, topology, others)
            if len(kept) < BATCH:
                break
    return (
        f"deleted {deleted:,} tasks with tag {tag!r} from queue {queue!r}: every one a pull could"
        " reach; tasks leased by a worker or hidden until a future ETA are not visible to a pull"
        " and were left (run it again once they are)"
    )


def run_tag_now(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Make every future (scheduled, never leased) task of a tag available now."""
    tag = _required(form, "tag", queue)
    if is_pubsub(backend):
        raise ActionRefused(
            "Pub/Sub hides a task until its ETA by its ack deadline, which only the process"
            " that holds it can change; nothing was changed",
            queue=queue,
        )
    target = Queue(queue, backend)
    now = backend.now()
    moved = leased = 0
    for batch in _tag_tasks(backend, queue, tag):
        for task in batch:
            if task.eta_posix is None or task.eta_posix <= now or task.name is None:
                continue
            if task.retry_count:
                leased += 1  # under a worker's lease (or released with a delay): left alone
                continue
            try:
                target.modify_lease(_handle(task.name, task.eta_posix), 0)
            except Error:
                continue  # leased, deleted or moved meanwhile: not counted
            moved += 1
    said = f"made {moved:,} future tasks with tag {tag!r} of queue {queue!r} available now"
    if leased:
        said += f"; {leased:,} tasks leased by a worker were left alone"
    return said


def redrive_tag(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Put the dead letters of one tag back on the queue (Pub/Sub), names, tags and ETAs kept."""
    return redrive_dead_letters(backend, queue, _required(form, "tag", queue))


OPERATIONS: dict[str, Operation] = {
    "pause": pause_queue,
    "resume": resume_queue,
    "run-task-now": run_task_now,
    "delete-tag": delete_tag,
    "run-tag-now": run_tag_now,
    "redrive-tag-dead-letters": redrive_tag,
}
"""Action name (the last part of the POST's path) -> what it does."""
