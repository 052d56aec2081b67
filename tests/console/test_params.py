"""Every query parameter of every page and JSON endpoint is read strictly: a value a page cannot
use is a 400 naming the parameter, never a 500 and never silently ignored; a fuzz of every
parameter of every route finds no 5xx and changes nothing."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from pullqueue import Queue, Settings, Task
from pullqueue import pause as pausing
from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.console import create_app
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.console.conftest import CSRF_INPUT, Browser, fill
from tests.support.emulators import shared_emulator_host


def said(response: Any) -> str:
    return html.unescape(response.text)


# The three cursors that answered 500 (OverflowError, the 4300-digit int limit, '²'.isdigit()).
CRASHING_CURSORS = ["1" + "0" * 400 + "~x", "9" * 5001 + "~x", "%C2%B2~x"]


@pytest.mark.parametrize("cursor", CRASHING_CURSORS, ids=["1e400", "5001-digits", "superscript"])
def test_a_cursor_that_crashed_is_a_400_naming_after(browser: Browser, cursor: str) -> None:
    response = browser.get(f"/queues/emails?after={cursor}")
    assert response.status_code == 400
    assert "bad parameter 'after': not a paging cursor" in said(response)
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("after=garbage", "after"),
        ("after=12", "after"),  # no '~'
        ("after=012~t1", "after"),  # not as the page writes it
        ("after=12~bad%20name", "after"),
        ("after=-~t1", "after"),
        ("after=1%00~t", "after"),
        ("tag=" + "x" * 501, "tag"),
        ("tag=%FF", "tag"),  # not UTF-8
        ("tag=%ED%A0%80", "tag"),  # a lone surrogate
        ("tag=alice&tag=bob", "tag"),
        ("tg=alice", "tg"),
        ("page=2", "page"),
        ("%FF=1", "%FF"),
    ],
)
def test_a_value_the_queue_page_cannot_use_is_a_400_naming_it(
    backend: MemoryBackend, browser: Browser, query: str, parameter: str
) -> None:
    response = browser.get(f"/queues/emails?{query}")
    assert response.status_code == 400, response.text[:300]
    assert f"bad parameter {parameter!r}" in said(response)
    assert len(list(backend.list_tasks("emails"))) == 30


def test_good_values_still_work(browser: Browser) -> None:
    assert browser.get("/queues/emails?tag=").status_code == 200  # the empty filter box
    assert browser.get("/queues/emails?tag=alice&after=0~t1").status_code == 200
    assert browser.get("/queues/emails?tag=" + "é" * 250).status_code == 200  # 500 bytes
    assert browser.get("/queues/emails?tag=no+such+tag").status_code == 200
    assert browser.get("/queues/emails/figures?part=subscriptions").status_code == 200


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/?x=1", "x"),
        ("/fragments/queues?x=1", "x"),
        ("/queues/emails/figures?part=all", "part"),
        ("/queues/emails/figures?part=subscriptions&part=subscriptions", "part"),
        ("/queues/emails/dead-letters?limit=5", "limit"),
        ("/go?q=bad%20name", "q"),
        ("/go?q=", "q"),
        ("/go", "q"),
        ("/go?q=emails&tag=x", "tag"),
        ("/?token=abc", "token"),  # no token gate here: not a parameter of this console
        ("/queues/emails/task", "name"),
        ("/queues/emails/task?name=", "name"),
        ("/queues/emails/task?name=bad%20name", "name"),
        ("/queues/emails/task?name=t1%0A", "name"),
        ("/queues/emails/task?name=" + "t" * 501, "name"),
        ("/queues/emails/task?name=t1&name=t2", "name"),
        ("/queues/emails/task?name=t1&tag=alice", "tag"),
        ("/queues/emails/task/payload?name=%FF", "name"),
        ("/queues/emails/task/payload?task=t1", "task"),
        ("/queues/emails/find?name=a%2Fb", "name"),
        ("/queues/emails/find?name=t1&payload=x", "payload"),
        ("/queues/emails/find?payload=" + "x" * 10_001, "payload"),
        ("/queues/emails/find?payload=a&payload=b", "payload"),
        ("/queues/emails/find?q=t1", "q"),
    ],
)
def test_every_page_refuses_what_it_cannot_use(browser: Browser, path: str, parameter: str) -> None:
    response = browser.get(path, follow_redirects=False)
    assert response.status_code == 400
    assert f"bad parameter {parameter!r}" in said(response)


@pytest.mark.parametrize(
    "path", ["/api/queues?x=1", "/api/backlog?since=0", "/api/queues/emails?verbose=1"]
)
def test_json_endpoints_answer_a_json_400(browser: Browser, path: str) -> None:
    response = browser.get(path)
    assert response.status_code == 400
    body = response.json()
    assert body["parameter"] == path.split("?")[1].split("=")[0]
    assert body["error"].startswith(f"bad parameter {body['parameter']!r}")


def test_a_post_with_a_bad_parameter_changes_nothing(
    backend: MemoryBackend, browser: Browser
) -> None:
    browser.get("/queues/emails")
    refused = browser.post("/queues/emails/purge?x=1", {"confirm": "emails"})
    assert refused.status_code == 400 and "bad parameter 'x'" in said(refused)
    assert len(list(backend.list_tasks("emails"))) == 30


def test_the_task_pages_still_work_with_good_values(browser: Browser) -> None:
    assert browser.get("/queues/emails/task?name=t1").status_code == 200
    assert browser.get("/queues/emails/task/payload?name=t1").content == b"payload-1"
    assert browser.get("/queues/emails/find?name=&payload=").status_code == 200  # empty boxes
    found = browser.get("/queues/emails/find?name=&payload=payload-2")
    assert found.status_code == 200 and 'data-name="t2"' in found.text
    assert browser.get("/queues/emails/find?name=t1&payload=").status_code == 200


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("pause", {}),
        ("run-task-now", {"name": "later"}),
        ("delete-tag", {"tag": "alice"}),
        ("run-tag-now", {"tag": "alice"}),
    ],
)
def test_each_new_action_needs_the_typed_name_and_the_origin(
    backend: MemoryBackend, browser: Browser, action: str, form: dict[str, str]
) -> None:
    """Refused without the typed name, refused cross-origin (nothing changed); done once both
    are right (the control: the action does change something)."""
    Queue("emails", backend).add([Task(b"x", name="later", tag="alice", countdown=600)])
    browser.get("/queues/emails")
    before = state(backend)
    unconfirmed = browser.post(f"/queues/emails/{action}", form)
    assert unconfirmed.status_code == 400 and "to confirm" in said(unconfirmed)
    crossed = browser.post(
        f"/queues/emails/{action}",
        {**form, "confirm": "emails"},
        headers={"Origin": "http://evil.test"},
    )
    assert crossed.status_code == 403
    assert state(backend) == before
    done = browser.post(f"/queues/emails/{action}", {**form, "confirm": "emails"})
    assert done.status_code == 200, said(done)[:300]
    assert state(backend) != before


def test_a_read_only_console_refuses_every_new_action(backend: MemoryBackend) -> None:
    app = create_app(backend, read_only=True, sample_in_background=False)
    with TestClient(app) as client:
        browser = Browser(client)
        browser.get("/queues/emails")
        before = state(backend)
        for action, form in [
            ("pause", {}),
            ("run-task-now", {"name": "t5"}),
            ("delete-tag", {"tag": "alice"}),
            ("run-tag-now", {"tag": "alice"}),
        ]:
            refused = browser.post(f"/queues/emails/{action}", {**form, "confirm": "emails"})
            assert refused.status_code == 403 and "read-only" in said(refused), action
        assert state(backend) == before


def test_a_cursor_where_nothing_pages_is_a_400(backend: MemoryBackend) -> None:
    unlisted = DelegatingBackend(backend)
    app = create_app(unlisted, sample_in_background=False)  # type: ignore[arg-type]
    with TestClient(app) as client:
        response = client.get("/queues/emails?after=0~t1")
        assert response.status_code == 400
        assert "bad parameter 'after'" in said(response) and "lists no pages" in said(response)


def test_the_token_gate_lets_its_own_parameter_through() -> None:
    token = "s3cret-token-0123456789"
    backend = MemoryBackend()
    fill(backend, "emails", 3, [None])
    app = create_app(backend, token=token, sample_in_background=False)
    with TestClient(app) as client:
        opened = client.get(f"/queues/emails?token={token}&tag=x")
        assert opened.status_code == 200  # redirected without the token, then served
        again = client.get(f"/queues/emails?token={token}")  # the cookie is there already
        assert again.status_code == 200


# The fuzz: every route, with the parameters it takes and others, values from anywhere.

GETS = {
    "/": [],
    "/go": ["q"],
    "/fragments/queues": [],
    "/api/queues": [],
    "/api/backlog": [],
    "/api/queues/emails": [],
    "/queues/emails": ["tag", "after"],
    "/queues/emails/figures": ["part"],
    "/queues/emails/dead-letters": [],
    "/queues/emails/task": ["name"],
    "/queues/emails/task/payload": ["name"],
    "/queues/emails/find": ["name", "payload"],
    "/static/console.css": [],
}
POSTS = {
    "/queues/emails/look": ["tag"],
    "/queues/emails/purge": ["confirm"],
    "/queues/emails/delete-task": ["confirm", "name", "subscription", "message_id"],
    "/queues/emails/redrive-dead-letters": ["confirm"],
    "/queues/emails/purge-dead-letters": ["confirm"],
    "/queues/emails/no-such-action": ["confirm"],
    "/queues/emails/find": ["name", "payload"],
    "/queues/emails/pause": ["confirm"],
    "/queues/reports/resume": ["confirm"],  # reports is paused (the fixture)
    "/queues/emails/run-task-now": ["confirm", "name"],
    "/queues/emails/delete-tag": ["confirm", "tag"],
    "/queues/emails/run-tag-now": ["confirm", "tag"],
    "/queues/emails/redrive-tag-dead-letters": ["confirm", "tag"],
}
OTHER_NAMES = [
    "tag", "after", "part", "q", "token", "csrf", "x", "", "tag[]", "AFTER", "name", "payload",
]  # fmt: skip
CURSORS = st.one_of(
    st.sampled_from(CRASHING_CURSORS),
    st.from_regex(r"-?[0-9]{1,30}~[a-z0-9_-]{0,5}", fullmatch=True),
    st.integers(min_value=-(10**30), max_value=10**30).map(lambda n: f"{n}~t1"),
    st.builds(lambda n, z: "1" + "0" * n + z, st.integers(0, 500), st.sampled_from(["~x", ""])),
    st.builds(lambda n: "9" * n + "~x", st.integers(4290, 5100)),
    st.text(alphabet="0123456789-~²٣¹\u0660x", max_size=30),
)
VALUES = st.one_of(
    st.text(max_size=40),
    CURSORS,
    st.sampled_from(["", "~", "null", "NaN", "inf", "1e400", "0~t1", "subscriptions", "emails"]),
    st.sampled_from(["t1", "t39", "alice", "bob", "<b>x</b>", "payload-1", "t1\n", " t1"]),
    st.builds(lambda n: "x" * n, st.integers(490, 2000)),
    st.builds(lambda n: "é" * n, st.integers(240, 260)),
)
BAD_BYTES = st.sampled_from(["%", "%ZZ", "%FF", "%ED%A0%80", "%C2", "=", "&&", "a", "+"])


def queries(own: list[str]) -> st.SearchStrategy[str]:
    """Query strings for a route: mostly its own parameters, some others, raw bytes too."""
    names = st.sampled_from(own) if own else st.nothing()
    name = st.one_of(names, names, st.sampled_from(OTHER_NAMES), st.text(max_size=6))
    pair = st.tuples(name, VALUES).map(
        lambda kv: quote(kv[0], safe="") + "=" + quote(kv[1], safe="")
    )
    raw = st.one_of(
        BAD_BYTES,
        st.tuples(name, BAD_BYTES).map(lambda kv: quote(kv[0], safe="") + "=" + kv[1]),
        st.binary(max_size=20).map(lambda b: quote(b, safe="=&%+")),
    )
    return st.lists(st.one_of(pair, pair, pair, raw), max_size=4).map("&".join)


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[tuple[TestClient, MemoryBackend, str]]:
    backend = MemoryBackend()
    fill(backend, "emails", 40, ["alice", "bob", None, "<b>x</b>"])
    Queue("emails", backend).add([Task(b"later", name="future", tag="alice", countdown=3600)])
    fill(backend, "reports", 3, [None])
    pausing.pause(backend, "reports")
    app = create_app(backend, sample_in_background=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        found = CSRF_INPUT.search(client.get("/queues/emails").text)
        assert found is not None
        yield client, backend, found.group(1)


def state(backend: MemoryBackend) -> list[object]:
    """Everything an action could change: each task (name, tag, ETA, retries) and each pause."""
    tasks = [
        sorted(
            (t.name, t.tag, t.eta_posix, t.retry_count, t.payload) for t in backend.list_tasks(q)
        )
        for q in ("emails", "reports")
    ]
    return [*tasks, [pausing.paused_since(backend, q, fresh=True) for q in ("emails", "reports")]]


def check(response: Any, named: bool = True) -> None:
    """No 5xx; a 400 names the parameter (in the JSON body, or the page's message)."""
    assert response.status_code < 500, said(response)[:500]
    if response.status_code == 400 and named:
        if response.headers.get("content-type", "").startswith("application/json"):
            assert response.json()["parameter"] is not None
        else:
            assert re.search(r"bad (parameter|field) ['\"]", said(response)), said(response)


FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("path", list(GETS))
def test_fuzz_every_parameter_of_every_page(
    fuzzed: tuple[TestClient, MemoryBackend, str], path: str
) -> None:
    client, backend, _ = fuzzed
    before = state(backend)

    @FUZZ
    @given(query=queries(GETS[path]))
    def fuzz(query: str) -> None:
        check(client.get(f"{path}?{query}", follow_redirects=False))
        assert state(backend) == before

    fuzz()


@FUZZ
@given(
    name=st.one_of(st.sampled_from(["emails", "reports", "nosuch"]), st.text(max_size=30)),
    rest=st.sampled_from(["", "/figures", "/dead-letters"]),
    query=queries(["tag", "after", "part"]),
)
def test_fuzz_queue_names_in_the_path(
    fuzzed: tuple[TestClient, MemoryBackend, str], name: str, rest: str, query: str
) -> None:
    client, _, _ = fuzzed
    check(client.get(f"/queues/{quote(name, safe='')}{rest}?{query}"))
    check(client.get(f"/api/queues/{quote(name, safe='')}?{query}"))


@pytest.mark.parametrize("path", list(POSTS))
def test_fuzz_every_post_route_changes_nothing_unconfirmed(
    fuzzed: tuple[TestClient, MemoryBackend, str], path: str
) -> None:
    """Any parameters and form fields, with the genuine CSRF token or without: no 5xx, and
    nothing changes unless the queue's name was typed (no task, no ETA, no pause)."""
    client, backend, csrf = fuzzed
    queue = path.split("/")[2]
    fields = st.sampled_from(POSTS[path]) | st.sampled_from(OTHER_NAMES)
    before = state(backend)

    @FUZZ
    @given(
        query=queries([]) | st.just(""),
        form=st.dictionaries(fields, VALUES, max_size=4),
        token=st.booleans(),
    )
    def fuzz(query: str, form: dict[str, str], token: bool) -> None:
        sent = {**form, **({"csrf": csrf} if token else {})}
        if sent.get("confirm") == queue:
            sent["confirm"] = "not-typed"
        origin = {"Origin": "http://testserver"}
        # A 400 here may be the typed confirmation's, which names no parameter.
        check(client.post(f"{path}?{query}", data=sent, headers=origin), named=False)
        assert state(backend) == before

    fuzz()


@pytest.mark.parametrize(
    ("method", "path", "own"),
    [
        ("GET", "/queues/mail", ["tag", "after"]),
        ("GET", "/queues/mail/figures", ["part"]),
        ("GET", "/queues/mail/dead-letters", []),
        ("GET", "/api/queues/mail", []),
        ("GET", "/queues/mail/task", ["name"]),
        ("GET", "/queues/mail/find", ["name", "payload"]),
        ("POST", "/queues/mail/look", ["tag"]),
        ("POST", "/queues/mail/find", ["name", "payload"]),
    ],
)
def test_fuzz_the_pubsub_pages(method: str, path: str, own: list[str]) -> None:
    """The routes whose code differs on Pub/Sub, on the emulator: no 5xx, and a 400 names the
    parameter (the look's and the search's form fields included).

    The queue has 2 shards, not 16: a look or a search pulls every subscription of the queue
    (about 0.1 s each on the emulator), and what is fuzzed here is the parameters, not the
    shard count (a 16-shard queue took 1.9 s a look, 25 looks 35 s)."""
    shared_emulator_host("pubsub")
    project = f"pq-fuzz-{uuid.uuid4().hex[:10]}"
    producer = PubSubBackend(
        project, settings=Settings(pubsub_shards=2), auto_create=True, names=MemoryNameRegistry()
    )
    viewer = PubSubBackend(project, settings=Settings(), auto_create=False)
    try:
        Queue("mail", producer).add([Task(b"x", name=f"t{i}", tag="a") for i in range(3)])
        app = create_app(viewer, sample_in_background=False)
        with TestClient(app, raise_server_exceptions=False) as client:
            found = CSRF_INPUT.search(client.get("/queues/mail").text)
            assert found is not None
            csrf = found.group(1)

            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
            @given(query=queries(own), field=st.sampled_from(own or ["tag"]), value=VALUES)
            def fuzz(query: str, field: str, value: str) -> None:
                if method == "GET":
                    check(client.get(f"{path}?{query}"))
                else:
                    origin = {"Origin": "http://testserver"}
                    check(client.post(path, data={"csrf": csrf, field: value}, headers=origin))

            fuzz()
    finally:
        producer.close()
        viewer.close()
