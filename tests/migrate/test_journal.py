"""The journal file: one migration per file, one process at a time, crashed runs recognised."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pullqueue import Task
from pullqueue.errors import ConfigurationError
from pullqueue.migrate.journal import IN_DOUBT, WRITTEN, Journal


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
    assert journal.start_run(60, now=0.0) == ([], [])
    journal.lease_starting(holds_until=1000.0)
    journal.record_leases([leased("a"), leased("b")])
    journal.sending(journal.batch)
    journal.mark_written(journal.batch, ["a"])
    journal.settled(journal.batch, deleted=["a"])  # b was handed back, never sent
    journal.lease_starting(holds_until=2000.0)
    journal.record_leases([leased("c", "tok-c"), leased("d", "tok-d"), leased("e", "old", 5.0)])
    journal.sending(journal.batch)
    journal.mark_written(journal.batch, ["c"])
    journal.lease_starting(holds_until=2000.0)
    journal.record_leases([leased("f", "tok-f")])  # leased, never sent: not in doubt
    journal.close()  # killed: the run never finished

    journal = Journal(path, source="s", destination="d")
    (crashed,), held = journal.start_run(60, now=10.0)
    assert crashed.holds_until == 2000.0 and crashed.all_leases_recorded
    assert journal.states("abcdef") == {"c": WRITTEN, "d": IN_DOUBT, "e": IN_DOUBT}
    assert sorted((h.name, h.lease_token) for h in held) == [
        ("c", "tok-c"),
        ("d", "tok-d"),
        ("f", "tok-f"),
    ]  # e's lease ended by now
    journal.lease_starting(holds_until=3000.0)
    journal.record_leases([leased("d"), leased("c"), leased("z")])
    assert journal.states("dcz") == {"d": IN_DOUBT, "c": WRITTEN}
    journal.sending(journal.batch)
    assert journal.mark_written(journal.batch, ["d"]) == 1  # d may now be there twice
    journal.settled(journal.batch, deleted=["c", "d"])
    assert journal.states("cd") == {}  # gone from the source: nothing left to know
    assert journal.written_count() == 3
    assert journal.possible_duplicates() == (1, 0)
    journal.close()


def test_a_finished_run_that_emptied_the_source_forgets_its_names(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    journal.lease_starting(holds_until=5.0)
    journal.record_leases([leased("a"), leased("b")])
    journal.sending(journal.batch)
    journal.mark_written(journal.batch, ["a"])
    journal.close()
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    assert journal.states("ab") == {"a": WRITTEN, "b": IN_DOUBT}
    journal.finish_run({}, source_empty=False)
    assert journal.states("ab") == {"a": WRITTEN, "b": IN_DOUBT}
    journal.start_run(60, now=0.0)
    journal.finish_run({}, source_empty=True)
    journal.close()
    journal = Journal(path, source="s", destination="d")
    assert journal.states("ab") == {}  # a later task reusing a name is a new task
    journal.close()


def test_a_lease_call_without_its_record_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    journal.lease_starting(holds_until=5.0)
    journal.close()  # killed between the lease call and its record
    journal = Journal(path, source="s", destination="d")
    (crashed,), _ = journal.start_run(60, now=0.0)
    assert not crashed.all_leases_recorded
    journal.close()


def test_failed_tasks_are_held_until_the_run_ends(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    journal.lease_starting(holds_until=5.0)
    journal.record_leases([leased("x", "tok-x")])
    journal.hold_failed([leased("x", "tok-x")])
    journal.settled(journal.batch)
    journal.close()  # killed while holding x
    journal = Journal(path, source="s", destination="d")
    _, held = journal.start_run(60, now=0.0)
    assert [(h.name, h.lease_token) for h in held] == [("x", "tok-x")]
    journal.finish_run({"ok": True})
    journal.close()
    journal = Journal(path, source="s", destination="d")
    assert journal.start_run(60, now=0.0) == ([], [])
    journal.close()


def test_possible_duplicates_outlive_killed_runs_until_one_run_reports_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"

    def killed_while_writing(journal: Journal, *names: str) -> None:
        journal.lease_starting(holds_until=5.0)
        journal.record_leases([leased(name) for name in names])
        journal.sending(journal.batch)
        journal.close()

    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    killed_while_writing(journal, "a", "b")  # window 1: a and b may be there
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    assert journal.possible_duplicates() == (0, 0)  # in doubt only, nothing re-sent yet
    journal.lease_starting(holds_until=5.0)
    journal.record_leases([leased("a"), leased("b")])
    journal.sending(journal.batch)
    assert journal.mark_written(journal.batch, ["a"], ["b"]) == 1  # b was dropped by name
    journal.settled(journal.batch, deleted=["a", "b"])
    killed_while_writing(journal, "c", "d")  # window 2, in a run whose count was not reported
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    assert journal.possible_duplicates() == (0, 1)
    killed_while_writing(journal, "c")  # c sent a second time with no known outcome
    journal = Journal(path, source="s", destination="d")
    journal.start_run(60, now=0.0)
    assert journal.possible_duplicates() == (1, 1)  # c's second unknown send counts at once
    journal.lease_starting(holds_until=5.0)
    journal.record_leases([leased("c"), leased("d")])
    journal.sending(journal.batch)
    assert journal.mark_written(journal.batch, ["c", "d"]) == 2
    assert journal.possible_duplicates() == (3, 1)  # c up to 3 copies, d 2, a 2
    journal.finish_run({})
    journal.start_run(60, now=0.0)
    assert journal.possible_duplicates() == (0, 0)  # reported once, by the run that finished
    journal.close()


def test_a_journal_of_an_earlier_version_gains_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "j"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL,"
        " lease_seconds REAL NOT NULL, lease_calls INTEGER NOT NULL DEFAULT 0,"
        " lease_calls_recorded INTEGER NOT NULL DEFAULT 0, holds_until REAL NOT NULL DEFAULT 0,"
        " written INTEGER NOT NULL DEFAULT 0, report TEXT);"
        " INSERT INTO runs (started_at, lease_seconds) VALUES (0, 60);"
    )
    db.commit()
    db.close()
    journal = Journal(path, source="s", destination="d")
    (crashed,), _ = journal.start_run(60, now=0.0)
    assert crashed.run == 1 and journal.possible_duplicates() == (0, 0)
    journal.close()
