"""Ported public legacy clients, run unchanged but for their import, agree with the SDK stub.

Each client in tests/clients/ported is kept twice: `<client>_sdk.py` importing
`google.appengine.api.taskqueue` (and `apiproxy_errors`), `<client>_pullqueue.py` importing
`pullqueue.compat`. Each scenario runs the first on Google's SDK stub and the second on memory://
and on the Pub/Sub emulator, once as is and once with the first lease running out of its
deadline (a slow service). What the client observes must be the same: the calls it makes with
their batch sizes and outcomes, the exceptions it catches and logs, and what it produces.
Where Pub/Sub cannot agree, the difference is documented in docs/semantics.md.
"""

from __future__ import annotations

import difflib
from typing import Any

import pytest

from tests.clients.harness import CLIENTS, PORTED, client_run
from tests.clients.scenarios import SCENARIOS

IMPORTS = {
    "from google.appengine.api import taskqueue": "from pullqueue.compat import taskqueue",
    "from google.appengine.runtime import apiproxy_errors": (
        "from pullqueue.compat import apiproxy_errors"
    ),
}
QUICK = [name for name in SCENARIOS if name != "titan_big_window"]


def _observe(scenario: str, backend: str, fail_first_lease: bool = False) -> dict[str, Any]:
    client, drive = SCENARIOS[scenario]
    with client_run(client, backend, fail_first_lease=fail_first_lease) as run:
        outputs = drive(run)
    return {"outputs": outputs, **run.observed()}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_two_copies_differ_only_in_their_imports(client: str) -> None:
    legacy = (PORTED / f"{client}_sdk.py").read_text().splitlines()
    ours = (PORTED / f"{client}_pullqueue.py").read_text().splitlines()
    assert len(legacy) == len(ours)
    changed = [(a.strip(), b.strip()) for a, b in zip(legacy, ours, strict=True) if a != b]
    assert changed and all(IMPORTS.get(a) == b for a, b in changed), "\n".join(
        difflib.unified_diff(legacy, ours, lineterm="")
    )


def test_every_client_has_a_scenario() -> None:
    assert {client for client, _ in SCENARIOS.values()} == set(CLIENTS)


@pytest.mark.parametrize("fail_first_lease", [False, True], ids=["as-is", "slow-lease"])
@pytest.mark.parametrize("scenario", QUICK)
def test_on_memory_the_client_sees_what_it_sees_on_the_sdk(
    scenario: str, fail_first_lease: bool
) -> None:
    legacy = _observe(scenario, "sdk", fail_first_lease)
    assert _observe(scenario, "memory", fail_first_lease) == legacy


@pytest.mark.parametrize("fail_first_lease", [False, True], ids=["as-is", "slow-lease"])
@pytest.mark.parametrize("scenario", QUICK)
def test_on_pubsub_the_client_sees_what_it_sees_on_the_sdk(
    scenario: str, fail_first_lease: bool
) -> None:
    legacy = _observe(scenario, "sdk", fail_first_lease)
    assert _observe(scenario, "pubsub", fail_first_lease) == legacy


@pytest.mark.parametrize("scenario", QUICK)
def test_through_the_service_layer_the_client_sees_what_it_sees_on_the_sdk(scenario: str) -> None:
    """The same on a Pub/Sub that answers like the service (tests/support/realpubsub.py: round
    trips, partial pulls, filters, held empty pulls, the cap): its pulls bring a share of what
    waits and an empty one is held, and the client must still see what it saw on the SDK.
    benchmarks/clients_service.py times these runs against the bare emulator."""
    legacy = _observe(scenario, "sdk")
    assert _observe(scenario, "layer") == legacy


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "pubsub"])
def test_a_big_window_comes_out_whole_as_on_the_sdk(backend: str) -> None:
    """1,200 tasks of one tag between two small windows: the Titan consumer gets 1,000, then
    the other 200 by tag, then the next window, as on the legacy queue."""
    legacy = _observe("titan_big_window", "sdk")
    assert _observe("titan_big_window", backend) == legacy
