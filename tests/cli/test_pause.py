"""`pullqueue pause` / `resume` as a user meets them: on the Pub/Sub emulator (text, --json, a
second pause that changes nothing, stats showing it), and the usage errors (a bad queue name,
a backend that cannot be reached) as one line with exit 2."""

from __future__ import annotations

import json
import uuid

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.cli.support import clean_env, one_error_line, run
from tests.support.emulators import shared_emulator_host


def test_pause_and_resume_on_the_emulator_say_what_changed() -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    backend = PubSubBackend(project, auto_create=True)
    try:
        Queue("emails", backend).add(Task(b"x"))
    finally:
        backend.close()
    env = clean_env(PUBSUB_EMULATOR_HOST=host)
    url = f"pubsub://{project}"
    paused = run("pause", "emails", "--url", url, env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith(f"paused queue 'emails' on {url}: leases answer as an empty")
    assert "within 10 s (PULLQUEUE_PUBSUB_PAUSE_CHECK)" in paused.stdout
    again = run("pause", "emails", "--url", url, "--json", env=env)
    said = json.loads(again.stdout)
    assert again.returncode == 0 and said["paused"] is True and said["changed"] is False
    assert isinstance(said["paused_since"], float)
    stats = run("stats", "emails", "--url", url, env=env)
    assert "paused" in stats.stdout and "yes, since" in stats.stdout
    resumed = run("resume", "emails", "--url", url, "--json", env=env)
    said = json.loads(resumed.stdout)
    assert said == {**said, "paused": False, "paused_since": None, "changed": True}
    stats = run("stats", "emails", "--url", url, "--json", env=env)
    assert json.loads(stats.stdout)["paused"] is False
    missing = run("pause", "nosuchqueue", "--url", url, env=env)
    assert missing.returncode == 1 and "does not exist" in one_error_line(missing.stderr)


def test_usage_errors_are_one_line_and_exit_2() -> None:
    bad = run("pause", "bad name!")
    assert bad.returncode == 2 and "QUEUE" in one_error_line(bad.stderr)
    unreachable = run("resume", "emails", "--url", "appengine://")
    assert unreachable.returncode == 2 and "--url" in one_error_line(unreachable.stderr)
    helped = run("pause", "--help")
    assert "pullqueue pause emails --url pubsub://my-project" in helped.stdout
