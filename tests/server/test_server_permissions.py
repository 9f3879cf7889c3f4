"""Job permissions on every jobs route, with several identities on one real server.

The server's identity provider is a test one: the token still has to be right, and the
``X-Test-User`` / ``X-Test-Groups`` headers say who is calling (as JupyterHub's provider
says who visits a shared server). alice owns the job; the others hold one level each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from jupyter_core.utils import ensure_async
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import HTTPClientError

from jupyter_air.identity import Identity, os_identity
from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.node.hints import Hint, write_hints
from jupyter_air.jobs.permissions import Level, parse_grant
from jupyter_air.jobs.store import JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.gpu.snapshots import sampler_snapshot


@dataclass
class GroupUser(User):
    groups: tuple[str, ...] = ()


class HeaderIdentityProvider(IdentityProvider):  # type: ignore[misc]
    """A token-authenticated request is the user its X-Test-User header names."""

    async def get_user(self, handler: Any) -> User | None:
        user = await ensure_async(super().get_user(handler))
        name = handler.request.headers.get("X-Test-User")
        if user is None or not name:
            return user
        groups = handler.request.headers.get("X-Test-Groups", "")
        return GroupUser(username=name, groups=tuple(filter(None, groups.split(","))))


class ReadOnlyAuthorizer(Authorizer):  # type: ignore[misc]
    """A deployment's read-only users: every write is refused; records what it was asked."""

    asked: list[tuple[str, str]] = []  # noqa: RUF012

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        self.asked.append((action, resource))
        return action == "read"


#: Caller -> (headers, the level they hold on alice's job).
CALLERS: dict[str, tuple[dict[str, str], Level | None]] = {
    "stranger": ({"X-Test-User": "mallory"}, None),
    "viewer": ({"X-Test-User": "bob"}, Level.CAN_VIEW),
    "runner": ({"X-Test-User": "rita"}, Level.CAN_MANAGE_RUN),
    "group": ({"X-Test-User": "carol", "X-Test-Groups": "ml-team,other"}, Level.CAN_MANAGE_RUN),
    "manager": ({"X-Test-User": "max"}, Level.CAN_MANAGE),
    "owner": ({"X-Test-User": "alice"}, Level.CAN_MANAGE),
}
GRANTS = ["bob:CAN_VIEW", "rita:CAN_MANAGE_RUN", "group:ml-team:CAN_MANAGE_RUN", "max:CAN_MANAGE"]

#: (method, route, level needed, status when allowed on the finished job).
ROUTES = [
    ("GET", "jupyter-air/jobs/{id}", Level.CAN_VIEW, 200),
    ("GET", "jupyter-air/jobs/{id}/logs", Level.CAN_VIEW, 200),
    ("GET", "jupyter-air/jobs/{id}/logs/download", Level.CAN_VIEW, 200),
    ("GET", "jupyter-air/jobs/{id}/gpu?node=0", Level.CAN_VIEW, 200),
    ("GET", "jupyter-air/jobs/{id}/permissions", Level.CAN_VIEW, 200),
    ("POST", "jupyter-air/jobs/{id}/cancel", Level.CAN_MANAGE_RUN, 409),  # it already ended
    ("GET", "jupyter-air/jobs/{id}/stacks", Level.CAN_VIEW, 200),
    ("POST", "jupyter-air/jobs/{id}/stacks", Level.CAN_MANAGE_RUN, 409),  # no rank runs
    ("PUT", "jupyter-air/jobs/{id}/permissions", Level.CAN_MANAGE, 200),
]


@pytest.fixture
def jp_server_config(store: JobStore) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_air": True},
            "identity_provider_class": HeaderIdentityProvider,
        },
        "GpuSampler": {"interval": 3600.0},
    }


@pytest.fixture
def job(store: JobStore, scenario: WriteScenario) -> str:
    """alice's finished job, with grants of every level and one node's GPU samples."""
    grants = tuple(parse_grant(g) for g in GRANTS)
    job = store.create(job_spec("command", command=["true"]), owner="alice", grants=grants)
    store.start_attempt(job.id, 1, None)
    scenario(Scenario(gpus=[FakeGpu()]))
    AttemptDir(store.attempt_dir(job.id, 1)).write_gpu(0, sampler_snapshot())
    store.end_attempt(job.id, 1, "SUCCEEDED", [0])
    store.update(job.id, status="SUCCEEDED", ended=1.0)
    return job.id


async def call(jp_fetch: Any, who: str, method: str, route: str, body: Any = None) -> Any:
    path, _, query = route.partition("?")
    params = dict(part.split("=") for part in query.split("&")) if query else None
    if body is None and method != "GET":
        body = {} if method == "PUT" else ""
    return await jp_fetch(
        path,
        method=method,
        params=params,
        headers=dict(CALLERS[who][0]),  # jp_fetch adds its token to the dict
        body=json.dumps(body) if isinstance(body, dict) else body,
    )


async def refusal(jp_fetch: Any, who: str, method: str, route: str, body: Any = None) -> Any:
    with pytest.raises(HTTPClientError) as err:
        await call(jp_fetch, who, method, route, body)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)["error"]


@pytest.mark.parametrize("who", list(CALLERS))
@pytest.mark.parametrize(("method", "route", "needed", "status"), ROUTES)
async def test_each_route_is_allowed_from_its_level_up_and_refused_below(
    jp_fetch: Any, job: str, who: str, method: str, route: str, needed: Level, status: int
) -> None:
    held = CALLERS[who][1]
    route = route.format(id=job)
    if held is not None and held >= needed:
        if status == 200:
            assert (await call(jp_fetch, who, method, route)).code == 200
        else:
            assert (await refusal(jp_fetch, who, method, route))[0] == status
        return
    code, error = await refusal(jp_fetch, who, method, route)
    assert code == 403
    assert error == {
        "code": "forbidden",
        "message": f"You don't have {needed.name} on job {job}: its owner, alice, can grant it",
        "job": job,
        "needed": needed.name,
        "owner": "alice",
    }


@pytest.fixture
def jobs(store: JobStore) -> dict[str, str]:
    """alice's jobs: one shared with bob, one with the ml-team group, one private; and
    one of mallory's."""
    made = {}
    for name, owner, grants in [
        ("bob's", "alice", ("bob:CAN_VIEW",)),
        ("team's", "alice", ("group:ml-team:CAN_MANAGE_RUN",)),
        ("private", "alice", ()),
        ("mallory's", "mallory", ()),
    ]:
        shared = tuple(parse_grant(g) for g in grants)
        made[name] = store.create(job_spec("command"), owner=owner, grants=shared).id
    return made


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("owner", {"bob's", "team's", "private"}),
        ("viewer", {"bob's"}),
        ("group", {"team's"}),
        ("stranger", {"mallory's"}),
        ("manager", set()),
    ],
)
async def test_the_listing_shows_only_the_jobs_the_caller_may_view(
    jp_fetch: Any, jobs: dict[str, str], who: str, expected: set[str]
) -> None:
    answer = json.loads((await call(jp_fetch, who, "GET", "jupyter-air/jobs?all=1")).body)
    assert {job["id"] for job in answer["jobs"]} == {jobs[name] for name in expected}
    active = json.loads((await call(jp_fetch, who, "GET", "jupyter-air/jobs")).body)
    assert {job["id"] for job in active["jobs"]} == {jobs[name] for name in expected}


async def test_the_permissions_document_says_the_callers_level(jp_fetch: Any, job: str) -> None:
    doc = json.loads(
        (await call(jp_fetch, "group", "GET", f"jupyter-air/jobs/{job}/permissions")).body
    )
    assert doc["job"] == job
    assert doc["owner"] == "alice"
    assert {(g["kind"], g["name"], g["level"]) for g in doc["grants"]} == {
        ("user", "bob", "CAN_VIEW"),
        ("user", "rita", "CAN_MANAGE_RUN"),
        ("group", "ml-team", "CAN_MANAGE_RUN"),
        ("user", "max", "CAN_MANAGE"),
    }
    assert doc["you"] == {"name": "carol", "level": "CAN_MANAGE_RUN"}


async def test_a_manager_grants_and_revokes_and_the_grantee_gains_and_loses_access(
    jp_fetch: Any, job: str
) -> None:
    route = f"jupyter-air/jobs/{job}/permissions"
    assert (await refusal(jp_fetch, "stranger", "GET", f"jupyter-air/jobs/{job}"))[0] == 403
    change = {"grant": [{"kind": "user", "name": "mallory", "level": "CAN_MANAGE_RUN"}]}
    doc = json.loads((await call(jp_fetch, "manager", "PUT", route, change)).body)
    assert {"kind": "user", "name": "mallory", "level": "CAN_MANAGE_RUN"} in doc["grants"]
    assert (await call(jp_fetch, "stranger", "GET", f"jupyter-air/jobs/{job}")).code == 200
    # now past CAN_VIEW: the ended job's cancel is a 409, not a 403
    assert (await refusal(jp_fetch, "stranger", "POST", f"jupyter-air/jobs/{job}/cancel"))[0] == 409

    revoke = {"revoke": [{"kind": "user", "name": "mallory"}, "group:ml-team"]}
    doc = json.loads((await call(jp_fetch, "owner", "PUT", route, revoke)).body)
    assert {g["name"] for g in doc["grants"]} == {"bob", "rita", "max"}
    assert (await refusal(jp_fetch, "stranger", "GET", f"jupyter-air/jobs/{job}"))[0] == 403
    assert (await refusal(jp_fetch, "group", "GET", f"jupyter-air/jobs/{job}"))[0] == 403


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"revoke": [{"kind": "user", "name": "alice"}]}, "alice owns the job"),
        ({"grant": ["alice:CAN_VIEW"]}, "alice owns the job"),
        (
            {"grant": [{"kind": "user", "name": "bob", "level": "CAN_OWN"}]},
            "unknown permission level",
        ),
        ({"grant": [{"kind": "robot", "name": "bob", "level": "CAN_VIEW"}]}, "'user' or a 'group'"),
        ({"grant": [{"kind": "user", "name": "../x", "level": "CAN_VIEW"}]}, "is not a user name"),
        ({"grant": "bob:CAN_VIEW"}, "are lists"),
        ({"everyone": True}, "the body is"),
        ("not json", "must be JSON"),
    ],
)
async def test_bad_changes_are_400_and_change_nothing(
    jp_fetch: Any, job: str, store: JobStore, body: Any, message: str
) -> None:
    before = store.access(job)
    code, error = await refusal(
        jp_fetch, "owner", "PUT", f"jupyter-air/jobs/{job}/permissions", body
    )
    assert (code, error["code"]) == (400, "bad_request")
    assert message in error["message"]
    assert store.access(job) == before


async def test_a_viewer_cannot_grant_themselves_more(
    jp_fetch: Any, job: str, store: JobStore
) -> None:
    change = {"grant": ["bob:CAN_MANAGE"]}
    code, error = await refusal(
        jp_fetch, "viewer", "PUT", f"jupyter-air/jobs/{job}/permissions", change
    )
    assert (code, error["needed"]) == (403, "CAN_MANAGE")
    assert store.access(job).level_of(Identity("bob")) == Level.CAN_VIEW


class TestADeploymentAuthorizerThatDeniesWrites:
    @pytest.fixture
    def jp_server_config(self, store: JobStore) -> dict[str, Any]:
        ReadOnlyAuthorizer.asked.clear()
        return {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_air": True},
                "identity_provider_class": HeaderIdentityProvider,
                "authorizer_class": ReadOnlyAuthorizer,
            },
            "GpuSampler": {"interval": 3600.0},
        }

    async def test_even_the_owner_cannot_cancel_or_change_permissions(
        self, jp_fetch: Any, job: str, store: JobStore
    ) -> None:
        before = store.access(job)
        for method, route, body in [
            ("POST", f"jupyter-air/jobs/{job}/cancel", ""),
            ("PUT", f"jupyter-air/jobs/{job}/permissions", {"grant": ["mallory:CAN_VIEW"]}),
        ]:
            code, error = await refusal(jp_fetch, "owner", method, route, body)
            assert code == 403
            assert error["message"] == "User is not authorized to write on resource: jupyter_air."
        assert store.access(job) == before
        reading = await call(jp_fetch, "owner", "GET", f"jupyter-air/jobs/{job}/permissions")
        assert reading.code == 200
        assert ("write", "jupyter_air") in ReadOnlyAuthorizer.asked
        assert ("read", "jupyter_air") in ReadOnlyAuthorizer.asked


OTHER = {"pid": None, "name": None, "mem_mib": 2048, "owner": {"kind": "other"}}


@pytest.fixture
def rank_of(job: str) -> Any:
    """A process that runs as a rank of alice's job (it carries the job's id)."""
    rank = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "AIR_JOB_ID": job, "RANK": "0"},
    )
    yield rank
    rank.kill()
    rank.wait()


@pytest.mark.parametrize("route", ["jupyter-air/gpu", "jupyter-air/gpu/sample"])
async def test_a_gpu_process_of_a_job_the_caller_may_not_view_is_another_users(
    jp_fetch: Any, job: str, rank_of: Any, scenario: WriteScenario, route: str
) -> None:
    scenario(Scenario(gpus=[FakeGpu(processes=[(rank_of.pid, 2 * 1024**3)])]))
    await call(jp_fetch, "owner", "POST", "jupyter-air/gpu/sample")
    method = "POST" if route.endswith("sample") else "GET"
    seen = json.loads((await call(jp_fetch, "stranger", method, route)).body)
    assert seen["state"][0]["processes"] == [OTHER]
    assert str(rank_of.pid) not in json.dumps(seen["state"])
    viewer = json.loads((await call(jp_fetch, "viewer", method, route)).body)
    (process,) = viewer["state"][0]["processes"]
    assert (process["pid"], process["owner"]) == (
        rank_of.pid,
        {"kind": "job", "id": job, "name": None},
    )


async def test_a_nodes_gpu_process_of_another_users_job_is_hidden_from_a_viewer(
    jp_fetch: Any, job: str, store: JobStore
) -> None:
    private = store.create(job_spec("command"), owner="alice")
    snapshot_path = store.attempt_dir(job, 1)
    stored = sampler_snapshot()
    stored["state"][0]["processes"] = [
        {"pid": 77, "name": "python", "mem_mib": 2048, "owner": {"kind": "job", "id": private.id}},
        {"pid": 78, "name": "python", "mem_mib": 1, "owner": {"kind": "job", "id": job}},
    ]
    AttemptDir(snapshot_path).write_gpu(0, stored)
    doc = json.loads(
        (await call(jp_fetch, "viewer", "GET", f"jupyter-air/jobs/{job}/gpu?node=0")).body
    )
    assert doc["state"][0]["processes"] == [
        OTHER,
        {"pid": 78, "name": "python", "mem_mib": 1, "owner": {"kind": "job", "id": job}},
    ]
    assert private.id not in json.dumps(doc)


async def test_the_gpu_answer_lists_only_the_nodes_of_jobs_the_caller_may_view(
    jp_fetch: Any, store: JobStore
) -> None:
    shared = store.create(
        job_spec("command", nnodes=2), owner="alice", grants=(parse_grant("bob:CAN_VIEW"),)
    )
    private = store.create(job_spec("command", nnodes=2), owner="alice")
    for made in (shared, private):
        store.update(made.id, status="RUNNING")
        store.start_attempt(made.id, 1, None)
        AttemptDir(store.attempt_dir(made.id, 1)).write_nodes([{"node": 1, "hostname": "gpu-b"}])
    nodes = json.loads((await call(jp_fetch, "viewer", "GET", "jupyter-air/gpu")).body)["nodes"]
    assert [node["job"] for node in nodes] == [shared.id]
    owner = json.loads((await call(jp_fetch, "owner", "GET", "jupyter-air/gpu")).body)["nodes"]
    assert {node["job"] for node in owner} == {shared.id, private.id}


@dataclass
class HubUser(User):
    """What JupyterHub's identity provider gives a single-user server: the Hub's user model."""

    hub_user: dict[str, Any] | None = None


class HubLikeIdentityProvider(IdentityProvider):  # type: ignore[misc]
    async def get_user(self, handler: Any) -> User | None:
        user = await ensure_async(super().get_user(handler))
        name = handler.request.headers.get("X-Test-User")
        if user is None or not name:
            return user
        groups = handler.request.headers.get("X-Test-Groups", "").split(",")
        return HubUser(username=name, hub_user={"name": name, "groups": list(filter(None, groups))})


class TestOnAHub:
    @pytest.fixture
    def jp_server_config(self, store: JobStore) -> dict[str, Any]:
        return {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_air": True},
                "identity_provider_class": HubLikeIdentityProvider,
            },
            "GpuSampler": {"interval": 3600.0},
        }

    async def test_the_caller_is_the_hub_user_with_the_hub_groups(
        self, jp_fetch: Any, job: str
    ) -> None:
        route = f"jupyter-air/jobs/{job}/permissions"
        doc = json.loads((await call(jp_fetch, "group", "GET", route)).body)
        assert doc["you"] == {"name": "carol", "level": "CAN_MANAGE_RUN"}
        assert (await refusal(jp_fetch, "stranger", "GET", route))[0] == 403


class TestASingleUserServer:
    """jupyter_server's own token login: one user, the OS user, who owns everything."""

    @pytest.fixture
    def jp_server_config(self, store: JobStore) -> dict[str, Any]:
        return {
            "ServerApp": {"jpserver_extensions": {"jupyter_air": True}},
            "GpuSampler": {"interval": 3600.0},
        }

    async def test_every_caller_is_the_os_user(self, jp_fetch: Any, store: JobStore) -> None:
        mine = store.create(job_spec("command"))  # owned by the OS user
        store.create(job_spec("command"), owner="someone-else")
        answer = json.loads((await jp_fetch("jupyter-air", "jobs")).body)
        assert [job["id"] for job in answer["jobs"]] == [mine.id]
        doc = json.loads((await jp_fetch("jupyter-air", "jobs", mine.id, "permissions")).body)
        assert doc["you"] == {"name": os_identity().name, "level": "CAN_MANAGE"}


@pytest.mark.heavy
async def test_a_grant_holds_when_mlflow_cannot_be_told_and_the_answer_says_why(
    jp_fetch: Any, store: JobStore
) -> None:
    """The job's tracking server is down: the job grant is made, the MLflow side reported."""
    with socket.socket() as free:  # bound, never listening: connections are refused
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        workload = job_spec(
            kind="command", tracking_uri=f"http://127.0.0.1:{port}", experiment_id="7"
        )
        job = store.create(workload, owner="alice").id
        change = {"grant": ["bob:CAN_VIEW", "group:ml-team:CAN_VIEW"]}
        answer = await call(jp_fetch, "owner", "PUT", f"jupyter-air/jobs/{job}/permissions", change)
        doc = json.loads(answer.body)
        assert {g["name"] for g in doc["grants"]} == {"bob", "ml-team"}
        assert doc["mlflow"]["status"] == "failed"
        bob, team = doc["mlflow"]["outcomes"]
        assert (bob["grantee"], bob["action"]) == ("bob", "failed")
        assert "cannot reach the tracking server" in bob["error"]
        assert (team["grantee"], team["action"]) == ("ml-team", "not-mirrored")
        assert store.access(job).level_of(Identity("bob")) == Level.CAN_VIEW


async def test_the_hints_of_a_job_the_caller_may_not_view_are_not_shown(
    jp_fetch: Any, job: str, rank_of: Any, store: JobStore, scenario: WriteScenario
) -> None:
    store.update(job, status="RUNNING")  # hints are a running job's
    write_hints(store.attempt_dir(job, 1), [0], [Hint("idle_gpu", "GPU 0 mostly idle", 3.0)], 1.0)
    scenario(Scenario(gpus=[FakeGpu(processes=[(rank_of.pid, 2 * 1024**3)])]))
    viewer = json.loads((await call(jp_fetch, "viewer", "POST", "jupyter-air/gpu/sample")).body)
    assert viewer["state"][0]["processes"][0]["owner"]["hints"] == ["GPU 0 mostly idle"]
    seen = json.loads((await call(jp_fetch, "stranger", "POST", "jupyter-air/gpu/sample")).body)
    assert seen["state"][0]["processes"] == [OTHER]
    assert "mostly idle" not in json.dumps(seen)


async def test_mlflow_gets_the_highest_level_any_job_of_the_experiment_grants(
    jp_fetch: Any, store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow holds one permission per user and experiment: revoking bob on one job
    leaves him what another job of the same experiment still grants, and a grant on a
    job raises him to the highest level any job of the experiment gives."""
    told: list[list[tuple[str, str | None]]] = []

    def tell_mlflow(uri: str, experiment: str, grants: Any) -> None:  # the network boundary
        told.append([(g.grantee, g.level) for g in grants])

    monkeypatch.setattr("jupyter_air.tracking.permissions.mirror_grants", tell_mlflow)
    workload = job_spec("command", tracking_uri="http://127.0.0.1:9/", experiment_id="7")
    elsewhere = job_spec("command", tracking_uri="http://127.0.0.1:9/", experiment_id="8")
    first, second = (store.create(workload, owner="alice").id for _ in range(2))
    other = store.create(elsewhere, owner="alice").id
    store.change_access(other, Identity("alice"), (parse_grant("bob:CAN_MANAGE"),))
    store.change_access(first, Identity("alice"), (parse_grant("bob:CAN_MANAGE_RUN"),))

    await call(
        jp_fetch,
        "owner",
        "PUT",
        f"jupyter-air/jobs/{second}/permissions",
        {"grant": ["bob:CAN_VIEW"]},
    )
    await call(
        jp_fetch, "owner", "PUT", f"jupyter-air/jobs/{first}/permissions", {"revoke": ["bob"]}
    )
    await call(
        jp_fetch, "owner", "PUT", f"jupyter-air/jobs/{second}/permissions", {"revoke": ["bob"]}
    )

    assert told == [[("bob", "CAN_MANAGE_RUN")], [("bob", "CAN_VIEW")], [("bob", None)]]


async def test_only_the_servers_owner_opens_the_mlflow_ui_of_its_local_stores(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The UI of a local store shows every run and its logs, past any job grant: on
    alice's shared server, bob is refused before any store is looked up."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    route = "jupyter-air/mlflow/0123456789abcdef/"
    code, error = await refusal(jp_fetch, "viewer", "GET", route)
    assert (code, error["code"]) == (403, "forbidden")
    assert "only alice can open it" in error["message"]
    with pytest.raises(HTTPClientError) as err:  # alice gets as far as the unknown store
        await call(jp_fetch, "owner", "GET", route)
    assert err.value.code == 404


# -- notifications: only the owner's targets get a job's lines ---------------------------

HOOK = "https://hooks.example.com/T000/B000/XXXXSECRET"


@pytest.fixture
def running_job(store: JobStore) -> str:
    """alice's job that runs, shared at every level."""
    grants = tuple(parse_grant(g) for g in GRANTS)
    job = store.create(job_spec("command", command=["true"]), owner="alice", grants=grants)
    store.update(job.id, status="RUNNING", started=1.0)
    return job.id


@pytest.mark.parametrize("who", ["viewer", "runner", "group", "manager"])
async def test_no_grant_lets_anyone_but_the_owner_send_a_job_s_lines_to_their_webhook(
    jp_fetch: Any, store: JobStore, running_job: str, who: str
) -> None:
    route = f"jupyter-air/jobs/{running_job}/notify"
    code, error = await refusal(
        jp_fetch, who, "POST", route, {"notify": ["webhook:https://attacker.example.com/x"]}
    )
    assert code == 403
    assert error["message"] == (
        f"Only the owner of job {running_job}, alice, can add a notification to it"
    )
    assert store.targets(running_job) == ()
    code, _ = await refusal(jp_fetch, "stranger", "POST", route, {"notify": ["jupyterlab"]})
    assert code == 403


async def test_the_owner_adds_a_target_to_a_job_that_runs_and_sees_its_url_hidden(
    jp_fetch: Any, store: JobStore, running_job: str
) -> None:
    route = f"jupyter-air/jobs/{running_job}/notify"
    body = {"notify": [{"webhook": HOOK, "on": ["failure"]}]}
    answer = json.loads((await call(jp_fetch, "owner", "POST", route, body)).body)
    assert answer["targets"] == ["webhook https://hooks.example.com/…"]
    assert [t.address for t in store.targets(running_job)] == [HOOK]
    code, error = await refusal(
        jp_fetch,
        "owner",
        "POST",
        route,
        {"notify": [{"webhook": "ftp://x.example.com/XXXXSECRET"}]},
    )
    assert code == 400
    assert "XXXXSECRET" not in error["message"]
    store.update(running_job, status="SUCCEEDED", ended=2.0)
    code, error = await refusal(jp_fetch, "owner", "POST", route, body)
    assert (code, error["message"]) == (409, f"job {running_job} already ended (succeeded)")


async def test_where_a_job_s_notifications_went_is_shown_to_its_owner_only(
    jp_fetch: Any, store: JobStore, job: str
) -> None:
    from jupyter_air.notify.message import Message
    from jupyter_air.notify.outbox import Notice
    from jupyter_air.notify.targets import Event, parse

    message = Message(Event.SUCCESS, f"air job {job}: succeeded", "success", "alice", job_id=job)
    store.outbox.post([Notice(f"job:{job}:end#0", "alice", parse({"webhook": HOOK}), message, job)])
    route = f"jupyter-air/jobs/{job}"
    owner = json.loads((await call(jp_fetch, "owner", "GET", route)).body)
    assert owner["notifications"] == ["webhook https://hooks.example.com/… (success): queued"]
    viewer = json.loads((await call(jp_fetch, "viewer", "GET", route)).body)
    assert viewer["notifications"] == []
    listed = json.loads((await call(jp_fetch, "manager", "GET", "jupyter-air/jobs?all=1")).body)
    assert all(doc["notifications"] == [] for doc in listed["jobs"])


async def test_no_route_lets_anyone_set_a_job_s_guards_after_its_owner_submitted_it(
    jp_fetch: Any, store: JobStore
) -> None:
    """A guard can stop a job or save its state (issue 39): its owner sets it when
    submitting, and it is fixed in the job's spec. Whoever holds a grant, and the owner
    too, sends a guard with every route's body that changes a job: each is refused, and
    the job keeps its owner's guard."""
    grants = tuple(parse_grant(g) for g in GRANTS)
    spec = job_spec("command", command=["true"], guards=["loss: nan -> notify"])
    job = store.create(spec, owner="alice", grants=grants).id
    store.update(job, status="RUNNING", started=1.0)
    off = {"guard": ["none"], "guards": ["none"]}
    for who in CALLERS:
        for method, route, body in [
            ("POST", f"jupyter-air/jobs/{job}/notify", {"notify": ["jupyterlab"], **off}),
            ("PUT", f"jupyter-air/jobs/{job}/permissions", {"grant": [], **off}),
            ("PUT", f"jupyter-air/jobs/{job}", off),
            ("PATCH", f"jupyter-air/jobs/{job}", off),
            ("POST", "jupyter-air/jobs", {"command": "true", **off}),
        ]:
            with pytest.raises(HTTPClientError) as err:
                await call(jp_fetch, who, method, route, body)
            assert err.value.code in (400, 403, 404, 405), (who, method, route)
    assert store.get(job).spec.policy.guards == ("loss: nan -> notify",)
    assert store.targets(job) == (), "nor did a refused body add a target"
