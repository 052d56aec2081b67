"""Would StreamingPull serve plain (untagged) leasing better than unary Pull? Drain rates and an
idle worker's wake-up, raw client and pullqueue, on tests/support/realpubsub.py's realistic layer.

For each round-trip time (0, 10 and 30 ms by default), one process, medians over --repeat runs,
each drain on a fresh project with --tasks small tasks in one topic and one subscription (ack
deadline 60 s):
- raw unary: google-cloud-pubsub pull(max_messages=100) + acknowledge until all are acked;
- raw StreamingPull: SubscriberClient.subscribe(flow_control=FlowControl(max_messages=100)), the
  callback acking each message, from subscribe() until the last ack is answered;
- pullqueue: Queue.lease(60, 100) + Queue.delete on PubSubBackend (untagged tasks, added through
  the Queue);
- idle wake-up: one message published (straight to the emulator) into an idle subscription, until
  a stream's callback sees it, against a unary pull already waiting (held) on the layer.
The layer's knobs are all on (Knobs.service), but StreamingPull passes through it with only the
round-trip delay on each answer (a full rtt per answer, where a unary call gets half each way):
held empty pulls, partial pulls and filters apply to unary Pull only. The client's own unary
calls beside the stream (the receipt ModifyAckDeadline, Acknowledge) go through every knob.
Observed: the emulator answers a stream about every 50 ms, at most 100 messages (the flow
control) each, and wakes an idle stream after about 50 ms: the stream's columns carry that
pacing of the emulator's own, which the service need not have.
Usage:

    python benchmarks/streaming_pull.py [--rtt-ms 0,10,30] [--repeat 3] [--tasks 2000]

The emulator is PUBSUB_EMULATOR_HOST when set, else one started (and stopped) here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.auth.credentials import AnonymousCredentials
from google.cloud.pubsub_v1 import SubscriberClient as StreamingClient
from google.cloud.pubsub_v1.types import FlowControl
from google.pubsub_v1 import PublisherClient, PubsubMessage, SubscriberClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.support.emulators import start_emulator
from tests.support.realpubsub import Knobs, RealisticPubSub

BATCH = 100
IDLE = 1.0
"""Seconds a subscription sits idle before each wake-up sample."""
WAIT = 60.0
"""Seconds a wake-up sample may take before the run is called broken."""


def pointing_at(host: str) -> contextlib.AbstractContextManager[Any]:
    """PUBSUB_EMULATOR_HOST is `host` inside the block (clients made there use it)."""
    return mock.patch.dict(os.environ, {"PUBSUB_EMULATOR_HOST": host})


class Raw:
    """google-cloud-pubsub's unary clients on `host`, with one topic and one subscription."""

    def __init__(self, host: str, project: str, name: str) -> None:
        with pointing_at(host):
            self.publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
            self.subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        self.topic = self.publisher.create_topic(name=f"projects/{project}/topics/{name}").name
        self.subscription = self.subscriber.create_subscription(
            request={
                "name": f"projects/{project}/subscriptions/{name}",
                "topic": self.topic,
                "ack_deadline_seconds": 60,
            }
        ).name

    def publish(self, count: int) -> None:
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            self.publisher.publish(
                topic=self.topic, messages=[PubsubMessage(data=b"x" * 100) for _ in range(size)]
            )

    def close(self) -> None:
        self.publisher.transport.close()  # type: ignore[no-untyped-call]
        self.subscriber.transport.close()  # type: ignore[no-untyped-call]


def direct_publisher(layer: RealisticPubSub) -> PublisherClient:
    """A publisher straight to the emulator, past the layer (no round trip on the publish)."""
    with pointing_at(layer.target):
        return PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]


def new_project(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def drain_raw(layer: RealisticPubSub, tasks: int) -> tuple[float, int]:
    """tasks/s of pull(100) + acknowledge until `tasks` are acked, and messages delivered twice."""
    raw = Raw(layer.address, new_project("unary"), "raw-drain")
    try:
        raw.publish(tasks)
        seen: set[str] = set()
        again = 0
        start = time.perf_counter()
        while len(seen) < tasks:
            answer = raw.subscriber.pull(
                request={"subscription": raw.subscription, "max_messages": BATCH}, timeout=5
            )
            ids = [m.ack_id for m in answer.received_messages]
            if ids:
                raw.subscriber.acknowledge(
                    request={"subscription": raw.subscription, "ack_ids": ids}
                )
            for m in answer.received_messages:
                again += m.message.message_id in seen
                seen.add(m.message.message_id)
        return tasks / (time.perf_counter() - start), again
    finally:
        raw.close()


@dataclass
class StreamRun:
    rate: float
    """tasks/s from subscribe() until the last Acknowledge call carrying them was answered."""
    again: int
    """Messages delivered more than once."""
    modacks: int
    """ModifyAckDeadline calls: one receipt modack per stream answer, plus lease extensions."""
    acks: int
    """Acknowledge calls (the client sends acks as unary calls, batched up to 10 ms)."""
    close_ms: float
    """cancel() + result() of the streaming future."""


def drain_streaming(layer: RealisticPubSub, tasks: int) -> StreamRun:
    raw = Raw(layer.address, new_project("stream"), "stream-drain")
    with layer.as_emulator():
        client: Any = StreamingClient()
    try:
        raw.publish(tasks)
        lock = threading.Lock()
        seen: set[str] = set()
        again = 0
        done = threading.Event()
        last_ack = 0.0

        def callback(message: Any) -> None:
            nonlocal again, last_ack
            message.ack()
            with lock:
                again += message.message_id in seen
                seen.add(message.message_id)
                if len(seen) == tasks and not done.is_set():
                    last_ack = time.monotonic()
                    done.set()

        with layer.counting() as calls:
            start = time.monotonic()
            future = client.subscribe(
                raw.subscription,
                callback,
                flow_control=FlowControl(max_messages=BATCH),
            )
            try:
                if not done.wait(timeout=max(120.0, tasks / 10)):
                    raise RuntimeError(f"StreamingPull delivered {len(seen)} of {tasks} tasks")
            finally:
                closing = time.monotonic()
                future.cancel()
                future.result(timeout=60)
                close_ms = (time.monotonic() - closing) * 1000
        # The Acknowledge calls end (server side, same clock) once answered: the drain is over
        # when the last of them is, not when the callback called ack().
        end = max([last_ack, *(call.end for call in calls.of("Acknowledge"))])
        methods = calls.by_method()
        return StreamRun(
            tasks / (end - start),
            again,
            methods["ModifyAckDeadline"],
            methods["Acknowledge"],
            close_ms,
        )
    finally:
        client.close()
        raw.close()


def drain_pullqueue(layer: RealisticPubSub, tasks: int) -> float:
    with layer.as_emulator():
        backend = PubSubBackend(new_project("pq"), settings=Settings(), auto_create=True)
    try:
        queue = Queue(f"drain-{uuid.uuid4().hex[:6]}", backend)
        queue.stats()
        for first in range(0, tasks, BATCH):
            queue.add([Task(b"x" * 100) for _ in range(min(BATCH, tasks - first))])
        queue.delete(queue.lease(60, 1))  # the first lease, as pubsub_service.py
        done, start = 1, time.perf_counter()
        while done < tasks:
            leased = queue.lease(60, BATCH)
            queue.delete(leased)
            done += len(leased)
        return (tasks - 1) / (time.perf_counter() - start)
    finally:
        backend.close()


def wake_stream(layer: RealisticPubSub, samples: int) -> list[float]:
    """ms from publishing one message into an idle subscription until a stream's callback has it
    (the first sample, which opens the stream, is left out)."""
    raw = Raw(layer.address, new_project("wakes"), "wake-stream")
    direct = direct_publisher(layer)
    with layer.as_emulator():
        client: Any = StreamingClient()
    arrived: SimpleQueue[float] = SimpleQueue()

    def callback(message: Any) -> None:
        arrived.put(time.monotonic())
        message.ack()

    future = client.subscribe(
        raw.subscription, callback, flow_control=FlowControl(max_messages=BATCH)
    )
    try:
        out: list[float] = []
        for sample in range(samples + 1):
            time.sleep(IDLE)
            start = time.monotonic()
            direct.publish(topic=raw.topic, messages=[PubsubMessage(data=b"x")])
            if sample:
                out.append((arrived.get(timeout=WAIT) - start) * 1000)
            else:
                arrived.get(timeout=WAIT)
        return out
    finally:
        future.cancel()
        future.result(timeout=60)
        client.close()
        direct.transport.close()  # type: ignore[no-untyped-call]
        raw.close()


def wake_held_pull(layer: RealisticPubSub, samples: int) -> list[float]:
    """ms from publishing one message into an idle subscription until a unary pull(100) that was
    already waiting on the layer (held empty) returns it (the first sample left out)."""
    raw = Raw(layer.address, new_project("wakep"), "wake-pull")
    direct = direct_publisher(layer)
    try:
        out: list[float] = []
        for sample in range(samples + 1):
            answers: SimpleQueue[tuple[float, list[str]]] = SimpleQueue()

            def pull(answers: SimpleQueue[tuple[float, list[str]]]) -> None:
                answer = raw.subscriber.pull(
                    request={"subscription": raw.subscription, "max_messages": BATCH},
                    timeout=WAIT,
                )
                answers.put((time.monotonic(), [m.ack_id for m in answer.received_messages]))

            puller = threading.Thread(target=pull, args=(answers,), daemon=True)
            puller.start()
            time.sleep(IDLE)
            start = time.monotonic()
            direct.publish(topic=raw.topic, messages=[PubsubMessage(data=b"x")])
            returned, ids = answers.get(timeout=WAIT)
            puller.join()
            if len(ids) != 1:
                raise RuntimeError(f"a held pull returned {len(ids)} messages, not 1")
            raw.subscriber.acknowledge(request={"subscription": raw.subscription, "ack_ids": ids})
            if sample:
                out.append((returned - start) * 1000)
        return out
    finally:
        direct.transport.close()  # type: ignore[no-untyped-call]
        raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", default="0,10,30")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2000)
    args = parser.parse_args()
    emulator = None
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        emulator = start_emulator("pubsub")
        host = emulator.host
    notes: list[str] = []
    try:
        print(
            f"\n## Draining {args.tasks} untagged tasks, 100 at a time, every knob on"
            f" (StreamingPull sees only the round trip); medians of {args.repeat}"
        )
        print(
            "| rtt ms | raw pull+ack tasks/s | streaming tasks/s | streaming/raw"
            " | pullqueue tasks/s | pullqueue/raw | idle wake-up ms (stream vs held pull) |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        sys.stdout.flush()
        for rtt_ms in [float(x) for x in args.rtt_ms.split(",")]:
            with RealisticPubSub(host, Knobs.service(rtt_ms / 1000)) as layer:
                raws: list[float] = []
                streams: list[StreamRun] = []
                ours: list[float] = []
                raw_again = 0
                for run in range(args.repeat):
                    # Turn about, so a drift of the loaded host falls on each in turn.
                    order = ["raw", "stream", "pq"]
                    for kind in order[run % 3 :] + order[: run % 3]:
                        if kind == "raw":
                            rate, again = drain_raw(layer, args.tasks)
                            raws.append(rate)
                            raw_again += again
                        elif kind == "stream":
                            streams.append(drain_streaming(layer, args.tasks))
                        else:
                            ours.append(drain_pullqueue(layer, args.tasks))
                stream_wake = statistics.median(wake_stream(layer, args.repeat))
                pull_wake = statistics.median(wake_held_pull(layer, args.repeat))
                raw = statistics.median(raws)
                stream = statistics.median(s.rate for s in streams)
                pq = statistics.median(ours)
                print(
                    f"| {rtt_ms:g} | {raw:.0f} | {stream:.0f} | {stream / raw:.2f}x | {pq:.0f}"
                    f" | {pq / raw:.2f}x | {stream_wake:.0f} vs {pull_wake:.0f} |"
                )
                sys.stdout.flush()
                notes.append(
                    f"- {rtt_ms:g} ms: streaming per run: ModifyAckDeadline calls"
                    f" {[s.modacks for s in streams]},"
                    f" Acknowledge calls {[s.acks for s in streams]},"
                    f" redelivered {[s.again for s in streams]}, close ms"
                    f" {[round(s.close_ms) for s in streams]}; raw unary redelivered {raw_again}"
                )
        print("\nStreaming: each answer of the stream costs one receipt ModifyAckDeadline (a unary")
        print("call, sent before the callback runs), so answers ~= ModifyAckDeadline calls.")
        print("\n".join(notes))
    finally:
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
