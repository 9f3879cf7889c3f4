"""``GET jupyter-air/notifications``: the caller's JupyterLab notifications, as their
open tabs long-poll for them, against a real Jupyter server.

The server's identity provider says who calls by a header (as JupyterHub's does for the
users an owner shares their server with): alice's notifications are hers alone.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.jobs.store import JobStore
from jupyter_air.notify.message import Link, Message
from jupyter_air.notify.outbox import Notice
from jupyter_air.notify.targets import Channel, Event, Target, Trigger
from jupyter_air.server.notifications_handlers import MAX_WAITING, NotificationsHandler, Watch
from tests.server.test_server_permissions import jp_server_config  # noqa: F401 - header identities
from tests.waits import until_async

T = TypeVar("T")

LAB = Target(Channel.JUPYTERLAB, "", (Trigger(Event.FAILURE),))
EMAIL = Target(Channel.EMAIL, "alice@example.com", (Trigger(Event.FAILURE),))
ROUTE = "jupyter-air/notifications"


def failure(job_id: str, owner: str) -> Message:
    return Message(
        event=Event.FAILURE,
        title=f"air job {job_id} failed: rank 1 exited with code 1",
        level="error",
        owner=owner,
        facts=(("Job", job_id), ("Owner", owner)),
        lines=("Traceback (most recent call last):", "ValueError: bad batch"),
        links=(Link("MLflow run", "http://mlflow.example/#/experiments/1/runs/r1"),),
        command=f"air logs {job_id}",
        job_id=job_id,
    )


def post(store: JobStore, owner: str, job_id: str, target: Target = LAB) -> int:
    """A job's failure notification, as its supervisor posts it; its id."""
    notice = Notice(
        f"job:{job_id}:end#{target.channel}", owner, target, failure(job_id, owner), job_id=job_id
    )
    (new,) = store.outbox.post([notice])
    return new


async def poll(jp_fetch: Any, who: str, **params: Any) -> Any:
    response = await jp_fetch(ROUTE, params=params, headers={"X-Test-User": who})
    return json.loads(response.body)


def watch_of(jp_serverapp: Any) -> Watch:
    """The server's one watch of the outbox, which counts the polls waiting."""
    app = jp_serverapp.extension_manager.extension_points["jupyter_air"].app
    (kwargs,) = [h[2] for h in app.handlers if h[1] is NotificationsHandler]
    watch: Watch = kwargs["watch"]
    return watch


async def timed(call: Awaitable[T]) -> tuple[T, float]:
    started = time.monotonic()
    result = await call
    return result, time.monotonic() - started


class RawPoll:
    """A poll on a connection of its own, which the test may drop (as a closed tab does);
    the test client shares a few connections only."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str, headers: dict[str, str]) -> RawPoll:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        return cls(reader, writer)

    async def answer(self, timeout: float = 30.0) -> tuple[int, Any]:
        data = await asyncio.wait_for(self.reader.read(), timeout)
        self.writer.close()
        status_line, _, rest = data.partition(b"\r\n")
        body = rest.partition(b"\r\n\r\n")[2]
        return int(status_line.split()[1]), json.loads(body) if body else None

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def raw_poll(
    jp_fetch: Any,  # the server listens
    http_server_port: tuple[Any, int],
    jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> Callable[..., Awaitable[RawPoll]]:
    async def start(who: str | None, query: str, token: bool = True) -> RawPoll:
        headers = dict(jp_auth_header) if token else {}
        if who is not None:
            headers["X-Test-User"] = who
        return await RawPoll.open(http_server_port[1], f"{jp_base_url}{ROUTE}?{query}", headers)

    return start


async def test_a_new_tab_starts_after_the_newest_notification_replaying_none(
    jp_fetch: Any, store: JobStore
) -> None:
    post(store, "alice", "20261204-100000-aaaaaa")
    newest = post(store, "bob", "20261204-100000-bbbbbb")
    assert await poll(jp_fetch, "alice") == {"notifications": [], "last": newest}
    assert await poll(jp_fetch, "alice", wait="5") == {"notifications": [], "last": newest}


async def test_the_caller_gets_their_own_lab_notifications_after_the_id_given(
    jp_fetch: Any, jp_base_url: str, store: JobStore
) -> None:
    first = post(store, "alice", "20261204-100000-aaaaa1")
    post(store, "bob", "20261204-100000-bbbbbb")
    second = post(store, "alice", "20261204-100000-aaaaa2")
    post(store, "alice", "20261204-100000-aaaaa2", EMAIL)  # sent by mail, not to the lab
    third = post(store, "alice", "20261204-100000-aaaaa3")

    answer = await poll(jp_fetch, "alice", after=str(first))
    assert [n["id"] for n in answer["notifications"]] == [second, third]
    assert answer["last"] == third
    assert answer["notifications"][0] == {
        "id": second,
        "created": pytest.approx(time.time(), abs=60),
        "event": "failure",
        "level": "error",
        "title": "air job 20261204-100000-aaaaa2 failed: rank 1 exited with code 1",
        "facts": [["Job", "20261204-100000-aaaaa2"], ["Owner", "alice"]],
        "lines": ["Traceback (most recent call last):", "ValueError: bad batch"],
        # this server's links (the mail's may name an address the browser cannot reach)
        "links": [{"label": "Logs", "url": f"{jp_base_url}lab?air-job=20261204-100000-aaaaa2"}],
        "command": "air logs 20261204-100000-aaaaa2",
        "job_id": "20261204-100000-aaaaa2",
        "schedule_id": None,
    }
    # nothing newer: the same ``after`` comes back
    assert await poll(jp_fetch, "alice", after=str(third)) == {"notifications": [], "last": third}


async def test_a_job_s_links_lead_to_its_logs_and_run_under_this_server(
    jp_fetch: Any, jp_base_url: str, store: JobStore
) -> None:
    from jupyter_air.tracking.stores import store_key
    from tests.factories import job_spec

    uri = "sqlite:////tmp/team/mlflow.db"
    job = store.create(job_spec(command=["true"], tracking_uri=uri), owner="alice")
    store.set_experiment(job.id, "7")
    store.start_attempt(job.id, 1, "run-1")
    first = post(store, "alice", job.id)
    answer = await poll(jp_fetch, "alice", after=str(first - 1))
    (links,) = [n["links"] for n in answer["notifications"]]
    assert links == [
        {"label": "Logs", "url": f"{jp_base_url}lab?air-job={job.id}"},
        {
            "label": "MLflow run",
            "url": f"{jp_base_url}jupyter-air/mlflow/{store_key(uri)}/#/experiments/7/runs/"
            "run-1?workflowType=machine_learning",
        },
    ]


async def test_another_users_notifications_are_never_answered(
    jp_fetch: Any, jp_serverapp: Any, store: JobStore
) -> None:
    alices = post(store, "alice", "20261204-100000-aaaaaa")
    bobs = post(store, "bob", "20261204-100000-bbbbbb")
    assert [n["id"] for n in (await poll(jp_fetch, "bob", after="0"))["notifications"]] == [bobs]
    assert [n["id"] for n in (await poll(jp_fetch, "alice", after="0"))["notifications"]] == [
        alices
    ]
    assert (await poll(jp_fetch, "mallory", after="0"))["notifications"] == []

    # bob waiting when alice's next one comes: it is not his
    waiting = asyncio.ensure_future(poll(jp_fetch, "bob", after=str(bobs), wait="2"))
    await until_async(
        lambda: watch_of(jp_serverapp).waiting["bob"] == 1, "bob's poll to wait", 30, step=0.05
    )
    post(store, "alice", "20261204-100000-aaaaa2")
    assert await waiting == {"notifications": [], "last": bobs}


async def test_a_long_poll_answers_as_soon_as_a_supervisor_posts_one(
    jp_fetch: Any, jp_serverapp: Any, store: JobStore
) -> None:
    last = (await poll(jp_fetch, "alice"))["last"]
    waiting = asyncio.ensure_future(timed(poll(jp_fetch, "alice", after=str(last), wait="30")))
    await until_async(
        lambda: watch_of(jp_serverapp).waiting["alice"] == 1, "the poll to wait", 30, step=0.05
    )
    supervisor = textwrap.dedent(
        f"""
        from pathlib import Path
        from jupyter_air.jobs.store import JobStore
        from tests.server.test_server_notifications import post
        post(JobStore(Path({str(store.home)!r})), "alice", "20261204-100000-aaaaaa")
        """
    )
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", supervisor)
    assert await process.wait() == 0
    posted = time.monotonic()
    answer, _ = await asyncio.wait_for(waiting, 30)
    assert time.monotonic() - posted < 10  # well before the wait's 30 s
    (notification,) = answer["notifications"]
    assert notification["job_id"] == "20261204-100000-aaaaaa"
    assert answer["last"] == notification["id"]
    assert not watch_of(jp_serverapp).waiting


async def test_a_long_poll_with_nothing_new_answers_when_its_wait_ends(
    jp_fetch: Any, store: JobStore
) -> None:
    last = post(store, "alice", "20261204-100000-aaaaaa")
    answer, took = await timed(poll(jp_fetch, "alice", after=str(last), wait="1"))
    assert answer == {"notifications": [], "last": last}
    assert took >= 0.9


async def test_a_tab_that_leaves_stops_its_wait(
    jp_serverapp: Any, raw_poll: Callable[..., Awaitable[RawPoll]]
) -> None:
    watch = watch_of(jp_serverapp)
    started = time.monotonic()
    tab = await raw_poll("alice", "after=0&wait=30")
    await until_async(lambda: watch.waiting["alice"] == 1, "the poll to wait", 30, step=0.05)
    tab.close()
    await until_async(lambda: not watch.waiting, "the wait to end with its client", 30, step=0.05)
    assert time.monotonic() - started < 20  # not the 30 s asked


async def test_polls_past_a_callers_limit_answer_at_once(
    jp_fetch: Any,
    jp_serverapp: Any,
    store: JobStore,
    raw_poll: Callable[..., Awaitable[RawPoll]],
) -> None:
    watch = watch_of(jp_serverapp)
    tabs = [await raw_poll("alice", "after=0&wait=30") for _ in range(MAX_WAITING)]
    await until_async(
        lambda: watch.waiting["alice"] == MAX_WAITING, "alice's polls to wait", 30, step=0.05
    )

    answer, took = await timed(poll(jp_fetch, "alice", after="0", wait="30"))
    assert answer == {"notifications": [], "last": 0}
    assert took < 10

    bobs_tab = await raw_poll("bob", "after=0&wait=30")  # the limit is each caller's own
    await until_async(lambda: watch.waiting["bob"] == 1, "bob's poll to wait", 30, step=0.05)

    alices = post(store, "alice", "20261204-100000-aaaaaa")
    for tab in tabs:
        status, doc = await tab.answer()
        assert (status, [n["id"] for n in doc["notifications"]]) == (200, [alices])
    bobs = post(store, "bob", "20261204-100000-bbbbbb")
    status, doc = await bobs_tab.answer()
    assert (status, [n["id"] for n in doc["notifications"]]) == (200, [bobs])
    await until_async(lambda: not watch.waiting, "every wait to end", 30, step=0.05)


async def test_a_poll_is_not_activity_that_keeps_an_idle_server_running(
    jp_fetch: Any, jp_serverapp: Any
) -> None:
    settings = jp_serverapp.web_app.settings
    await jp_fetch("api", "contents", headers={"X-Test-User": "alice"})  # activity
    before = settings["api_last_activity"]
    await poll(jp_fetch, "alice")
    await poll(jp_fetch, "alice", after="0", wait="1")
    assert settings["api_last_activity"] == before


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"after": "x"}, "'after' must be an integer, got 'x'"),
        ({"after": "-1"}, "'after' must be between 0 and"),
        ({"after": str(1 << 63)}, "'after' must be between 0 and"),
        ({"after": "0", "wait": "31"}, "'wait' must be between 0 and 30, got 31"),
        ({"after": "0", "wait": "-1"}, "'wait' must be between 0 and 30, got -1"),
        ({"after": "0", "wait": "soon"}, "'wait' must be an integer, got 'soon'"),
    ],
)
async def test_bad_parameters_are_refused_with_a_400_that_says_why(
    jp_fetch: Any, params: dict[str, str], message: str
) -> None:
    with pytest.raises(HTTPClientError) as err:
        await poll(jp_fetch, "alice", **params)
    assert err.value.code == 400
    assert err.value.response is not None
    error = json.loads(err.value.response.body)["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith(message)
    assert "\n" not in error["message"]


async def test_without_the_token_nothing_is_answered(
    store: JobStore, raw_poll: Callable[..., Awaitable[RawPoll]]
) -> None:
    post(store, "alice", "20261204-100000-aaaaaa")
    status, doc = await (await raw_poll("alice", "after=0", token=False)).answer()
    assert status == 403
    assert "notifications" not in json.dumps(doc)
