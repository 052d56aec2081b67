"""The Pub/Sub backend class: legacy pull-queue semantics on one queue's topics and subscriptions.

A lease is a pull plus an ack deadline, delete is an ack (exactly-once delivery reports a stale
one), tags are served by filtered subscriptions or grouped here, and ETAs hide tasks until due;
docs/pubsub.md explains each mapping, its cost and what differs from the legacy queue.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import SplitResult

from pullqueue.adapters.pubsub.acks import AckRounds
from pullqueue.adapters.pubsub.claims import ShardClaims
from pullqueue.adapters.pubsub.deadlines import DeadlineChanges
from pullqueue.adapters.pubsub.duplicates import check_named, no_registry_error
from pullqueue.adapters.pubsub.hand import Hand
from pullqueue.adapters.pubsub.inventory import provisioned_queues
from pullqueue.adapters.pubsub.keeper import LeaseKeeper
from pullqueue.adapters.pubsub.layout import QueueLayout
from pullqueue.adapters.pubsub.leases import Lease, LeaseBook
from pullqueue.adapters.pubsub.pause import PauseMarks, paused_lease
from pullqueue.adapters.pubsub.provision import Provisioner, QueueTopology
from pullqueue.adapters.pubsub.pulls import PullRounds
from pullqueue.adapters.pubsub.republish import Republisher
from pullqueue.adapters.pubsub.rpc import PubSubRpc
from pullqueue.adapters.pubsub.wire import (
    encode,
    new_task_name,
)
from pullqueue.config import Settings
from pullqueue.dedupe.base import NameRegistry
from pullqueue.errors import (
    ConfigurationError,
    DeadlineExceededError,
    Error,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.retry import RetryParameters
from pullqueue.task import QueueStats, Task

log = logging.getLogger(__name__)

PUBLISH_REQUEST_BYTES = 9 * 2**20
"""Bytes of messages per publish request (Pub/Sub's limit is 10 MB)."""
PUBLISH_WAVE_BYTES = 3 * PUBLISH_REQUEST_BYTES
"""Bytes of messages an add has in flight at once (its publish requests run side by side)."""
PUBLISH_TIME_RESOLUTION = 0.002
"""Seconds a purge waits after its cut so later tasks get a later publish time (ms precision)."""
LEASE_TOKEN_SLACK = 1e-6
"""Seconds a task's ETA may differ from its lease's end and still name that lease (datetimes
carry microseconds, lease ends are floats)."""


class PubSubBackend:
    """Pull queues on Cloud Pub/Sub (or its emulator, when PUBSUB_EMULATOR_HOST is set).

    `names`, when given, is the registry that makes task names unique: names are claimed before
    publishing, given back when a publish fails and tombstoned after a successful delete.
    Without one a named add is refused with ConfigurationError, unless `accept_duplicate_names`
    (default PULLQUEUE_ACCEPT_DUPLICATE_NAMES) says to publish named tasks unchecked: the name
    then travels in the `task_name` attribute and duplicates are not detected. The registry is
    the caller's to close, unless `close_names` hands it over.
    """

    def __init__(
        self,
        project: str,
        *,
        settings: Settings | None = None,
        auto_create: bool | None = None,
        names: NameRegistry | None = None,
        close_names: bool = False,
        accept_duplicate_names: bool | None = None,
    ) -> None:
        self.settings = settings = settings or Settings()
        if not project:
            raise ConfigurationError("pubsub:// needs a project: pubsub://PROJECT")
        if settings.pubsub_lease_window <= 2 * settings.pubsub_keeper_period:
            raise ConfigurationError(
                f"PULLQUEUE_PUBSUB_LEASE_WINDOW ({settings.pubsub_lease_window} s) must be more"
                f" than twice PULLQUEUE_PUBSUB_KEEPER_PERIOD ({settings.pubsub_keeper_period} s)"
                " so the keeper renews a lease before its window runs out"
            )
        self.url = f"pubsub://{project}"
        self.project = project
        self.names = names
        self._close_names = close_names
        self.accept_duplicate_names = (
            settings.accept_duplicate_names
            if accept_duplicate_names is None
            else accept_duplicate_names
        )
        self._rpc = PubSubRpc(project, settings.pubsub_rpc_timeout)
        self._provisioner = Provisioner(
            self.rpc, settings, settings.auto_create if auto_create is None else auto_create
        )
        self._book = LeaseBook()
        self._republisher = Republisher(self.rpc, self._book)
        self._acks = AckRounds(
            settings,
            self.rpc,
            self._book,
            self._hand,
            names,
            lambda: self._keeper.poke(),
            DeadlineChanges(),
        )
        """The lease's ack and modify rounds (pubsub/acks.py): grant, renewals, deletes' acks."""
        self._keeper = LeaseKeeper(
            self._book,
            self._acks.renew,
            self._settle_due,
            self._next_release,
            settings.pubsub_keeper_period,
        )
        self._topologies: dict[str, QueueTopology] = {}
        self._topology_lock = threading.Lock()
        self._claims = ShardClaims(self.rpc, lambda queue: len(self.topology(queue).shards))
        self._hands: dict[str, Hand] = {}
        """Queue -> this process's hand of it (pubsub/hand.py): its held tasks and their rules."""
        self._pauses = PauseMarks(
            self.rpc, lambda queue: self.topology(queue).topic, settings.pubsub_pause_check
        )
        self._pulls = PullRounds(settings, self.rpc, self._book, self._republisher, self._hand)
        """The lease calls' pulls (pubsub/pulls.py): probes, gathering, draining, rounds."""
        self._closed = False

    def __repr__(self) -> str:
        return f"PubSubBackend({self.url!r})"

    @property
    def rpc(self) -> PubSubRpc:
        """The Pub/Sub client every call of this backend goes through (pubsub/rpc.py)."""
        return self._rpc

    @rpc.setter
    def rpc(self, rpc: PubSubRpc) -> None:
        # The pull rounds call through it too: a client swapped in (tests point one at a dead
        # server) serves the lease calls' pulls as well.
        self._rpc = rpc
        self._pulls.rpc = rpc
        self._acks.rpc = rpc

    def now(self) -> float:
        return time.time()

    def topology(self, queue: str) -> QueueTopology:
        """The queue's Pub/Sub resources, checked (or created) on first use."""
        if self._closed:
            raise ConfigurationError(
                "this Pub/Sub backend is closed; connect() a new one", queue=queue
            )
        found = self._topologies.get(queue)
        if found is not None:
            return found
        with self._topology_lock:
            found = self._topologies.get(queue)
            if found is None:
                layout = QueueLayout(
                    project=self.project,
                    queue=queue,
                    prefix=self.settings.pubsub_prefix,
                    declared_tags=tuple(self.settings.pubsub_declared_tags.get(queue, ())),
                )
                found = self._provisioner.open(layout)
                # The hand first: a thread that finds the topology finds its hand.
                self._hands[queue] = Hand(
                    queue,
                    found,
                    settings=self.settings,
                    rpc=self.rpc,
                    book=self._book,
                    claims=self._claims,
                    republisher=self._republisher,
                    poke=self._keeper.poke,
                    changes=self._acks.changes,
                )
                self._topologies[queue] = found
            return found

    def _hand(self, queue: str) -> Hand:
        """The queue's hand (the queue's topology was opened first)."""
        return self._hands[queue]

    # Adding

    def check_named_adds(self, queue: str, *, what: str) -> None:
        """Raise the ConfigurationError a named add would get (no registry, duplicates not
        accepted) before anything happens; `what` says what the caller did not do then."""
        if self.names is None and not self.accept_duplicate_names:
            raise no_registry_error(queue, None, what=what)

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        if self.names is None:
            check_named(queue, tasks, accept=self.accept_duplicate_names)
        topology = self.topology(queue)
        now = time.time()
        names = [task.name or new_task_name() for task in tasks]
        outcomes: list[Error | None] = [None] * len(tasks)
        named = [i for i, task in enumerate(tasks) if task.name is not None]
        if self.names is not None and named:
            claims = self.names.claim(queue, [names[i] for i in named])
            for i, outcome in zip(named, claims, strict=True):
                outcomes[i] = outcome
        ready = [i for i, outcome in enumerate(outcomes) if outcome is None]
        etas = {i: tasks[i].resolve_eta(now) for i in ready}
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in ready:
            by_topic[topology.topic_for(tasks[i].tag)].append(i)
        requests = [
            (topic, chunk)
            for topic, indexes in by_topic.items()
            for chunk in self._chunks(tasks, indexes)
        ]

        # Every topic's requests side by side, in waves of a few requests' bytes (each encoded
        # in its thread): an add of small tasks over many tags is one round trip.
        def publish(topic: str, chunk: list[int]) -> list[str]:
            messages = [encode(tasks[i], names[i], etas[i], now) for i in chunk]
            return self.rpc.publish(topic, messages, queue=queue)

        answers: list[list[str] | Error] = []
        wave: list[tuple[str, list[int]]] = []
        wave_bytes = 0
        for n, (topic, chunk) in enumerate(requests):
            wave.append((topic, chunk))
            wave_bytes += sum(tasks[i].size + 1024 for i in chunk)
            if n == len(requests) - 1 or wave_bytes >= PUBLISH_WAVE_BYTES:
                answers += self.rpc.run_each([functools.partial(publish, *r) for r in wave])
                wave, wave_bytes = [], 0
        for (_topic, chunk), message_ids in zip(requests, answers, strict=True):
            if isinstance(message_ids, Error):
                exc = message_ids
                claimed = [names[i] for i in chunk if tasks[i].name is not None]
                if self.names is not None and claimed:
                    self.names.release(queue, claimed)
                for i in chunk:
                    outcomes[i] = exc
                continue
            for i in chunk:
                tasks[i].name = names[i]
                tasks[i].eta_posix = round(etas[i], 6)
            self._book.seen(queue, zip([names[i] for i in chunk], message_ids, strict=False))
        return outcomes

    @staticmethod
    def _chunks(tasks: Sequence[Task], indexes: list[int]) -> Iterable[list[int]]:
        chunk: list[int] = []
        size = 0
        for i in indexes:
            task_bytes = tasks[i].size + 1024
            if chunk and size + task_bytes > PUBLISH_REQUEST_BYTES:
                yield chunk
                chunk, size = [], 0
            chunk.append(i)
            size += task_bytes
        if chunk:
            yield chunk

    # Leasing

    def lease(
        self,
        queue: str,
        lease_seconds: float,
        max_tasks: int,
        *,
        tag: str | None = None,
        group_by_tag: bool = False,
        deadline: float = 10.0,
    ) -> list[Task]:
        topology = self.topology(queue)
        if self._pauses.paused_since(queue) is not None:  # pubsub/pause.py
            return paused_lease(deadline, self.settings.pubsub_pull_wait)
        began = time.monotonic()
        end = began + deadline
        # A lease by tag serves the hand alone: it sees every task the process holds, none
        # being out in another thread's call. Plain leases take any task: several threads'
        # run side by side (never beside one by tag).
        with self._hand(queue).serving(end, shared=not group_by_tag):
            if group_by_tag and tag is not None:
                # It waits for the pulls earlier leases left running first, as below.
                picked = self._pulls.lease_named(queue, topology, tag, max_tasks, end)
            else:
                # What pulls an earlier lease left running bring is in hand first
                # (pubsub/pulls.py).
                self._pulls.settle_flights(topology.sources, end)
                if group_by_tag:
                    picked = self._pulls.lease_oldest(queue, topology, max_tasks, began, end)
                else:
                    picked = self._pulls.lease_any(
                        queue,
                        topology,
                        max_tasks,
                        began,
                        end,
                        self._acks.early_grant(queue, topology, lease_seconds),
                    )
        if group_by_tag and tag is None and not picked:
            picked = self._pulls.await_claimants(queue, topology, max_tasks, end)
        try:
            tasks = self._acks.grant(queue, topology, picked, lease_seconds)
        finally:
            # The shard tokens the lease gave back beside its grant (pubsub/hand.py).
            self._hand(queue).settle_releases()
        if group_by_tag:
            # The next leases by tag of the tasks left in hand need no round trip for their
            # deadline (pubsub/hand.py).
            self._hand(queue).set_ahead(lease_seconds)
        return tasks

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause or resume the queue: its marker topic (pubsub/pause.py)."""
        self._pauses.set(queue, paused, time.time())

    def paused_since(self, queue: str, *, fresh: bool = False) -> float | None:
        """When the queue was paused, None while it runs (a copy at most the pause check old)."""
        self.topology(queue)
        return self._pauses.paused_since(queue, fresh=fresh)

    def _settle_due(self, now: float) -> None:
        """The keeper's pass over the hands: settle held deliveries whose time is up, after
        bringing them what drains out of the turn found (pubsub/pulls.py)."""
        self._pulls.collect_landed()
        for hand in list(self._hands.values()):
            hand.settle_due(now)

    def _next_release(self) -> float | None:
        """When the first held delivery of any queue is due to be settled (POSIX seconds)."""
        times = [hand.next_release() for hand in list(self._hands.values())]
        return min((t for t in times if t is not None), default=None)

    # Changing and ending leases

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        lease = self._current(queue, task)
        with lease.lock:
            self._check_current(lease, task, time.time())
            # A deadline change of this delivery still on its way (the lease's, sent after its
            # answer) must not land after this one (pubsub/deadlines.py).
            if not self._acks.changes.wait([lease.ack_id], self.rpc.timeout):
                raise DeadlineExceededError(
                    "the lease's deadline is still being set on Pub/Sub; retry the change",
                    queue=queue,
                    task=task.name,
                )
            now = time.time()
            self._check_current(lease, task, now)
            seconds = self._acks.deadline_for(lease_seconds)
            source = lease.delivery.subscription
            if self.rpc.modify(source, [lease.ack_id], seconds, queue=queue):
                self._book.remove(lease)
                raise TaskLeaseExpiredError(
                    "Pub/Sub no longer holds this lease for you (it ended, or the task was"
                    " leased again); lease the task again",
                    queue=queue,
                    task=task.name,
                )
            if lease_seconds == 0:
                self._book.remove(lease)
                self._hand(queue).unmark([source])
            lease.expires = now + lease_seconds
            lease.held_until = now + seconds
        task.eta_posix = lease.expires
        task.lease_token = lease.ack_id
        if lease.needs_keeper():
            self._keeper.poke()

    def _current(self, queue: str, task: Task) -> Lease:
        lease = self._book.find(queue, task)
        if lease is None and self._book.was_deleted(queue, task.name or ""):
            raise TombstonedTaskError(
                "the task was deleted; its lease cannot change", queue=queue, task=task.name
            )
        if lease is None:
            raise TaskLeaseExpiredError(
                "this process holds no lease on the task (on Pub/Sub a lease lives with the"
                " process that took it, and only its holder can change or delete the task);"
                " lease the task again",
                queue=queue,
                task=task.name,
            )
        return lease

    @staticmethod
    def _check_current(lease: Lease, task: Task, now: float) -> None:
        if lease.lost:
            raise TaskLeaseExpiredError(
                "Pub/Sub took this lease back before it ended (it could not be renewed in"
                " time); lease the task again",
                queue=lease.queue,
                task=task.name,
            )
        if lease.expires <= now:
            raise TaskLeaseExpiredError(
                "the lease has expired; lease the task again", queue=lease.queue, task=task.name
            )
        if task.eta_posix is None or abs(task.eta_posix - lease.expires) > LEASE_TOKEN_SLACK:
            # The legacy lease token is the task's ETA: a task object whose ETA is not the
            # current lease's end (a stale copy, or one rebuilt by name) holds no lease.
            raise TaskLeaseExpiredError(
                "the task's ETA is not the end of its current lease (the ETA is the lease"
                " token: this task object is stale); use the task the last lease or"
                " modify_task_lease returned",
                queue=lease.queue,
                task=task.name,
            )

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        """Acknowledge each task's lease; raises TaskLeaseExpiredError for the first task whose
        lease is gone, after deleting the others (their was_deleted is then already True).

        A task given by name alone is acked when this process holds a lease on it; otherwise it
        is deleted by name (see _delete_by_name): only a lease's holder can ack on Pub/Sub, so
        the name is tombstoned and the task is dropped wherever it is delivered next.
        """
        self.topology(queue)
        results = [False] * len(tasks)
        failures: list[Error] = []
        by_source: dict[str, list[tuple[int, Lease]]] = defaultdict(list)
        leases = self._book.find_all(queue, tasks)
        for i, (task, lease) in enumerate(zip(tasks, leases, strict=True)):
            if lease is None:
                # A bare name this process holds no lease on: deleted by name below;
                # a lease token that is no longer current: the holder must hear about it.
                if task.lease_token is not None and not self._book.was_deleted(
                    queue, task.name or ""
                ):
                    failures.append(self._no_lease(queue, task))
                continue
            if lease.lost:
                failures.append(self._no_lease(queue, task))
                continue
            by_source[lease.delivery.subscription].append((i, lease))
        unheld = [
            i
            for i, (task, lease) in enumerate(zip(tasks, leases, strict=True))
            if lease is None and task.lease_token is None
        ]
        if unheld:
            for i, done in zip(unheld, self._delete_by_name(queue, tasks, unheld), strict=True):
                results[i] = done
        deleted: list[str] = []
        try:
            self._acks.ack_leases(queue, tasks, by_source, results, failures, deleted)
        finally:
            if self.names is not None and deleted:
                self.names.tombstone(queue, deleted)
            # Queue.delete sets was_deleted from the results; when this call raises, it is
            # set here, so the caller still sees which tasks are gone.
            for task, done in zip(tasks, results, strict=True):
                if done:
                    task.was_deleted = True
        if failures:
            raise failures[0]
        return results

    def _delete_by_name(self, queue: str, tasks: Sequence[Task], indexes: list[int]) -> list[bool]:
        """Delete tasks this process holds no lease on, by name: True per task deleted.

        With a name registry the name is tombstoned there if its task is in the queue (a live
        name), and every process drops the task when it is delivered. Without one, only tasks
        this process published or was delivered (known by message id) count as in the queue,
        and only this process drops them; documented in docs/pubsub.md. A name re-added later is
        a new message, never dropped for the old one.
        """
        names = [tasks[i].name or "" for i in indexes]
        known = [self._book.messages_of(queue, name) for name in names]
        live = [sorted(set(ids) - self._book.dropped_among(ids)) for ids in known]
        if self.names is not None:
            done = self.names.delete(queue, names)
        else:
            done = [bool(ids) for ids in live]
        self._book.drop(m for ids, ok in zip(live, done, strict=True) if ok for m in ids)
        return done

    @staticmethod
    def _no_lease(queue: str, task: Task) -> TaskLeaseExpiredError:
        return TaskLeaseExpiredError(
            "this process holds no current lease on the task; on Pub/Sub only the holder of a"
            " task's lease can delete it: lease the task, then delete it",
            queue=queue,
            task=task.name,
        )

    def retry_parameters(self, queue: str) -> RetryParameters | None:
        """The queue's retry parameters, as its worker subscription carries them (labels
        written by `pullqueue plan`, or a Pub/Sub retry policy); None when it has none."""
        return self.topology(queue).retry

    def dead_letter(self, queue: str, task: Task, error: str) -> bool:
        """Move a task on its last delivery attempt, whose handler failed with `error`, to the
        dead-letter topic now, so `pullqueue dead-letters` shows why it died; True when done.
        False (nothing changed) when it is not on its last attempt, not leased by this process,
        or publishing is denied: release it then, as any failed task."""
        lease = self._book.find(queue, task)
        topology = self._topologies.get(queue)
        if lease is None or topology is None or not self.final_attempt(queue, task):
            return False
        with lease.lock:
            if lease.lost or not self._book.holds(lease):
                return False
            if not self._republisher.dead_letter(queue, topology, lease.delivery, error):
                return False
            self._book.remove(lease)
        return True

    def final_attempt(self, queue: str, task: Task) -> bool:
        """True when the task's current delivery is its last before the dead-letter policy
        moves it aside: released now, it goes to the dead-letter topic, not to a worker."""
        lease = self._book.find(queue, task)
        topology = self._topologies.get(queue)
        if lease is None or topology is None or not lease.delivery.attempt:
            return False
        return lease.delivery.attempt >= topology.max_attempts

    # Whole queue

    def purge(self, queue: str) -> None:
        """Seek every subscription of the queue to now: every task published so far is gone."""
        topology = self.topology(queue)
        # A drain out of the hand's turn brings its tasks to the hand, forgotten below.
        self._pulls.finish_out(queue)
        when = time.time()
        for source in topology.sources:
            self.rpc.seek(source, when, queue=queue)
        # Publish times are kept to the millisecond: a task added right after this call must
        # not share the millisecond the seek cut at.
        time.sleep(max(when + PUBLISH_TIME_RESOLUTION - time.time(), 0.0))
        self._book.drop_queue(queue)
        self._hand(queue).clear()
        if self.names is not None:
            self.names.purge(queue)

    def stats(self, queue: str) -> QueueStats:
        """What this process knows: its leases and held tasks. Pub/Sub's API does not count a
        backlog (Cloud Monitoring does, minutes late), so `approximate` is always True."""
        self.topology(queue)
        now = time.time()
        leased = [le for le in self._book.leases(queue) if not le.lost and le.expires > now]
        held = self._hand(queue).count()
        return QueueStats(
            queue=queue,
            tasks=len(leased) + held,
            oldest_eta=None,
            leased=len(leased),
            approximate=True,
            whole_queue=False,
        )

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str] | None:
        """The names among `names` the name registry holds tombstoned (deleted or purged within
        its tombstone time); None without a registry, which is the only place names are kept."""
        if self.names is None:
            return None
        return self.names.tombstoned(queue, names)

    def list_queues(self) -> list[str]:
        """The queues provisioned in the project (see pubsub/inventory.py)."""
        return provisioned_queues(self.rpc, self.settings.pubsub_prefix)

    def queue_identity(self, queue: str) -> str:
        """The queue's topic (prefix included): what every spelling of the URL reaches."""
        return f"pubsub://projects/{self.project}/topics/{self.settings.pubsub_prefix}{queue}"

    def close(self) -> None:
        """Stop the keeper and give back every lease and held task this process still has."""
        if self._closed:
            return
        self._closed = True
        self._keeper.stop()
        # Pulls a lease left running bring their tasks to the hand: wait for them (each ends
        # within its pull wait), so what they bring is given back below. A watch is not left
        # running again (pubsub/pulls.py).
        self._pulls.closing = True
        self._pulls.finish_out()
        self.rpc.finish_pulls()
        leases = self._book.take_everything()
        held = {queue: hand.close() for queue, hand in self._hands.items()}
        now = time.time()
        try:
            by_source: dict[tuple[str, str], list[str]] = defaultdict(list)
            for lease in leases:
                if not lease.lost and lease.expires > now:
                    by_source[(lease.queue, lease.delivery.subscription)].append(lease.ack_id)
            for (queue, source), ack_ids in by_source.items():
                self.rpc.modify(source, ack_ids, 0, queue=queue)
            for queue, deliveries in held.items():
                self._hands[queue].give_back(deliveries)
        except Error as exc:
            log.warning(
                "closing %s: could not give leases back (%s); they return to their queues"
                " when their ack deadlines run out",
                self.url,
                exc,
            )
        finally:
            # The claims last: a process that wins one drains the shard with the tasks given
            # back above in it, its tags whole.
            self._claims.release_all(
                {q: (t.claims, t.claims_topic) for q, t in self._topologies.items()}
            )
            self.rpc.close()
            if self._close_names and self.names is not None:
                self.names.close()


def from_url(url: SplitResult, options: dict[str, Any]) -> PubSubBackend:
    """Build a PubSubBackend for `pubsub://PROJECT` (options: settings, auto_create, names,
    dedupe_url, accept_duplicate_names). Without `names`, a registry is built from `dedupe_url`
    (default PULLQUEUE_DEDUPE_URL) when one is set, and closed with the backend."""
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ConfigurationError(
            f"expected pubsub://PROJECT, got {url.geturl()!r} (no path or query)"
        )
    settings: Settings = options.get("settings") or Settings()
    names: NameRegistry | None = options.get("names")
    dedupe_url = options.get("dedupe_url", settings.dedupe_url)
    owned = names is None and bool(dedupe_url)
    if owned:
        from pullqueue.dedupe import connect_registry

        names = connect_registry(dedupe_url, settings=settings)
    try:
        return PubSubBackend(
            url.netloc,
            settings=settings,
            auto_create=options.get("auto_create"),
            names=names,
            close_names=owned,
            accept_duplicate_names=options.get("accept_duplicate_names"),
        )
    except BaseException:
        if owned and names is not None:
            names.close()
        raise
