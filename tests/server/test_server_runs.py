"""The runs routes against a real Jupyter server and a real MLflow sqlite store.

One store for the module (creating one takes seconds): alice's notebook ``train.ipynb``
made three jobs (one failed; one has a nested child run), a job shared with bob, and a
run MLflow made outside any job. Every test's job store records those jobs afresh.
The identity provider is the permissions tests': ``X-Test-User`` says who calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.permissions import parse_grant
from jupyter_air.jobs.store import JobStore
from jupyter_air.tracking import backlog
from jupyter_air.tracking.backlog import Part
from jupyter_air.tracking.stores import register_store
from jupyter_air.tracking.targets import default_tracking_uri
from tests.factories import job_spec
from tests.server.test_server_permissions import HeaderIdentityProvider

NOTEBOOK = "work/train.ipynb"
#: job id -> (run name, MLflow status, lr, grants)
JOBS = {
    "20261130-100000-aaaaaa": ("first", "FINISHED", "0.1", ()),
    "20261130-100100-bbbbbb": ("second", "FAILED", "0.2", ()),
    "20261130-100200-cccccc": ("shared", "RUNNING", "0.1", ("bob:CAN_VIEW",)),
}


@dataclass(frozen=True)
class Tracked:
    uri: str
    experiment_id: str
    other_experiment_id: str
    runs: dict[str, str]  # run name -> run id


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Tracked:
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("runs-store")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("/Users/alice/train")
    other = client.create_experiment("/Users/alice/other")
    runs: dict[str, str] = {}
    for start, (job_id, (name, status, lr, _)) in enumerate(JOBS.items()):
        tags = {"air.job_id": job_id, "air.attempt": "1", "air.notebook": NOTEBOOK}
        run = client.create_run(experiment, start_time=1000 * (start + 1), tags=tags, run_name=name)
        client.log_param(run.info.run_id, "lr", lr)
        client.log_param(run.info.run_id, "epochs", "3")
        for step in range(3):
            client.log_metric(run.info.run_id, "loss", 1.0 / (step + 1 + start), step=step)
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status, end_time=1000 * (start + 1) + 500)
        runs[name] = run.info.run_id
    child = client.create_run(
        experiment,
        start_time=1500,
        run_name="child",
        tags={"mlflow.parentRunId": runs["first"], "air.job_id": "20261130-100000-aaaaaa"},
    )
    runs["child"] = child.info.run_id
    outside = client.create_run(experiment, start_time=5000, run_name="by hand")
    runs["by hand"] = outside.info.run_id
    client.create_run(other, run_name="elsewhere")
    return Tracked(uri, str(experiment), str(other), runs)


@pytest.fixture
def jp_server_config(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")  # the server's owner
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_air": True},
            "identity_provider_class": HeaderIdentityProvider,
        },
        "GpuSampler": {"interval": 3600.0},
    }


@pytest.fixture
def key(store: JobStore, tracked: Tracked, jp_root_dir: Path) -> str:
    """The store registered as a kernel's jobs would have; the jobs recorded."""
    for job_id, (_, _, _, grants) in JOBS.items():
        workload = job_spec(
            kind="python",
            tracking_uri=tracked.uri,
            experiment_id=tracked.experiment_id,
            tags={"air.notebook": str(jp_root_dir / NOTEBOOK)},
        )
        store.create(workload, job_id, owner="alice", grants=tuple(parse_grant(g) for g in grants))
    return register_store(tracked.uri)


async def get(jp_fetch: Any, route: str, who: str = "alice", **params: Any) -> Any:
    response = await jp_fetch(
        "jupyter-air", *route.split("/"), params=params, headers={"X-Test-User": who}
    )
    return json.loads(response.body)


async def refused(jp_fetch: Any, route: str, who: str = "alice", **params: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as err:
        await get(jp_fetch, route, who, **params)
    assert err.value.response is not None
    return err.value.code, json.loads(err.value.response.body)["error"]["message"]


@pytest.mark.heavy
async def test_the_notebook_names_the_experiment_its_jobs_used(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    found = await get(jp_fetch, "runs/notebook", path=NOTEBOOK)
    assert found == {
        "store": key,
        "tracking_uri": tracked.uri,
        "experiment_id": tracked.experiment_id,
        "source": "job",
    }
    other = await get(jp_fetch, "runs/notebook", path="elsewhere.ipynb")
    assert other["experiment_id"] is None


async def test_runs_are_newest_first_with_children_under_their_parent(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    page = await get(jp_fetch, "runs", store=key, experiment=tracked.experiment_id)
    assert [(r["name"], r["depth"]) for r in page["runs"]] == [
        ("by hand", 0),
        ("shared", 0),
        ("second", 0),
        ("first", 0),
        ("child", 1),
    ]
    first = page["runs"][3]
    assert first["status"] == "FINISHED"
    assert (first["attempt"], first["job_id"], first["duration_ms"]) == (
        1,
        "20261130-100000-aaaaaa",
        500,
    )
    assert first["params"] == {"lr": "0.1", "epochs": "3"}
    assert first["metrics"] == {"loss": 1 / 3}
    assert first["run_url"].endswith(
        f"jupyter-air/mlflow/{key}/#/experiments/{tracked.experiment_id}/runs/{first['run_id']}"
        "?workflowType=machine_learning"
    )
    assert page["params"] == ["epochs", "lr"]
    assert page["metrics"] == ["loss"]
    assert page["next_page_token"] is None


async def test_pages_follow_mlflow_page_tokens(jp_fetch: Any, key: str, tracked: Tracked) -> None:
    seen: list[str] = []
    token = ""
    for _ in range(5):
        page = await get(
            jp_fetch,
            "runs",
            store=key,
            experiment=tracked.experiment_id,
            max_results="2",
            page_token=token,
        )
        seen += [r["name"] for r in page["runs"]]
        token = page["next_page_token"]
        if not token:
            break
    # the child started after its parent: on a page of its own, it stays in time order
    assert seen == ["by hand", "shared", "second", "child", "first"]


async def test_filter_by_status_and_search_as_the_mlflow_ui(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    exp = tracked.experiment_id
    failed = await get(jp_fetch, "runs", store=key, experiment=exp, status="failed")
    assert [r["name"] for r in failed["runs"]] == ["second"]
    named = await get(jp_fetch, "runs", store=key, experiment=exp, search="SEC")
    assert [r["name"] for r in named["runs"]] == ["second"]
    quoted = await get(jp_fetch, "runs", store=key, experiment=exp, search="second's")
    assert quoted["runs"] == []  # words with a quote are still words, not a broken filter
    filtered = await get(jp_fetch, "runs", store=key, experiment=exp, search="params.lr = '0.1'")
    assert [r["name"] for r in filtered["runs"]] == ["shared", "first"]
    both = await get(
        jp_fetch, "runs", store=key, experiment=exp, search="params.lr = '0.1'", status="RUNNING"
    )
    assert [r["name"] for r in both["runs"]] == ["shared"]


async def test_compare_gives_curves_and_the_params_that_differ(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    first, second = tracked.runs["first"], tracked.runs["second"]
    doc = await get(jp_fetch, "runs/compare", store=key, runs=f"{first},{second}")
    # "By time" counts from each run's first point of the user's metrics (its loss here).
    assert all(isinstance(run["start_time"], int) for run in doc["runs"])
    assert [run["time_origin"] for run in doc["runs"]] == [
        doc["metrics"]["loss"][run][0]["timestamp"] for run in (first, second)
    ]
    assert doc["params"] == {"lr": {first: "0.1", second: "0.2"}}
    curves = doc["metrics"]["loss"]
    assert [p["step"] for p in curves[first]] == [0, 1, 2]
    assert [p["value"] for p in curves[second]] == [1 / 2, 1 / 3, 1 / 4]


async def test_the_experiment_picker_lists_the_store_for_its_owner(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    names = [e["name"] for e in (await get(jp_fetch, "runs/experiments", store=key))["experiments"]]
    assert names == ["/Users/alice/other", "/Users/alice/train", "Default"]


async def test_the_store_picker_lists_the_stores_the_callers_jobs_used(
    jp_fetch: Any, store: JobStore, key: str, tracked: Tracked, tmp_path: Path
) -> None:
    # A job of another project's store (as each working directory's mlflow.db was before
    # the one default store), recorded after the notebook's jobs: the newest use.
    old_uri = f"sqlite:///{tmp_path}/old-project/mlflow.db"
    old = job_spec(kind="command", tracking_uri=old_uri, experiment_id="1")
    store.create(old, "20261129-090000-dddddd", owner="alice")
    unregistered = job_spec(kind="command", tracking_uri=f"sqlite:///{tmp_path}/x.db")
    store.create(unregistered, "20261129-080000-eeeeee", owner="alice")
    old_key = register_store(old_uri)
    default_key = register_store(default_tracking_uri())

    mine = (await get(jp_fetch, "runs/stores"))["stores"]
    assert mine == [
        {"store": default_key, "tracking_uri": default_tracking_uri(), "current": True},
        {"store": old_key, "tracking_uri": old_uri, "current": False},
        {"store": key, "tracking_uri": tracked.uri, "current": False},
    ]
    shared = (await get(jp_fetch, "runs/stores", "bob"))["stores"]
    assert shared == [{"store": key, "tracking_uri": tracked.uri, "current": False}]
    assert (await get(jp_fetch, "runs/stores", "mallory"))["stores"] == []


async def test_another_user_sees_only_the_runs_of_jobs_they_may_view(
    jp_fetch: Any, key: str, tracked: Tracked
) -> None:
    exp = tracked.experiment_id
    page = await get(jp_fetch, "runs", "bob", store=key, experiment=exp)
    assert [r["name"] for r in page["runs"]] == ["shared"]
    assert page["params"] == ["epochs", "lr"]
    picker = await get(jp_fetch, "runs/experiments", "bob", store=key)
    assert picker["experiments"] == [{"id": exp, "name": "/Users/alice/train"}]
    code, message = await refused(jp_fetch, "runs", "bob", store=key, experiment="0")
    assert code == 403
    assert "no job you may view" in message
    code, _ = await refused(
        jp_fetch,
        "runs/compare",
        "bob",
        store=key,
        runs=f"{tracked.runs['shared']},{tracked.runs['first']}",
    )
    assert code == 403
    code, _ = await refused(jp_fetch, "runs", "mallory", store=key, experiment=exp)
    assert code == 403
    notebook = await get(jp_fetch, "runs/notebook", "mallory", path=NOTEBOOK)
    assert notebook["store"] is None


async def test_a_page_says_which_jobs_runs_wait_for_their_server_to_those_who_may_view_them(
    jp_fetch: Any, key: str, tracked: Tracked, store: JobStore
) -> None:
    exp = tracked.experiment_id
    assert (await get(jp_fetch, "runs", store=key, experiment=exp))["tracking"] == []
    refused = ConnectionRefusedError("Connection refused")
    for job_id in ("20261130-100100-bbbbbb", "20261130-100200-cccccc"):
        store.start_attempt(job_id, 1, tracked.runs["second"])
        files = AttemptDir(store.attempt_dir(job_id, 1)).make()
        backlog.failing(files, tracked.uri, refused, {Part.END})

    def said(job_id: str) -> str:
        return (
            f"job {job_id}: tracking: {tracked.uri} unreachable since T (connection refused); "
            "the run's end waiting"
        )

    def lines(page: dict[str, Any]) -> list[str]:
        return [re.sub(r"since \d\d:\d\d:\d\d", "since T", line) for line in page["tracking"]]

    alice = await get(jp_fetch, "runs", store=key, experiment=exp)
    assert lines(alice) == [said("20261130-100200-cccccc"), said("20261130-100100-bbbbbb")]
    bob = await get(jp_fetch, "runs", "bob", store=key, experiment=exp)
    assert lines(bob) == [said("20261130-100200-cccccc")], "only the job shared with bob"


@pytest.mark.parametrize(
    ("route", "params", "fragment"),
    [
        ("runs", {"store": "../../etc", "experiment": "1"}, "store key"),
        ("runs", {"experiment": "1"}, "store key"),
        ("runs", {"store": "{key}"}, "experiment id"),
        ("runs", {"store": "{key}", "experiment": "{exp}", "status": "DONE"}, "status must be"),
        ("runs", {"store": "{key}", "experiment": "{exp}", "max_results": "0"}, "max_results"),
        ("runs", {"store": "{key}", "experiment": "{exp}", "max_results": "x"}, "integer"),
        ("runs", {"store": "{key}", "experiment": "{exp}", "search": "params.lr = = 1"}, ""),
        ("runs", {"store": "{key}", "experiment": "{exp}", "page_token": "garbage"}, ""),
        ("runs/compare", {"store": "{key}"}, "compare between"),
        ("runs/compare", {"store": "{key}", "runs": "x' OR 1"}, "not a run id"),
        ("runs/compare", {"store": "{key}", "runs": "0" * 32}, "no run"),
        ("runs/notebook", {}, "path"),
    ],
)
async def test_bad_input_is_a_400(
    jp_fetch: Any, key: str, tracked: Tracked, route: str, params: dict[str, str], fragment: str
) -> None:
    filled = {k: v.format(key=key, exp=tracked.experiment_id) for k, v in params.items()}
    code, message = await refused(jp_fetch, route, **filled)
    assert code == 400
    assert fragment in message


async def test_a_store_no_job_registered_is_not_read(jp_fetch: Any, key: str) -> None:
    code, _ = await refused(jp_fetch, "runs", store="0123456789abcdef", experiment="1")
    assert code == 404


def sweep_in(
    home: Path, tracked: Tracked, experiment_id: str, grants: list[str]
) -> tuple[str, list[str]]:
    """A sweep of ``x`` in ``experiment_id`` of the tracked store, owned by alice, its
    trials told by hand: 0 completed (loss 0.5), 1 pruned at step 3, 2 running; its id
    and its trials' job ids."""
    from optuna.trial import TrialState

    from jupyter_air.sweeps import space
    from jupyter_air.sweeps import store as sweep_store
    from jupyter_air.sweeps.sweep_file import SweepFile

    spec = SweepFile.model_validate(
        {
            "experiment_name": "/Users/alice/train",
            "command": "python train.py",
            "space": {"x": {"type": "int", "low": 0, "high": 9}},
            "objective": {"minimize": "loss"},
            "trials": 3,
            "permissions": grants,
        }
    )
    store = sweep_store.SweepStore(home)
    sweep = store.create(
        spec, owner="alice", working_dir=home, tracking_uri=tracked.uri, user="alice"
    )
    store.set(
        sweep.id,
        **{sweep_store.RUN_ID: "f" * 32, sweep_store.EXPERIMENT_ID: experiment_id},
    )
    study = store.study(sweep)
    jobs = []
    for number in range(3):
        study.enqueue_trial({"x": number})
        trial = study.ask(space.distributions(spec))
        job_id = f"20261130-11000{number}-{sweep.id[3:9]}"
        jobs.append(job_id)
        trial_id = store.trial_id(sweep.id, number)
        store.storage.set_trial_user_attr(trial_id, sweep_store.JOB_ID, job_id)
        if number == 0:
            study.tell(trial, 0.5)
        elif number == 1:
            store.storage.set_trial_user_attr(trial_id, sweep_store.PRUNED_STEP, 3)
            study.tell(trial, state=TrialState.PRUNED)
    return sweep.id, jobs


@pytest.mark.heavy
async def test_an_experiments_sweeps_come_with_their_trials_to_those_who_may_view_them(
    jp_fetch: Any, key: str, tracked: Tracked, store: JobStore
) -> None:
    from jupyter_air.sweeps import store as sweep_store

    exp = tracked.experiment_id
    assert await get(jp_fetch, "runs/sweeps", store=key, experiment=exp) == {"sweeps": []}
    assert not (store.home / sweep_store.DIR / sweep_store.DATABASE).exists(), "nothing made"

    mine, jobs = sweep_in(store.home, tracked, exp, [])
    shared, _ = sweep_in(store.home, tracked, exp, ["bob:CAN_VIEW"])
    sweep_in(store.home, tracked, tracked.other_experiment_id, ["bob:CAN_VIEW"])

    found = (await get(jp_fetch, "runs/sweeps", store=key, experiment=exp))["sweeps"]
    assert [s["id"] for s in found] == [shared, mine], "newest first, this experiment's only"
    sweep = found[1]
    assert (sweep["status"], sweep["run_id"], sweep["trials_planned"]) == ("RUNNING", "f" * 32, 3)
    assert sweep["objective"] == {"minimize": "loss"}
    assert sweep["counts"] == {"RUNNING": 1, "COMPLETE": 1, "PRUNED": 1, "FAIL": 0}
    assert (sweep["best"]["number"], sweep["best"]["value"]) == (0, 0.5)
    assert [
        (t["number"], t["state"], t["params"], t["value"], t["pruned_step"], t["job_id"])
        for t in sweep["trials"]
    ] == [
        (0, "COMPLETE", {"x": 0}, 0.5, None, jobs[0]),
        (1, "PRUNED", {"x": 1}, None, 3, jobs[1]),
        (2, "RUNNING", {"x": 2}, None, None, jobs[2]),
    ]

    seen_by_bob = (await get(jp_fetch, "runs/sweeps", "bob", store=key, experiment=exp))["sweeps"]
    assert [s["id"] for s in seen_by_bob] == [shared], "only the sweep granted to him"
    assert (await get(jp_fetch, "runs/sweeps", "eve", store=key, experiment=exp)) == {"sweeps": []}
    assert (await refused(jp_fetch, "runs/sweeps", store=key, experiment=""))[0] == 400
    assert (await refused(jp_fetch, "runs/sweeps", store="0" * 16, experiment=exp))[0] == 404
