"""The environment contract of a rank: what torchrun gives its workers, and ours."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from jupyter_air.jobs import env as job_env
from jupyter_air.jobs.env import RankPlace, rank_env, visible_gpus
from jupyter_air.jobs.node import stacks

TORCHRUN_VARIABLES = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
}  # fmt: skip


def env_of(
    place: RankPlace, base: dict[str, str] | None = None, **kwargs: object
) -> dict[str, str]:
    options: dict[str, object] = {
        "master_addr": "10.0.0.1",
        "master_port": 29511,
        "job_id": "20261129-083012-a1b2c3",
        "attempt": 2,
        "max_restarts": 3,
        "gpus": None,
    }
    options.update(kwargs)
    return rank_env(base or {"PATH": "/usr/bin"}, place, **options)  # type: ignore[arg-type]


def test_every_torchrun_variable_is_set_as_torchrun_sets_it() -> None:
    env = env_of(RankPlace(rank=5, local_rank=1, node_rank=1, nproc_per_node=4, nnodes=2))
    assert set(env) >= TORCHRUN_VARIABLES
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["ROLE_RANK"]) == (
        "5",
        "1",
        "1",
        "5",
    )
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("8", "4", "2")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29511")
    assert env["TORCHELASTIC_RUN_ID"] == "20261129-083012-a1b2c3"
    assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("1", "3")
    assert (env["AIR_JOB_ID"], env["AIR_ATTEMPT"]) == ("20261129-083012-a1b2c3", "2")
    assert env["PATH"] == "/usr/bin"


def test_omp_threads_is_one_when_ranks_share_a_node_and_the_user_set_none() -> None:
    shared = RankPlace(0, 0, 0, nproc_per_node=2, nnodes=1)
    assert env_of(shared)["OMP_NUM_THREADS"] == "1"
    assert env_of(shared, {"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8"
    assert "OMP_NUM_THREADS" not in env_of(RankPlace(0, 0, 0, nproc_per_node=1, nnodes=1))


def test_one_gpu_per_rank_from_the_visible_ones() -> None:
    place = RankPlace(rank=1, local_rank=1, node_rank=0, nproc_per_node=2, nnodes=1)
    assert env_of(place, gpus=["2", "5"])["CUDA_VISIBLE_DEVICES"] == "5"
    assert "CUDA_VISIBLE_DEVICES" not in env_of(place, gpus=[])


def test_visible_gpus_follow_the_kernels_cuda_visible_devices() -> None:
    assert visible_gpus({}, 2) == ["0", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}, 8) == ["3", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 8) == []


def run_rank(tmp_path: Path, source: str, env: dict[str, str]) -> Any:
    """Run ``source`` as a cell on rank 0 through the real entry point; its value."""
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(cloudpickle.dumps({"kind": "cell", "source": source}))
    rank = subprocess.Popen(
        [sys.executable, "-m", "jupyter_air.jobs.node.rank_main", str(payload), str(tmp_path)],
        env={**os.environ, "RANK": "0", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = rank.communicate(timeout=120)  # a clear() that never empties loops
    except subprocess.TimeoutExpired:
        try:
            where = stacks.dump(rank.pid)  # where it is stuck, before it goes
        except stacks.StacksError as err:
            where = f"not taken: {err}"
        finally:
            rank.kill()
            rank.communicate()
        raise AssertionError(f"the rank did not end in 120 s; its stacks:\n{where}") from None
    assert rank.returncode == 0, stderr
    return cloudpickle.loads((tmp_path / "result.pkl").read_bytes())["value"]


JOB_MLFLOW = {
    "MLFLOW_RUN_ID": "0123456789abcdef0123456789abcdef",
    "MLFLOW_EXPERIMENT_ID": "7",
    "MLFLOW_TRACKING_URI": "sqlite:///nowhere.db",
}

MAPPING_CELL = """
import os
saved, seen = dict(os.environ), {}
seen["pop"] = (os.environ.pop("MLFLOW_RUN_ID"), "MLFLOW_RUN_ID" in os.environ)
del os.environ["MLFLOW_EXPERIMENT_ID"]
seen["del"] = "MLFLOW_EXPERIMENT_ID" in os.environ
os.environ.clear()  # as accelerate's clear_environment() does
seen["clear"] = dict(os.environ)
os.environ.update(saved)
while os.environ:
    os.environ.popitem()
seen["popitem"] = dict(os.environ)
os.environ.update(saved)
seen
"""


def test_a_ranks_environment_is_a_plain_mapping_job_variables_included(tmp_path: Path) -> None:
    seen = run_rank(tmp_path, MAPPING_CELL, JOB_MLFLOW)
    assert seen["pop"] == (JOB_MLFLOW["MLFLOW_RUN_ID"], False)
    assert seen["del"] is False
    assert seen["clear"] == {}
    assert seen["popitem"] == {}


MLFLOW_CELL = """
import os, mlflow
seen = []
with mlflow.start_run() as run:  # resumes the job's run, and MLflow unsets the variable
    seen.append((run.info.run_id, os.environ.get("MLFLOW_RUN_ID")))
seen.append(os.environ.get("MLFLOW_RUN_ID"))
for step in range(3):  # the managed product's examples, once per step
    with mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"]):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
seen.append(os.environ.get("MLFLOW_RUN_ID"))
del os.environ["MLFLOW_RUN_ID"]  # the user's own removal stands
mlflow.start_run(experiment_id=os.environ["MLFLOW_EXPERIMENT_ID"])
mlflow.end_run()
seen.append("MLFLOW_RUN_ID" in os.environ)
seen
"""


def test_what_mlflows_start_and_end_run_remove_is_put_back(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("rank")
    run_id = client.create_run(experiment).info.run_id
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_ID": experiment, "MLFLOW_RUN_ID": run_id}

    seen = run_rank(tmp_path, MLFLOW_CELL, env)

    assert seen == [(run_id, run_id), run_id, run_id, False]
    losses = client.get_metric_history(run_id, "loss")
    assert [m.step for m in sorted(losses, key=lambda m: m.step)] == [0, 1, 2]


def test_log_metrics_without_any_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air import log_metrics

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    with pytest.raises(RuntimeError, match="MLFLOW_RUN_ID is not set and no run is active"):
        log_metrics({"loss": 1.0}, step=0)


def test_master_port_comes_from_below_the_ephemeral_ports_that_others_get_unasked() -> None:
    """A port from ``bind(0)`` or an outgoing connection can take an ephemeral one between
    the choice and the rank's bind (EADDRINUSE in ``init_process_group``)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {job_env.free_port() for _ in range(5)}
    assert all(job_env.PORT_FLOOR <= port < low for port in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free, as said


ONE = RankPlace(rank=0, local_rank=0, node_rank=0, nproc_per_node=1, nnodes=1)


def test_every_rank_gets_the_hooks_site_first_on_its_path_unless_nothing_needs_it() -> None:
    """The step marks (issue 38) need it in every rank; resuming (issue 26) on a retry or
    ``--resume``; with ``AIR_PERF=0`` and nothing to resume, the path is the user's."""
    from jupyter_air.jobs.autoresume import SITE

    first = env_of(ONE, {"PYTHONPATH": "/mine"}, attempt=1)
    assert first["PYTHONPATH"] == f"{SITE}{os.pathsep}/mine", "steps marked, no code changed"
    off = env_of(ONE, {"PYTHONPATH": "/mine", "AIR_PERF": "0"}, attempt=1)
    assert off["PYTHONPATH"] == "/mine", "a first attempt has nothing to resume"
    retry = env_of(ONE, {"PYTHONPATH": "/mine", "AIR_PERF": "0"}, attempt=2)
    assert retry["PYTHONPATH"] == f"{SITE}{os.pathsep}/mine"
    resumed = env_of(ONE, {"AIR_PERF": "0"}, attempt=1, extra={"AIR_RESUME_FROM": "/ckpt/step-1"})
    assert resumed["PYTHONPATH"] == str(SITE)
    neither = env_of(ONE, {"AIR_PERF": "0"}, attempt=2, extra={"AIR_AUTO_RESUME": "0"})
    assert "PYTHONPATH" not in neither
    guarded = env_of(ONE, {"AIR_PERF": "0"}, attempt=1, extra={"AIR_GUARDS": '{"dir": "/a"}'})
    assert guarded["PYTHONPATH"] == str(SITE), "a job's guards hook its trainers (issue 39)"


def test_the_hooks_sitecustomize_runs_the_one_it_hides(tmp_path: Path) -> None:
    """A user's (or the distribution's) ``sitecustomize`` still runs, after ours."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("import builtins\nbuiltins.MINE_RAN = True\n")
    env = env_of(ONE, {"PATH": os.environ["PATH"], "PYTHONPATH": str(mine)}, attempt=2)
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys, builtins\n"
            "from jupyter_air import import_hooks\n"
            "print(getattr(builtins, 'MINE_RAN', False),"
            " any(isinstance(f, import_hooks._Finder) for f in sys.meta_path),"
            " os.environ['PYTHONPATH'])",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.split() == ["True", "True", str(mine)], shown.stderr
    # what the rank starts (a trial, a tool) is not the rank: it does not resume
