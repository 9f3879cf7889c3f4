"""Real sweeps on the CPU (issue 40): every trial a real job with its supervisor and
ranks, driven by the sweep's own detached driver.

One sweep of 2-rank gloo trials over a grid with a known optimum is checked for most
things at once: the ranks get the trial's parameters, the best trial is found, each
trial's run is nested under the sweep's run, which holds the best parameters; and its
driver, killed mid-sweep, is resumed by ``air sweep resume`` with no trial lost or run
twice. A second, 1-rank sweep has its weak trial pruned by the median pruner.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from mlflow.tracking import MlflowClient

from jupyter_air.jobs.store import Job, JobStore
from jupyter_air.procs import alive
from jupyter_air.sweeps import driver, space
from jupyter_air.sweeps.store import SweepStatus, SweepStore
from jupyter_air.sweeps.sweep_file import SweepFile
from jupyter_air.sweeps.trials import SWEEP_TAG, MetricReader
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for
from tests.mlflow_store import fresh_store
from tests.waits import supervised_until_its_end, until

pytestmark = [pytest.mark.heavy, pytest.mark.slow]

#: Both ranks must agree on x (all_reduce), then loss = (x - 2)^2 + 1/step: the last
#: point, at step 3, is (x - 2)^2 + 1/3; x = 2 is the best.
GLOO_TRIAL = """\
import time, torch, torch.distributed as dist
from jupyter_air import log_metrics, params

dist.init_process_group("gloo")
x = params()["x"]
total = torch.tensor([float(x)])
dist.all_reduce(total)
assert total.item() == x * dist.get_world_size(), "every rank has the trial's x"
for step in range(1, 4):
    time.sleep(0.5)
    log_metrics({"loss": (x - 2) ** 2 + 1 / step}, step=step)
dist.destroy_process_group()
"""

#: x = 2 logs 40 low points at once; x = 5 logs high ones slowly, until pruned.
PRUNED_TRIAL = """\
import time
from jupyter_air import log_metrics, params

x = params()["x"]
for step in range(1, 41):
    log_metrics({"loss": (x - 2) ** 2 + 1 / step}, step=step)
    if x != 2:
        time.sleep(0.25)
"""


@pytest.fixture
def workdir(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def started(workdir: Path, script: str, sweep: dict[str, Any]) -> str:
    """``air sweep -f`` of ``sweep`` running ``script``: the sweep's id."""
    (workdir / "train.py").write_text(script)
    (workdir / "sweep.yaml").write_text(
        json.dumps({"experiment_name": "toy", "command": f"{sys.executable} train.py", **sweep})
    )
    done = air("sweep", "-f", "sweep.yaml")
    assert done.returncode == 0, done.stderr
    found = re.match(r"Sweep (sw-[0-9a-f]{8}) started", done.stdout)
    assert found, done.stdout
    return found[1]


def ended(home: Path, sweep_id: str, timeout: float) -> dict[str, Any]:
    """``air sweep get --output json`` once the sweep (in ``home``) ended."""
    store = SweepStore(home)
    log = home / "sweeps" / f"{sweep_id}.log"
    until(
        lambda: not store.get(sweep_id).status.active,
        f"sweep {sweep_id} to end",
        timeout,
        seen=lambda: log.read_text()[-3000:],
    )
    shown = air("sweep", "get", sweep_id, "--output", "json")
    assert shown.returncode == 0, shown.stderr
    doc: dict[str, Any] = json.loads(shown.stdout)
    return doc


def test_a_sweep_of_2_rank_trials_finds_the_best_nests_its_runs_and_survives_its_driver(
    workdir: Path,
) -> None:
    sweep_id = started(
        workdir,
        GLOO_TRIAL,
        {
            "compute": {"nproc_per_node": 2},
            "space": {"x": {"type": "int", "low": 0, "high": 3}},
            "objective": {"minimize": "loss"},
            "trials": 4,
            "parallel": 2,
            "sampler": "grid",
            "seed": 0,
        },
    )
    home = workdir / "air"
    store = SweepStore(home)

    # Killed outright once its first two trials' jobs run: trials already running
    # are adopted by the next driver, not started again.
    until(
        lambda: sum(t.job_id is not None for t in store.trials(sweep_id)) >= 2,
        "the first two trials' jobs",
        180,
    )
    first = driver.running(home, sweep_id)
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    until(lambda: not alive(first.pid, started_by=first.started), "the driver's death", 30)
    assert store.get(sweep_id).status is SweepStatus.RUNNING
    resumed = air("sweep", "resume", sweep_id)
    assert resumed.returncode == 0, resumed.stderr
    assert driver.running(home, sweep_id) != first

    doc = ended(workdir / "air", sweep_id, 600)
    assert (doc["status"], doc["message"]) == ("COMPLETED", None)
    trials = doc["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * 4, trials
    assert sorted(t["params"]["x"] for t in trials) == [0, 1, 2, 3]
    for t in trials:
        assert t["value"] == pytest.approx((t["params"]["x"] - 2) ** 2 + 1 / 3)
    assert doc["best"]["params"] == {"x": 2}
    assert doc["best"]["value"] == pytest.approx(1 / 3)

    # One job per trial, none run twice.
    jobs = JobStore(home).jobs()
    of_sweep = [j for j in jobs if j.spec.tracking.tags.get(SWEEP_TAG) == sweep_id]
    assert sorted(j.id for j in of_sweep) == sorted(t["job_id"] for t in trials)
    assert {j.status for j in of_sweep} == {"SUCCEEDED"}

    # The trials' runs under the sweep's run, which holds the best.
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    sweep_run = client.get_run(doc["run_id"])
    assert sweep_run.data.params["best.x"] == "2"
    assert sweep_run.data.metrics["best_loss"] == pytest.approx(1 / 3)
    assert sweep_run.data.tags["air.sweep.best_run_id"] == doc["best"]["run_id"]
    assert sweep_run.info.status == "FINISHED"
    for t in trials:
        run = client.get_run(t["run_id"])
        assert run.data.tags["mlflow.parentRunId"] == doc["run_id"]
        assert run.data.params["x"] == str(t["params"]["x"])
        assert run.data.tags["air.sweep.state"] == "COMPLETE"
        assert run.info.experiment_id == sweep_run.info.experiment_id

    listed = air("sweep", "list")
    assert re.search(rf"^{sweep_id} +COMPLETED .* 4/4 +0\.333333 toy$", listed.stdout, re.M), (
        listed.stdout
    )


def first_asked(sweep: dict[str, Any]) -> Any:
    """The x the sweep's sampler asks first (its grid is shuffled by its seed)."""
    spec = SweepFile.model_validate({"experiment_name": "toy", "command": "true", **sweep})
    study = optuna.create_study(sampler=space.sampler(spec))
    return study.ask(space.distributions(spec)).params["x"]


#: Trial x's loss is (x - 2)^2, logged by rank 0 once it saw another trial's rank 0 up
#: in ``folder`` (the first two trials): they can only end if they ran at once.
SIDE_BY_SIDE_TRIAL = """\
import os, pathlib, time
from jupyter_air import log_metrics, params

x = params()["x"]
if os.environ["RANK"] == "0":
    folder = pathlib.Path({folder!r})
    (folder / f"up-{{x}}").touch()
    deadline = time.monotonic() + 240
    while len(list(folder.glob("up-*"))) < 2:
        assert time.monotonic() < deadline, "no other trial ran beside this one"
        time.sleep(0.2)
    log_metrics({{"loss": (x - 2) ** 2}}, step=1)
"""


def a_sweep_side_by_side(
    workdir: Path, home: Path, backend: dict[str, Any], timeout: float = 600
) -> list[Job]:
    """3 trials of x in 1..3, 2 at a time, as jobs of ``backend`` (a workload's
    ``backend:`` and ``compute:``), from ``air sweep -f`` in ``workdir``: checked that
    it finds x = 2, its first two trials' jobs ran at once, and each trial's run is
    nested under the sweep's run. The trials' jobs, by trial."""
    (workdir / "up").mkdir()
    sweep_id = started(
        workdir,
        SIDE_BY_SIDE_TRIAL.format(folder=str(workdir / "up")),
        {
            **backend,
            "space": {"x": [1, 2, 3]},
            "objective": {"minimize": "loss"},
            "trials": 3,
            "parallel": 2,
            "sampler": "grid",
        },
    )
    doc = ended(home, sweep_id, timeout)
    assert (doc["status"], doc["message"]) == ("COMPLETED", None), doc
    trials = doc["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * 3, trials
    assert (doc["best"]["params"], doc["best"]["value"]) == ({"x": 2}, 0.0)

    store = JobStore(home)
    jobs = [store.get(t["job_id"]) for t in trials]
    assert {j.status for j in jobs} == {"SUCCEEDED"}
    for job in jobs:
        supervised_until_its_end(job, 120)
    first, second = (store.attempts(j.id)[-1] for j in jobs[:2])
    overlap = min(first.ended or 0, second.ended or 0) - max(first.started, second.started)
    assert overlap > 0, "the first two trials' attempts ran side by side"

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    for t in trials:
        run = client.get_run(t["run_id"])
        assert run.data.tags["mlflow.parentRunId"] == doc["run_id"]
        assert run.data.params["x"] == str(t["params"]["x"])
    return jobs


def test_the_median_pruner_cancels_a_trial_whose_points_are_worse(workdir: Path) -> None:
    sweep: dict[str, Any] = {
        "space": {"x": [2, 5]},
        "objective": {"minimize": "loss"},
        "trials": 2,
        "sampler": "grid",
        "pruner": {"name": "median", "n_startup_trials": 1},
    }
    # A seed whose grid runs x = 2 first: the pruner judges x = 5 by its points.
    sweep["seed"] = next(s for s in range(100) if first_asked({**sweep, "seed": s}) == 2)
    sweep_id = started(workdir, PRUNED_TRIAL, sweep)

    doc = ended(workdir / "air", sweep_id, 300)
    assert doc["status"] == "COMPLETED"
    good, weak = doc["trials"]
    assert (good["params"], good["state"]) == ({"x": 2}, "COMPLETE")
    assert (weak["params"], weak["state"]) == ({"x": 5}, "PRUNED")
    assert 1 <= weak["pruned_step"] < 40
    assert doc["best"]["number"] == good["number"]
    job = until(
        lambda: (j := JobStore(workdir / "air").get(weak["job_id"])).done and j,
        "the pruned trial's job to end",
        60,
    )
    assert job.status == "CANCELLED"
    run = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_run(weak["run_id"])
    assert run.data.tags["air.sweep.state"] == "PRUNED"
    assert run.data.tags["air.sweep.pruned_step"] == str(weak["pruned_step"])
    shown = air("sweep", "get", sweep_id).stdout
    assert f"trial {weak['number']}: PRUNED at step {weak['pruned_step']} {{'x': 5}}" in shown


#: A trial that runs until it is cancelled, saying which GPU it holds.
ENDLESS_TRIAL = """\
import os, time
from jupyter_air import log_metrics

gpu = float(os.environ["CUDA_VISIBLE_DEVICES"])
for step in range(1, 10**6):
    log_metrics({"loss": 1 / step, "gpu": gpu}, step=step)
    time.sleep(0.2)
"""


def test_parallel_trials_hold_a_gpu_each_and_air_sweep_stop_cancels_them(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = Scenario(gpus=[FakeGpu(), FakeGpu()]).write(workdir / "nvml.txt")
    for name, value in env_for(build_library(), scenario).items():
        monkeypatch.setenv(name, value)
    sweep_id = started(
        workdir,
        ENDLESS_TRIAL,
        {
            "space": {"x": {"type": "float", "low": 0, "high": 1}},
            "objective": {"minimize": "loss"},
            "trials": 5,
            "parallel": 2,
            "sampler": "random",
        },
    )
    store = SweepStore(workdir / "air")
    until(
        lambda: sum(t.job_id is not None for t in store.trials(sweep_id)) == 2,
        "two trials' jobs",
        180,
    )
    jobs = JobStore(workdir / "air")
    readers = [MetricReader(jobs, t.job_id or "", "gpu") for t in store.trials(sweep_id)]
    held = [until(r.read, f"job {r.job_id}'s GPU", 120)[0][1] for r in readers]
    assert sorted(held) == [0.0, 1.0], "one GPU each"

    stopped = air("sweep", "stop", sweep_id)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"Sweep {sweep_id} stopping")

    doc = ended(workdir / "air", sweep_id, 180)
    assert doc["status"] == "STOPPED"
    assert [t["state"] for t in doc["trials"]] == ["FAIL", "FAIL"], "no third trial"
    for t in doc["trials"]:
        assert t["message"].startswith("job cancelled")
        assert jobs.get(t["job_id"]).status == "CANCELLED"
    run = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_run(doc["run_id"])
    assert (run.info.status, run.data.tags["air.sweep.state"]) == ("KILLED", "STOPPED")
    again = air("sweep", "stop", sweep_id)
    assert (again.returncode, again.stderr) == (
        1,
        f"air: sweep {sweep_id} already ended (stopped)\n",
    )
