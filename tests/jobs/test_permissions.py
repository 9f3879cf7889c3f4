"""Job permissions: the levels, parsing grants, the check, and the store that keeps them."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from jupyter_air.identity import Identity, os_identity, server_owner
from jupyter_air.jobs.permissions import (
    BadGrant,
    Forbidden,
    Grant,
    JobAccess,
    Level,
    Principal,
    grant_from_json,
    merged,
    parse_grant,
    parse_principal,
)
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec

BOB = Principal("user", "bob")
TEAM = Principal("group", "ml-team")


@pytest.mark.parametrize(
    ("text", "grant"),
    [
        ("bob:CAN_VIEW", Grant(BOB, Level.CAN_VIEW)),
        ("user:bob:can_manage", Grant(BOB, Level.CAN_MANAGE)),
        ("group:ml-team:CAN_MANAGE_RUN", Grant(TEAM, Level.CAN_MANAGE_RUN)),
        (" bob : can view ", Grant(BOB, Level.CAN_VIEW)),
        ("b ob:CAN_VIEW", None),
    ],
)
def test_grants_are_written_name_then_level(text: str, grant: Grant | None) -> None:
    if grant is None:
        with pytest.raises(BadGrant):
            parse_grant(text)
    else:
        assert parse_grant(text) == grant
        assert parse_grant(str(grant)) == grant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bob", "is not a grant: write NAME:LEVEL"),
        ("group:ml-team", "is not a grant: write NAME:LEVEL or group:NAME:LEVEL"),
        (":CAN_VIEW", "is not a grant"),
        ("bob:CAN_OWN", "unknown permission level 'CAN_OWN': one of CAN_VIEW, CAN_MANAGE_RUN"),
        ("robot:bob:CAN_VIEW", "a grant names a 'user' or a 'group', not 'robot'"),
        ("group::CAN_VIEW", "'' is not a group name"),
        ("../etc:CAN_VIEW", "'../etc' is not a user name"),
    ],
)
def test_bad_grants_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(BadGrant, match=message.replace("(", r"\(")):
        parse_grant(text)


def test_a_revoke_names_a_user_or_a_group() -> None:
    assert parse_principal("carol") == Principal("user", "carol")
    assert parse_principal("group:ml-team") == TEAM
    assert str(TEAM) == "group:ml-team"


def test_the_json_form_of_a_grant() -> None:
    assert grant_from_json({"kind": "group", "name": "ml-team", "level": "CAN_VIEW"}) == Grant(
        TEAM, Level.CAN_VIEW
    )
    assert grant_from_json("bob:CAN_VIEW") == Grant(BOB, Level.CAN_VIEW)
    with pytest.raises(BadGrant, match="needs a 'level'"):
        grant_from_json({"name": "bob"})
    with pytest.raises(BadGrant, match="is"):
        grant_from_json({"name": "bob", "level": "CAN_VIEW", "expires": 1})


def test_the_last_grant_of_a_principal_wins() -> None:
    assert merged([Grant(BOB, Level.CAN_MANAGE), Grant(BOB, Level.CAN_VIEW)]) == (
        Grant(BOB, Level.CAN_VIEW),
    )


ACCESS = JobAccess(
    "20261201-000000-abcdef",
    "alice",
    (Grant(BOB, Level.CAN_VIEW), Grant(TEAM, Level.CAN_MANAGE_RUN)),
)


@pytest.mark.parametrize(
    ("who", "level"),
    [
        (Identity("alice"), Level.CAN_MANAGE),
        (Identity("bob"), Level.CAN_VIEW),
        (Identity("bob", frozenset({"ml-team"})), Level.CAN_MANAGE_RUN),  # the higher one
        (Identity("carol", frozenset({"ml-team"})), Level.CAN_MANAGE_RUN),
        (Identity("ml-team"), None),  # a user named like a group is not in it
        (Identity("mallory", frozenset({"bob"})), None),  # a group named like a user neither
    ],
)
def test_an_identity_holds_the_highest_level_of_its_own_and_its_groups_grants(
    who: Identity, level: Level | None
) -> None:
    assert ACCESS.level_of(who) == level


def test_the_refusal_names_the_job_the_level_missing_and_the_owner() -> None:
    ACCESS.require(Identity("bob"), Level.CAN_VIEW)
    with pytest.raises(Forbidden) as err:
        ACCESS.require(Identity("bob"), Level.CAN_MANAGE_RUN)
    assert (err.value.job_id, err.value.needed, err.value.owner) == (
        ACCESS.job_id,
        Level.CAN_MANAGE_RUN,
        "alice",
    )
    assert str(err.value) == (
        f"You don't have CAN_MANAGE_RUN on job {ACCESS.job_id}: its owner, alice, can grant it"
    )


def test_the_os_identity_has_the_os_groups() -> None:
    me = os_identity()
    assert me.name
    assert me.groups  # every user has a primary group


def test_a_cell_job_belongs_to_the_hub_user_whose_server_runs_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    assert server_owner() == "alice"
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert server_owner() == os_identity().name


# -- the store --------------------------------------------------------------------


def job_of(store: JobStore, owner: str = "alice", *grants: str) -> str:
    shared = tuple(parse_grant(g) for g in grants)
    return store.create(job_spec("command"), owner=owner, grants=shared).id


def test_the_store_keeps_owner_and_grants(store: JobStore) -> None:
    job = job_of(store, "alice", "bob:CAN_VIEW", "group:ml-team:CAN_MANAGE_RUN")
    assert store.get(job).owner == "alice"
    assert store.access(job) == JobAccess(job, "alice", ACCESS.grants)


def test_a_change_replaces_levels_revokes_and_needs_can_manage(store: JobStore) -> None:
    job = job_of(store, "alice", "bob:CAN_VIEW", "group:ml-team:CAN_MANAGE_RUN")
    after = store.change_access(job, Identity("alice"), (parse_grant("bob:CAN_MANAGE"),), (TEAM,))
    assert after.grants == (Grant(BOB, Level.CAN_MANAGE),)
    assert store.access(job) == after
    after = store.change_access(job, Identity("bob"), (parse_grant("carol:CAN_VIEW"),))
    with pytest.raises(Forbidden):
        store.change_access(job, Identity("carol"), (parse_grant("carol:CAN_MANAGE"),))
    assert store.access(job) == after


def test_the_owner_cannot_be_granted_or_revoked(store: JobStore) -> None:
    job = job_of(store)
    with pytest.raises(BadGrant, match="alice owns the job"):
        store.change_access(job, Identity("alice"), (), (Principal("user", "alice"),))
    with pytest.raises(BadGrant, match="alice owns the job"):
        job_of(store, "alice", "alice:CAN_VIEW")
    assert store.access(job).level_of(Identity("alice")) == Level.CAN_MANAGE


def test_the_listing_is_filtered_in_the_query_and_keeps_its_limit(store: JobStore) -> None:
    mine = [job_of(store, "alice") for _ in range(3)]
    shared = job_of(store, "mallory", "group:ml-team:CAN_VIEW")
    job_of(store, "mallory")
    alice = Identity("alice", frozenset({"ml-team"}))
    assert [j.id for j in store.jobs(visible_to=alice)] == [shared, *reversed(mine)]
    assert [j.id for j in store.jobs(visible_to=alice, limit=2)] == [shared, mine[-1]]
    assert [j.id for j in store.jobs(visible_to=Identity("alice"))] == list(reversed(mine))
    assert len(store.jobs()) == 5
    assert store.visible_ids(Identity("bob"), {shared, mine[0], "nope"}) == set()
    assert store.visible_ids(alice, {shared, mine[0], "nope"}) == {shared, mine[0]}


#: The schema of the version before grants (as released): jobs and attempts only.
PREVIOUS_SCHEMA = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, created REAL NOT NULL, owner TEXT NOT NULL, status TEXT NOT NULL,
    workload TEXT NOT NULL, supervisor_pid INTEGER, supervisor_host TEXT, started REAL,
    ended REAL, message TEXT
);
CREATE TABLE attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL, status TEXT NOT NULL,
    run_id TEXT, started REAL NOT NULL, ended REAL, exit_codes TEXT, failed_rank INTEGER,
    message TEXT, PRIMARY KEY (job_id, attempt)
);
"""


def test_a_store_made_by_the_previous_version_opens_and_takes_grants(tmp_path: Path) -> None:
    home = tmp_path / "air"
    home.mkdir(mode=0o700)
    db = sqlite3.connect(home / "jobs.db")
    db.executescript(PREVIOUS_SCHEMA)
    old = "20261130-120000-abcdef"
    db.execute(
        "INSERT INTO jobs (id, created, owner, status, workload) VALUES (?, 1.0, 'alice', "
        "'SUCCEEDED', ?)",
        (old, job_spec("command").to_json()),
    )
    db.commit()
    db.close()
    os.chmod(home / "jobs.db", 0o600)

    store = JobStore(home)
    assert [j.id for j in store.jobs(visible_to=Identity("alice"))] == [old]
    assert store.access(old) == JobAccess(old, "alice", ())
    store.change_access(old, Identity("alice"), (parse_grant("bob:CAN_VIEW"),))
    assert [j.id for j in JobStore(home).jobs(visible_to=Identity("bob"))] == [old]
