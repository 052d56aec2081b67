"""The figures each fault scenario measures (tasks lost, duplicated, time to recover), collected.

Scenarios call `record()`; the test session prints every figure in its terminal summary, and when
PULLQUEUE_FAULTS_REPORT names a file, appends each as a JSON line there for docs/reliability.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Figure:
    """What one run of one fault scenario measured."""

    scenario: str
    tasks: int
    lost: int
    duplicated: int
    recovery_seconds: float | None
    """From the end of the fault to the first task handled after it (None: not measured)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        recovery = "-" if self.recovery_seconds is None else f"{self.recovery_seconds:.1f} s"
        details = "".join(f", {key} {value}" for key, value in self.extra.items())
        return (
            f"{self.scenario}: {self.tasks} tasks, {self.lost} lost, {self.duplicated}"
            f" duplicated, recovered in {recovery}{details}"
        )


FIGURES: list[Figure] = []


def record(
    scenario: str,
    *,
    tasks: int,
    lost: int,
    duplicated: int,
    recovery_seconds: float | None,
    **extra: Any,
) -> Figure:
    """Keep a scenario's figures for the summary (and the report file); return them."""
    figure = Figure(scenario, tasks, lost, duplicated, recovery_seconds, extra)
    FIGURES.append(figure)
    path = os.environ.get("PULLQUEUE_FAULTS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(figure)) + "\n")
    print(figure.line())
    return figure
