"""Batching by tag with several worker processes on Pub/Sub: whole tags per lease, nothing lost.

Four real OS processes run a migrated worker's loop (`lease_tasks_by_tag` -> `delete_tasks`)
through `pullqueue.compat.taskqueue` on one queue until every task is deleted; the shard claims
must keep each tag's tasks together although the processes lease at once. Also: the claims
subscription's tokens, and a shard whose token is missing.
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.claims import ATTR_CENSUS, ATTR_SHARD, Claim
from pullqueue.adapters.pubsub.layout import SHARDS, shard_of
from tests.pubsub.conftest import MakeBackend, raw_pull
from tests.support.processes import lease_what_is_left, run_together

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry

REPO = Path(__file__).resolve().parents[2]

_WORKER = textwrap.dedent(
    """
    import json, logging, sys, time
    from pathlib import Path
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import apiproxy_errors, taskqueue

    # A worker of the legacy API retries what it documents as transient (CI saw the emulator
    # stall 15 s at load 100: a lease's deadline passed, and the worker crashed without this).
    TRANSIENT = (taskqueue.TransientError, apiproxy_errors.DeadlineExceededError)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    project, out, total = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    queue = taskqueue.Queue("batched", backend)
    backend.topology("batched")
    (out / f"ready-{sys.argv[4]}").write_text("")
    while not (out / "go").exists():
        time.sleep(0.01)
    batches, idle, retried = [], time.monotonic(), 0
    while time.monotonic() - idle < 20:
        try:
            batch = queue.lease_tasks_by_tag(60, 1000)
        except TRANSIENT as exc:
            logging.warning("lease_tasks_by_tag: %s: %s", type(exc).__name__, exc.__cause__ or exc)
            retried += 1
            time.sleep(0.5)
            continue
        if batch:
            batches.append([[t.name, t.tag] for t in batch])
            while True:
                try:
                    queue.delete_tasks(batch)
                    break
                except TRANSIENT as exc:
                    logging.warning("delete_tasks: %s: %s", type(exc).__name__, exc)
                    retried += 1
                    time.sleep(0.5)
            idle = time.monotonic()
            (out / "progress").mkdir(exist_ok=True)
            (out / "progress" / sys.argv[4]).write_text(str(sum(map(len, batches))))
        elif sum(int(p.read_text() or 0) for p in (out / "progress").glob("*")) >= total:
            break
    backend.close()
    # Deliveries consumed without handing the task out (given back unleased): billed again.
    given_back = sum(backend._book._skipped.values())
    report = {"batches": batches, "given_back": given_back, "retried": retried}
    (out / f"batches-{sys.argv[4]}.json").write_text(json.dumps(report))
    """
)


PROCESSES = 4


def run_batched_workers(
    make_backend: MakeBackend,
    project: str,
    tmp_path: Path,
    *,
    processes: int,
    tags: int,
    per_tag: int,
    seed: int,
    shards: int | None = None,
) -> tuple[list[Task], list[Any], int]:
    """Add tags x per_tag tasks in random order to queue "batched" (of `shards` shards, else
    the default), run `processes` worker processes started together until every task is
    deleted; the tasks, every worker's batches ([name, tag] pairs), and the deliveries they
    gave back unleased. The workers are told nothing of the count: the label says it."""
    tasks = [Task(b"x", name=f"t{i}", tag=f"tag-{i % tags}") for i in range(tags * per_tag)]
    random.Random(seed).shuffle(tasks)
    # The producer's calls may take as long as the Google client's own publish timeout (60 s):
    # CI saw one publish of this setup go unanswered for the default 10 s, twice in a row, on a
    # loaded host; the workers below keep the default.
    options: dict[str, Any] = {"accept_duplicate_names": True, "pubsub_rpc_timeout": 60.0}
    if shards is not None:
        options["pubsub_shards"] = shards
    producer = Queue("batched", make_backend(**options))
    for start in range(0, len(tasks), 100):
        producer.add(tasks[start : start + 100])
    (tmp_path / "progress").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PULLQUEUE_PUBSUB_SHARDS"}
    env["PULLQUEUE_ACCEPT_DUPLICATE_NAMES"] = "1"
    run_together(
        [
            [sys.executable, "-c", _WORKER, project, str(tmp_path), str(len(tasks)), str(n)]
            for n in range(processes)
        ],
        tmp_path,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    reports = [json.loads((tmp_path / f"batches-{n}.json").read_text()) for n in range(processes)]
    batches = [batch for report in reports for batch in report["batches"]]
    names = [name for batch in batches for name, _ in batch]
    # None lost, none twice; said in counts (a list diff of 4,000 names was cut before them).
    counts = Counter(names)
    expected = {str(t.name) for t in tasks}
    missing, twice = expected - set(counts), sorted(n for n, c in counts.items() if c > 1)
    # Late is not lost: a pull answer that reached a worker after its deadline (CI saw 1-2 of
    # 4,000 at load 60-150) hides its tasks for their 60 s ack deadline, past the workers' 20 s
    # of idle (docs/pubsub.md). Another process leases them within 90 s, as the benchmark does.
    looker = make_backend()
    tokens = free_tokens(looker, "batched") if missing else []
    left = lease_what_is_left(Queue("batched", looker), len(missing), RECOVER_SECONDS)
    late = {str(task.name) for task in left}
    assert late <= missing, f"leased after the workers, not theirs to miss: {late - missing}"
    lost = sorted(missing - late)
    assert not lost and not twice and set(counts) <= expected, (
        f"{len(lost)} of {len(expected)} lost (e.g. {lost[:5]}; {len(late)} more came late),"
        f" {len(twice)} leased twice (e.g. {twice[:5]}), over {len(batches)} batches"
    )
    # Late stays the exception a loaded machine makes, not a way of leasing; said when it came,
    # with the tags they had and what the workers warned of.
    if late:
        tag_of = {str(t.name): t.tag for t in tasks}
        by_tag = Counter(tag_of[name] for name in late).most_common(8)
        warned = sorted(
            {
                line[:300]
                for log in tmp_path.glob("stderr-*.txt")
                for line in log.read_text(errors="replace").splitlines()
                if ("WARNING" in line or "Error" in line) and "uniqueness check" not in line
            }
        )[:20]
        said = (
            f"{len(late)} of {len(expected)} came late, by tag {by_tag}; free shard tokens after"
            f" the workers: {tokens}; warned: {warned}"
        )
        assert len(late) <= len(expected) // 100, said
        warnings.warn(said, stacklevel=2)
    if retried := sum(report["retried"] for report in reports):
        warnings.warn(f"the workers retried {retried} calls after a transient error", stacklevel=2)
    assert all(len({tag for _, tag in batch}) == 1 for batch in batches)  # no mixed batch
    return tasks, batches, sum(report["given_back"] for report in reports)


RECOVER_SECONDS = 90.0


def free_tokens(backend: Any, queue: str) -> list[int]:
    """The shards whose claim token is free (pulled and given back at once)."""
    claims = backend.topology(queue).claims
    pulled = backend.rpc.pull(claims, 1000, queue=queue, wait=1.0, budget=10.0)
    if pulled:
        backend.rpc.modify(claims, [m.ack_id for m in pulled], 0, queue=queue)
    return sorted(
        int(m.message.attributes[ATTR_SHARD]) for m in pulled if ATTR_SHARD in m.message.attributes
    )


def assert_whole_tags(
    batches: list[Any], *, tags: int, per_tag: int, share: float, spare: int
) -> None:
    """At least `share` of the tasks leased in whole-tag leases (the legacy queue leases every
    tag whole), and at most `spare` leases more than there are tags."""
    sizes = sorted(len(batch) for batch in batches)
    in_whole_tags = sum(size for size in sizes if size == per_tag)
    assert in_whole_tags >= share * tags * per_tag, sizes
    assert len(batches) <= tags + spare, sizes


def test_four_processes_lease_whole_tags_and_lose_nothing(
    make_backend: MakeBackend, project: str, tmp_path: Path
) -> None:
    # About 12 tags a shard, so processes meet on shards: without claims they split its tags
    # (measured: 82-96% of tasks in whole-tag leases, 252-286 leases; with claims 97-99%,
    # 211-232; probing only shards whose token the process holds, every tag whole).
    tags, per_tag = 200, 10
    tasks, batches, given_back = run_batched_workers(
        make_backend, project, tmp_path, processes=PROCESSES, tags=tags, per_tag=per_tag, seed=7
    )
    # A process drains a shard only while it holds its token, and probes no other's shard.
    assert_whole_tags(batches, tags=tags, per_tag=per_tag, share=0.98, spare=4)
    # Billed deliveries: one a task plus those given back unleased (the target: 1.1).
    assert (len(tasks) + given_back) / len(tasks) <= 1.1, given_back


def test_auto_create_publishes_one_token_per_shard(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("tokens")
    tokens = raw_pull(subscriber, topology.claims)  # type: ignore[arg-type]
    assert sorted(t.message.attributes.get(ATTR_SHARD, "") for t in tokens) == sorted(
        ["", *map(str, range(SHARDS))]
    )
    census = [t for t in tokens if ATTR_SHARD not in t.message.attributes]
    assert dict(census[0].message.attributes) == {ATTR_CENSUS: "1"}


def test_a_claimed_shard_is_not_claimed_twice_and_comes_back_when_released(
    make_backend: MakeBackend,
) -> None:
    first, second = make_backend(), make_backend()
    topology = first.topology("claimed")
    second.topology("claimed")
    claim = (topology.claims, topology.claims_topic)
    assert first._claims.claim("claimed", *claim, 5) is Claim.OWNED
    assert second._claims.claim("claimed", *claim, 5) is Claim.TAKEN
    assert second._claims.claim("claimed", *claim, 6) is Claim.OWNED
    first._claims.release("claimed", *claim, {5}, renew_before=0.0)
    assert second._claims.claim("claimed", *claim, 5) is Claim.OWNED


def test_a_missing_token_is_published_again(
    make_backend: MakeBackend, raw: tuple[object, object], monkeypatch: object
) -> None:
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("healed")
    claim = (topology.claims, topology.claims_topic)
    # Shard 3's token is lost (acknowledged behind the adapter's back).
    tokens = raw_pull(subscriber, topology.claims)  # type: ignore[arg-type]
    lost = [t.ack_id for t in tokens if t.message.attributes[ATTR_SHARD] == "3"]
    subscriber.acknowledge(subscription=topology.claims, ack_ids=lost)  # type: ignore[attr-defined]
    subscriber.modify_ack_deadline(  # type: ignore[attr-defined]
        subscription=topology.claims,
        ack_ids=[t.ack_id for t in tokens if t.ack_id not in lost],
        ack_deadline_seconds=0,
    )
    assert backend._claims.claim("healed", *claim, 3) is Claim.TAKEN
    # Once no process has seen it for the claims' patience, a worker publishes it again.
    backend._claims._started -= 3600
    backend._claims._seen["healed"][3] = time.monotonic() - 3600
    assert backend._claims.claim("healed", *claim, 3) is Claim.TAKEN
    assert backend._claims.claim("healed", *claim, 3) is Claim.OWNED


def _hold_every_token(subscriber: Any, topology: Any) -> list[str]:
    """Pull every token and the census behind the adapters' backs (as other processes pulling
    them at the same moment would)."""
    tokens = raw_pull(subscriber, topology.claims)
    assert len(tokens) == SHARDS + 1
    return [t.ack_id for t in tokens]


def _give_back(subscriber: Any, topology: Any, ack_ids: list[str]) -> None:
    subscriber.modify_ack_deadline(
        subscription=topology.claims, ack_ids=ack_ids, ack_deadline_seconds=0
    )


def test_a_process_that_never_saw_a_token_looks_again_before_draining_unclaimed(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # At start-up, processes pulling every token to find their own can leave none free for a
    # moment; a process concluding "no tokens" then drains a shard another will claim.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("startup")
    held = _hold_every_token(subscriber, topology)
    threading.Timer(0.5, _give_back, (subscriber, topology, held)).start()
    claim = (topology.claims, topology.claims_topic)
    assert backend._claims.claim("startup", *claim, 3) is Claim.OWNED


def test_a_hand_drained_without_tokens_is_served_not_given_back(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # More processes than shards: every token is held, so this process drains a shard
    # unclaimed. When the shard's token turns up with another process, the tasks in this
    # process's hand are still served here: giving them back would cost each a delivery.
    _, subscriber = raw
    extra, claimant = make_backend(), make_backend()
    topology = extra.topology("crowded")
    claimant.topology("crowded")
    tags = [f"t-{i}" for i in range(100_000) if shard_of(f"t-{i}") == 5][:3]
    queue = Queue("crowded", extra)
    for tag in tags:
        queue.add([Task(b"x", name=f"{tag}-{i}", tag=tag) for i in range(4)])
        time.sleep(0.01)  # publish times in this order
    held = _hold_every_token(subscriber, topology)
    began = time.monotonic()
    first = queue.lease(60, 100, group_by_tag=True)
    took = time.monotonic() - began
    # (CI once saw this lease answer [] twice in a row, beside an emulator call unanswered for
    # 10 s: the lease's time, with the report's stall watch, tells a stall from a defect.)
    assert [t.tag for t in first] == [tags[0]] * 4, f"{len(first)} tasks in {took:.1f} s"
    _give_back(subscriber, topology, held)
    claim = (topology.claims, topology.claims_topic)
    assert claimant._claims.claim("crowded", *claim, 5) is Claim.OWNED
    second = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in second] == [tags[1]] * 4
    assert extra._book._skipped == {}  # nothing was given back to be delivered again


def test_a_duplicate_token_is_removed_by_the_process_holding_its_shard(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # A process that missed shard 5's token for long enough published another; the holder of
    # shard 5 acknowledges the second one when it comes across it, so one process drains it.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("deduped")
    claim = (topology.claims, topology.claims_topic)
    backend._claims.publish("deduped", topology.claims_topic, [5])
    assert backend._claims.claim("deduped", *claim, 5) is Claim.OWNED
    for shard in range(SHARDS):  # pulls every free token on the way, the duplicate included
        assert backend._claims.claim("deduped", *claim, shard) is Claim.OWNED
    # The second census (published with the duplicate) went too: one is left, never held.
    left = raw_pull(subscriber, topology.claims)  # type: ignore[arg-type]
    assert [dict(t.message.attributes) for t in left] == [{ATTR_CENSUS: "1"}]
    subscriber.modify_ack_deadline(  # type: ignore[attr-defined]
        subscription=topology.claims, ack_ids=[t.ack_id for t in left], ack_deadline_seconds=0
    )
    backend._claims.release("deduped", *claim, set(range(SHARDS)), renew_before=0.0)
    tokens = [
        t
        for t in raw_pull(subscriber, topology.claims)  # type: ignore[arg-type]
        if ATTR_SHARD in t.message.attributes
    ]
    assert sorted(int(t.message.attributes[ATTR_SHARD]) for t in tokens) == list(range(SHARDS))


def _hold_tokens(subscriber: Any, topology: Any, shards: set[int]) -> list[str]:
    """Hold the given shards' tokens behind the adapters' backs (as other processes serving
    those shards would), giving every other claim message back: their ack ids."""
    tokens = raw_pull(subscriber, topology.claims)
    kept = [t.ack_id for t in tokens if t.message.attributes.get(ATTR_SHARD) in map(str, shards)]
    others = [t.ack_id for t in tokens if t.ack_id not in kept]
    if others:
        _give_back(subscriber, topology, others)
    assert len(kept) == len(shards)
    return kept


def _tags_of_shard(shard: int, count: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}-{i}" for i in range(100_000) if shard_of(f"{prefix}-{i}") == shard][:count]


def test_a_lease_leaves_the_shards_other_processes_hold_alone(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # Another process serves shard 5 (it holds the token). Its tasks are the oldest, but a
    # lease here must not take even their first one: that process would then lease that tag
    # in two parts. It leases the tag of shard 9 instead, and gives nothing back.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("elsewhere")
    queue = Queue("elsewhere", backend)
    theirs, mine = _tags_of_shard(5, 1)[0], _tags_of_shard(9, 1)[0]
    queue.add([Task(b"x", name=f"theirs-{i}", tag=theirs) for i in range(5)])
    time.sleep(0.05)
    queue.add([Task(b"x", name=f"mine-{i}", tag=mine) for i in range(5)])
    held = _hold_tokens(subscriber, topology, {5})
    leased = queue.lease(60, 100, group_by_tag=True)
    assert sorted(str(t.name) for t in leased) == [f"mine-{i}" for i in range(5)]
    assert backend._book._skipped == {}  # nothing of shard 5 was taken and given back
    on_shard = raw_pull(subscriber, topology.shards[5])  # type: ignore[arg-type]
    assert sorted(m.message.attributes["task_name"] for m in on_shard) == [
        f"theirs-{i}" for i in range(5)
    ]
    _give_back(subscriber, topology, held)


def test_a_process_starting_while_others_hold_every_token_waits_for_one(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # More processes than shards: the others hold all 16 tokens. The census (published with
    # the tokens, never held) tells this process tokens exist, so it leases nothing rather
    # than drain a shard unclaimed and split its tags with the process that holds it; once a
    # token is free it leases that shard's tag whole.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("waiting")
    queue = Queue("waiting", backend)
    tag = _tags_of_shard(3, 1)[0]
    queue.add([Task(b"x", name=f"w-{i}", tag=tag) for i in range(6)])
    held = _hold_tokens(subscriber, topology, set(range(SHARDS)))
    assert queue.lease(60, 100, group_by_tag=True, deadline=3.0) == []
    assert backend._book._skipped == {}
    _give_back(subscriber, topology, held)
    leased = queue.lease(60, 100, group_by_tag=True)
    assert sorted(str(t.name) for t in leased) == [f"w-{i}" for i in range(6)]


def test_a_look_gives_back_what_it_does_not_keep_at_once_while_other_processes_hold_tokens(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # A lease's look kept the tokens it did not want, and the census, until the call ended (a
    # later claim in the call took one without a pull). With 32 busy processes a look was under
    # way in nearly every moment: a starting process saw neither token nor census for its 3 s,
    # drained shards unclaimed and split their tags (0.53-0.80x the legacy batches), and with
    # 2 x 4 another process's claim pulled the claims subscription again and again, each pull
    # held its wait (1.0-1.1 s a claim). Now, while other processes hold tokens, what the look
    # does not keep goes back at once.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("busy")
    held = _hold_tokens(subscriber, topology, {0})
    claims = backend._claims
    grab = claims.grab("busy", topology.claims, topology.claims_topic, {5}, defer=True)
    assert grab.won == {5} and grab.elsewhere
    # The call is still under way (nothing released): what another process sees now.
    others = sorted([str(k) for k in range(SHARDS) if k not in (0, 5)] + ["census"])
    seen: list[Any] = []
    until = time.monotonic() + 5.0
    while time.monotonic() < until and len(seen) < len(others):
        time.sleep(0.05)
        if seen:
            _give_back(subscriber, topology, [t.ack_id for t in seen])
        seen = raw_pull(subscriber, topology.claims)
    assert sorted(t.message.attributes.get(ATTR_SHARD, "census") for t in seen) == others
    _give_back(subscriber, topology, [t.ack_id for t in seen] + held)
    # The call's release gives back the token it kept, nothing twice.
    claims.release("busy", topology.claims, topology.claims_topic, {5}, 0.0)
    back = raw_pull(subscriber, topology.claims)
    assert sorted(t.message.attributes.get(ATTR_SHARD, "census") for t in back) == sorted(
        [str(k) for k in range(SHARDS)] + ["census"]
    )


def test_a_process_alone_keeps_what_its_look_does_not_want_until_the_call_ends(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    # Alone (every token seen free), a look keeps the tokens it does not want for a later
    # claim in the same call, and the census with them: one call gives them all back.
    _, subscriber = raw
    backend = make_backend()
    topology = backend.topology("alone")
    claims = backend._claims
    grab = claims.grab("alone", topology.claims, topology.claims_topic, {5}, defer=True)
    assert grab.won == {5} and not grab.elsewhere
    assert raw_pull(subscriber, topology.claims) == []
    assert claims.claim("alone", topology.claims, topology.claims_topic, 7, defer=True) is (
        Claim.OWNED
    )
    claims.release("alone", topology.claims, topology.claims_topic, {5, 7}, 0.0)
    back = raw_pull(subscriber, topology.claims)
    assert sorted(t.message.attributes.get(ATTR_SHARD, "census") for t in back) == sorted(
        [str(k) for k in range(SHARDS)] + ["census"]
    )


def test_more_processes_than_shards_lease_whole_tags(
    make_backend: MakeBackend, project: str, tmp_path: Path
) -> None:
    # Eight real worker processes on a queue of 4 shards: four hold a token at a time, the
    # others wait for one instead of draining shards unclaimed (which split each tag between a
    # claimant and an unclaimed drainer: measured 0.35x the legacy batches at 32 processes on
    # 16 shards), and no process takes heads of a shard another drains.
    tags, per_tag = 40, 10
    _, batches, _ = run_batched_workers(
        make_backend, project, tmp_path, processes=8, tags=tags, per_tag=per_tag, seed=5, shards=4
    )
    assert_whole_tags(batches, tags=tags, per_tag=per_tag, share=0.95, spare=2)


def test_a_fleet_of_32_processes_leases_whole_tags(
    make_backend: MakeBackend, project: str, tmp_path: Path
) -> None:
    # 32 real worker processes started together on 16 shards, twice as many as there are
    # tokens: those without one wait for one. Every process sees the census at start-up although
    # the others' looks are under way in nearly every moment (measured before the census went
    # back at once: 11 of 32 processes concluded the queue had no tokens, drained shards
    # unclaimed and split their tags, 0.53-0.80x the legacy batches on
    # benchmarks/tag_batching.py --processes 32).
    tags, per_tag = 200, 20
    _, batches, _ = run_batched_workers(
        make_backend, project, tmp_path, processes=32, tags=tags, per_tag=per_tag, seed=11
    )
    assert_whole_tags(batches, tags=tags, per_tag=per_tag, share=0.95, spare=10)
