"""The journal file: one migration per file, one process at a time, crashed runs recognised."""

from __future__ import annotations

from pathlib import Path

import pytest

from pullqueue import Task
from pullqueue.errors import ConfigurationError
from pullqueue.migrate.journal import FAILED, IN_DOUBT, WRITTEN, Journal


def leased(name: str, token: str = "1", expires: float = 2e9) -> Task:
    return Task.restore(payload=b"", name=name, tag=None, eta_posix=expires, lease_token=token)


def test_a_journal_belongs_to_one_migration(tmp_path: Path) -> None:
    path = tmp_path / "j"
    Journal(path, source="memory:// a", destination="pubsub://p a").close()
    with pytest.raises(ConfigurationError, match="belongs to another migration"):
        Journal(path, source="memory:// b", destination="pubsub://p a")


def test_two_processes_cannot_share_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with (
        Journal(path, source="s", destination="d"),
        pytest.raises(ConfigurationError, match="in use by another migration"),
    ):
        Journal(path, source="s", destination="d")
    Journal(path, source="s", destination="d").close()  # free again once closed


def test_a_file_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, these are not SQLite pages " * 100)
    with pytest.raises(ConfigurationError, match="not a usable SQLite file"):
        Journal(path, source="s", destination="d")
    Journal(tmp_path / "other", source="s", destination="d").close()  # the lock was released


def test_a_killed_run_leaves_its_batch_in_doubt_and_its_leases_known(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, source="s", destination="d")
    assert journal.start_run(60) == []
    journal.lease_starting(holds_until=1000.0)
    journal.record_leases([leased("a"), leased("b")])
    journal.mark_written(["a"])
    journal.settled(1)
    journal.lease_starting(holds_until=2000.0)
    journal.record_leases([leased("c", "tok-c"), leased("d", "tok-d")])
    journal.mark_written(["c"])
    journal.close()  # killed: the run never finished

    journal = Journal(path, source="s", destination="d")
    (crashed,) = journal.start_run(60)
    assert crashed.holds_until == 2000.0 and crashed.all_leases_recorded
    assert journal.states(["a", "b", "c", "d"]) == {
        "a": WRITTEN,
        "b": IN_DOUBT,
        "c": WRITTEN,
        "d": IN_DOUBT,
    }
    held = journal.held_leases([crashed.run], now=0.0)
    assert sorted((h.name, h.lease_token) for h in held) == [("c", "tok-c"), ("d", "tok-d")]
    assert journal.written_count() == 2
    journal.close()


def test_a_lease_call_without_its_record_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60)
    journal.lease_starting(holds_until=5.0)
    journal.close()  # killed between the lease call and its record
    journal = Journal(path, source="s", destination="d")
    (crashed,) = journal.start_run(60)
    assert not crashed.all_leases_recorded
    journal.close()


def test_failed_tasks_are_held_then_forgotten_when_the_run_finishes(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", source="s", destination="d")
    journal.start_run(60)
    journal.lease_starting(holds_until=5.0)
    journal.record_leases([leased("x")])
    journal.mark_failed(["x"])
    assert journal.states(["x"]) == {"x": FAILED}
    journal.finish_run({"ok": False})
    assert journal.states(["x"]) == {}
    journal.close()
