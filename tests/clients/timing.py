"""A ported client's scenario timed on the bare Pub/Sub emulator or through the realistic layer,
with the Pub/Sub calls each of its legacy calls made (tests/support/realpubsub.py counts them).

The bound: a legacy worker takes no more than twice its bare-emulator time on a layer
answering as the service does (10 ms round trips, held empty pulls); when it misses, the calls
per legacy call say which pattern costs the time.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from tests.clients.harness import Call, client_run
from tests.clients.scenarios import SCENARIOS


@dataclass
class Timed:
    """One scenario run: its seconds, its legacy calls, and the layer's calls (start, end)."""

    scenario: str
    backend: str
    seconds: float
    outputs: dict[str, Any]
    calls: list[Call]
    pubsub_calls: list[tuple[float, float]] = field(default_factory=list)
    legacy_calls: int = 0
    """Queue API calls in the timed part (harness.Run.legacy_calls)."""

    def per_call(self) -> dict[str, tuple[int, float, float]]:
        """Legacy call pattern -> (how many, median Pub/Sub calls begun during it, median
        seconds) on the layer; a pattern is the method and its arguments (any named tag as
        "<tag>"), with an empty lease apart."""
        found: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for call in self.calls:
            inside = sum(1 for b, _ in self.pubsub_calls if call.began <= b <= call.ended)
            args = call.args
            if call.method == "lease_tasks_by_tag":
                args = (*args[:2], "<tag>" if args[2] else None, *args[3:])
            key = f"{call.method}{args}"
            if call.method.startswith("lease") and call.outcome[0] == "ok":
                key += " empty" if call.outcome[1][0] == 0 else " tasks"
            found[key].append((inside, call.ended - call.began))
        return {
            key: (
                len(seen),
                statistics.median(n for n, _ in seen),
                statistics.median(s for _, s in seen),
            )
            for key, seen in found.items()
        }


QUEUES = {
    "pull_counter": ("pullq",),
    "visit_counter": ("pullq",),
    "subscription_worker": ("tbans-update-subscriptions",),
    "titan_dirs": ("titan-dirs",),
}
"""Client -> the queues it uses: opened before the clock starts, as a deployed worker finds
them (the first use of a queue creates its topics and subscriptions, about 80 calls)."""


def timed_scenario(name: str, backend: str) -> Timed:
    """Run scenario `name` on "pubsub" (bare) or "layer"; the client's setup is not timed, nor
    the creation of its queues' resources, nor the scenario's check of what the client left
    (an empty lease: on the layer one pull wait)."""
    client, drive = SCENARIOS[name]
    with ExitStack() as stack:
        run = stack.enter_context(client_run(client, backend))
        for queue in QUEUES[client]:
            run.taskqueue.Queue(queue).fetch_statistics()
        del run.calls[:]
        seen = None
        if backend == "layer":
            from tests.support.emulators import shared_emulator_host
            from tests.support.realpubsub import shared_layer

            seen = stack.enter_context(shared_layer(shared_emulator_host("pubsub")).counting())
        began = time.monotonic()
        outputs = drive(run)
        seconds = time.monotonic() - began - run.checking
        spans = [(c.start, c.end) for c in seen._calls] if seen is not None else []
    return Timed(name, backend, seconds, outputs, list(run.calls), spans, run.legacy_calls)
