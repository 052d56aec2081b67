"""Workers through a layer answering like the Pub/Sub service: leases side by side, by tag.

Two workers (two adapters: two processes as far as the queue knows) of four threads each, and a
real `pullqueue work` process getting SIGTERM while its leases are in flight; every knob of the
layer on at 30 ms round trips.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.worker import Backoff, Worker, batch_handler
from tests.pubsub.conftest import backend_on, service_layer
from tests.support.emulators import shared_emulator_host
from tests.support.processes import lease_what_is_left
from tests.support.realpubsub import RealisticPubSub, start_as_on_the_service
from tests.worker.test_worker_pubsub import sigterm_once_done

RTT = 0.03
PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))


@pytest.fixture(scope="module")
def layer() -> Iterator[RealisticPubSub]:
    yield from service_layer(shared_emulator_host("pubsub"), RTT)


@pytest.fixture
def project() -> str:
    return f"wsvc-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backends(layer: RealisticPubSub, project: str) -> Iterator[list[PubSubBackend]]:
    """Two adapters on one project, taking empty pulls as held from the start."""
    made = [backend_on(layer, project) for _ in range(2)]
    for backend in made:
        start_as_on_the_service(backend.rpc)
    yield made
    for backend in made:
        backend.close()


class InFlight:
    """Counts a queue's lease calls running at once (wraps Queue.lease of one queue object)."""

    def __init__(self, queue: Queue) -> None:
        self.flying = 0
        self.most = 0
        self._lock = threading.Lock()
        lease = queue.lease

        def counted(*args: object, **kwargs: object) -> list[Task]:
            with self._lock:
                self.flying += 1
                self.most = max(self.most, self.flying)
            try:
                return lease(*args, **kwargs)  # type: ignore[arg-type]
            finally:
                with self._lock:
                    self.flying -= 1

        queue.lease = counted  # type: ignore[method-assign]


def test_two_workers_of_four_threads_lease_side_by_side_and_keep_tags_whole(
    backends: list[PubSubBackend],
) -> None:
    name = f"work-{uuid.uuid4().hex[:8]}"
    tags = [f"user-{i}" for i in range(40)]
    adder = Queue(name, backends[0])
    names: list[str] = []
    for round_ in range(10):
        batch = [Task(f"t-{round_}-{i}", tag=tag) for i, tag in enumerate(tags)]
        adder.add(batch)
        names += [t.payload.decode() for t in batch]
    batches: list[list[Task]] = []
    lock = threading.Lock()

    @batch_handler
    def record(tasks: Sequence[Task]) -> None:
        with lock:
            batches.append(list(tasks))

    queues = [Queue(name, backend) for backend in backends]
    flights = [InFlight(queue) for queue in queues]
    workers = [
        Worker(
            queue,
            record,
            group_by_tag=True,
            batch_size=100,
            concurrency=4,
            exit_when_idle=3.0,
            lease_requests_per_second=1000.0,
            backoff=Backoff(0.05, 0.2),
        )
        for queue in queues
    ]
    threads = [
        threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
        for w in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads)
    handled = Counter(t.payload.decode() for batch in batches for t in batch)
    twice = sorted(n for n, c in handled.items() if c > 1)
    assert not twice, f"{len(twice)} tasks handled twice, e.g. {twice[:5]}"
    assert set(handled) <= set(names)
    missing = set(names) - set(handled)
    if missing:
        # Late, not lost: a pull answer the layer dropped for coming after the client's deadline
        # (as the service's can on a loaded host) hides its tasks for their ack deadline (60 s).
        left = lease_what_is_left(Queue(name, backends[0]), len(missing), 90)
        assert {t.payload.decode() for t in left} == missing, f"{len(missing)} not handled"
    assert all(len({t.tag for t in batch}) == 1 for batch in batches), "a batch mixed tags"
    # Each tag's 10 tasks in one batch (the legacy batch), with at most one tag split.
    assert len(batches) <= len(tags) + 1, Counter(batch[0].tag for batch in batches)
    assert all(f.most >= 2 for f in flights), [f.most for f in flights]
    assert sum(w.stats.processed for w in workers) == len(names)


LATE_MOST = 5
"""Most tasks the SIGTERM test below lets come back late (2% of its 250-odd not handled)."""


HANDLER = """
import os, time
from pullqueue.worker import batch_handler

@batch_handler
def handle(tasks):
    time.sleep(0.1)
    with open(os.environ["DONE_FILE"], "a") as out:
        out.write("".join(t.payload.decode() + "\\n" for t in tasks))
"""


def test_sigterm_with_leases_in_flight_loses_nothing(
    layer: RealisticPubSub, backends: list[PubSubBackend], project: str, tmp_path: Path
) -> None:
    name = f"work-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, backends[0])
    tags = [f"user-{i}" for i in range(30)]
    names = [f"t-{r}-{i}" for r in range(10) for i in range(len(tags))]
    for r in range(10):
        queue.add([Task(f"t-{r}-{i}", tag=tag) for i, tag in enumerate(tags)])
    (tmp_path / "batch_handler.py").write_text(textwrap.dedent(HANDLER))
    done_file = tmp_path / "done.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(
        PUBSUB_EMULATOR_HOST=layer.address,
        PULLQUEUE_AUTO_CREATE="1",
        PULLQUEUE_LEASE_REQUESTS_PER_SECOND="1000",
        DONE_FILE=str(done_file),
    )
    dropped = len(layer.dropped)
    worker = subprocess.Popen(
        [
            PULLQUEUE,
            "work",
            name,
            "batch_handler:handle",
            "--url",
            f"pubsub://{project}",
            "--group-by-tag",
            "--batch-size",
            "100",
            "--concurrency",
            "4",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    done, _ = sigterm_once_done(worker, done_file, 40)
    assert len(done) < len(names), "stopped before the queue was drained"
    # Whatever was leased and not handled (those in flight at the signal too) is back at once,
    # but for a task whose pull answer came after its deadline on a loaded host: the answer is
    # lost in transit as the service's are, and the task is out until its ack deadline (60 s),
    # late, not lost (docs/pubsub.md, "Shard claims"). A trace of one such run showed a held
    # pull's answer dropped by the layer as late; CI (load 60-80) met 1 and 2 such tasks whose
    # answers the layer had not marked late (they crossed the deadline in transit). A give-back
    # missed at the signal would leave the whole hand out (40-60 tasks here): at most LATE_MOST
    # may come late, and each within 90 s more.
    expected = set(names) - set(done)
    left = lease_what_is_left(Queue(name, backends[1]), len(expected), 30)
    leased = [t.payload.decode() for t in left]
    assert len(leased) == len(set(leased)) and set(leased) <= expected
    missing = expected - set(leased)
    late = {payload.decode() for payload in layer.dropped[dropped:]}
    assert len(missing) <= LATE_MOST, (
        f"{len(missing)} not back at once: {sorted(missing)[:5]} ({len(missing & late)} of them"
        " in answers the layer dropped as late)"
    )
    if missing:
        came = lease_what_is_left(Queue(name, backends[1]), len(missing), 90)
        assert {t.payload.decode() for t in came} == missing, f"{len(missing)} late, lost"


def test_a_worker_by_a_named_tag_leases_side_by_side_and_takes_only_that_tag(
    backends: list[PubSubBackend],
) -> None:
    name = f"work-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, backends[0])
    for round_ in range(6):
        queue.add(
            [
                Task(f"{tag}/{round_}-{i}", tag=tag)
                for tag in ("user-1", "user-2", "user-3")
                for i in range(10)
            ]
        )
    handled: list[str] = []
    lock = threading.Lock()

    @batch_handler
    def record(tasks: Sequence[Task]) -> None:
        with lock:
            handled.extend(t.payload.decode() for t in tasks)

    flight = InFlight(queue)
    stats = Worker(
        queue,
        record,
        tag="user-1",
        batch_size=5,
        concurrency=4,
        exit_when_idle=2.0,
        lease_requests_per_second=1000.0,
        backoff=Backoff(0.05, 0.2),
    ).run(handle_signals=False)
    assert sorted(handled) == sorted(f"user-1/{r}-{i}" for r in range(6) for i in range(10))
    assert stats.processed == 60
    assert flight.most >= 2
    # The other tags are all there for another process.
    left = lease_what_is_left(Queue(name, backends[1]), 120, 30)
    assert sorted(t.tag or "" for t in left) == ["user-2"] * 60 + ["user-3"] * 60
