"""The ported legacy clients of tests/clients, end to end, on the bare Pub/Sub emulator and on
the emulator behind tests/support/realpubsub.py answering as the service (round trips, partial
pulls, filters, held empty pulls, the 600 s cap), in one run.

Each scenario (tests/clients/scenarios.py: the client's adds, its cron or worker calls, the
tasks left) runs --runs times on each; printed per scenario: the median seconds bare and on the
layer, their ratio (the target is <= 2x), the scenario's queue API calls (adds included), the
floor (bare seconds plus one round trip per such call: the legacy service took a round trip per
call, so no backend can do better through the layer) and the layer's seconds against it, and per
legacy call the median calls to Pub/Sub and seconds it took on the layer (what to look at when a
ratio misses). Usage:

    python benchmarks/clients_service.py [--rtt-ms 10] [--runs 3] [--scenarios NAME ...]

The emulator is PUBSUB_EMULATOR_HOST when set, else one started (and stopped) here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=10.0, help="round trip of the layer")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", nargs="+", default=None, help="default: all")
    args = parser.parse_args(argv)
    # Read by tests.support.realpubsub.shared_layer when the first layer run starts it.
    os.environ["PULLQUEUE_TEST_RTT_MS"] = str(args.rtt_ms)
    os.environ.setdefault("PULLQUEUE_DEDUPE_URL", "memory://")

    from tests.clients.scenarios import SCENARIOS
    from tests.clients.timing import timed_scenario
    from tests.support.emulators import shared_emulator_host

    shared_emulator_host("pubsub")
    names = args.scenarios or list(SCENARIOS)
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    print(
        f"layer: {args.rtt_ms:g} ms round trips, partial pulls, filters, held empty pulls, cap;"
        f" medians of {args.runs} runs"
    )
    print(
        f"{'scenario':22} {'bare s':>8} {'layer s':>8} {'ratio':>6} {'calls':>6}"
        f" {'floor s':>8} {'/floor':>7}  (target: ratio <= 2x)"
    )
    slowest: dict[str, list[str]] = {}
    for name in names:
        bare = [timed_scenario(name, "pubsub").seconds for _ in range(args.runs)]
        layered = [timed_scenario(name, "layer") for _ in range(args.runs)]
        b = statistics.median(bare)
        lay = statistics.median(t.seconds for t in layered)
        queue_calls = round(statistics.median(t.legacy_calls for t in layered))
        floor = b + queue_calls * args.rtt_ms / 1000
        print(
            f"{name:22} {b:8.2f} {lay:8.2f} {lay / b:6.1f} {queue_calls:6d} {floor:8.2f}"
            f" {lay / floor:7.1f}",
            flush=True,
        )
        per_call = layered[len(layered) // 2].per_call()
        slowest[name] = [
            f"    {call:42} x{n:<3} {calls:6.1f} calls {seconds * 1000:8.0f} ms each"
            for call, (n, calls, seconds) in sorted(
                per_call.items(), key=lambda kv: -kv[1][0] * kv[1][2]
            )
        ]
    print("per legacy call on the layer (median run): count, Pub/Sub calls and ms per call")
    for name, lines in slowest.items():
        print(f"  {name}")
        print("\n".join(lines))
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
