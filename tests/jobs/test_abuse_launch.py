"""Asking for more ranks than the machine holds: refused with a clear error before
anything starts, unless asked for on purpose; and a cancel stops a launch in progress."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jupyter_air.jobs.capacity import CPU_RANKS_PER_CORE, TooManyRanks, check, usable_cores
from jupyter_air.jobs.node.launch import RankSpec
from jupyter_air.jobs.node.ranks import LocalRanks
from jupyter_air.jobs.store import JobStore
from jupyter_air.kernel.decorator import distributed
from jupyter_air.kernel.options import OptionError
from tests.cli.test_cli import air, submitted_id
from tests.conftest import WriteScenario
from tests.fake_nvml import Scenario
from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.mlflow_store import fresh_store
from tests.waits import assert_gone_within, job_processes, until

OVERRIDE = "--oversubscribe"


@pytest.mark.parametrize(
    ("nproc", "gpus", "cores", "refused"),
    [
        (8, 8, 2, False),
        (9, 8, 64, "9 ranks need 9 GPUs (one each), and this machine has 8 visible"),
        (CPU_RANKS_PER_CORE * 2, 0, 2, False),
        (CPU_RANKS_PER_CORE * 2 + 1, 0, 2, f"more than {CPU_RANKS_PER_CORE} per core"),
        (10_000, 0, 64, f"ask for at most {CPU_RANKS_PER_CORE * 64}"),
    ],
)
def test_one_rank_per_gpu_or_a_few_per_core(
    nproc: int, gpus: int, cores: int, refused: str | bool
) -> None:
    if not refused:
        check(nproc, gpus, cores, OVERRIDE)
        return
    with pytest.raises(TooManyRanks) as err:
        check(nproc, gpus, cores, OVERRIDE)
    assert str(refused) in str(err.value)
    assert OVERRIDE in str(err.value)


@pytest.fixture
def isolated(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> JobStore:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return JobStore(tmp_path / "air")


def test_the_decorator_refuses_more_cpu_ranks_than_the_machine_holds(isolated: JobStore) -> None:
    too_many = CPU_RANKS_PER_CORE * usable_cores() + 1
    train = distributed(nproc_per_node=too_many)(lambda: "never")
    with pytest.raises(OptionError, match=r"more than \d+ per core.*--oversubscribe"):
        train.distributed()
    assert isolated.jobs() == []


def test_on_a_gpu_machine_each_rank_needs_a_gpu(
    isolated: JobStore,
    scenario: WriteScenario,
    two_gpus: Scenario,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario(two_gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    train = distributed(nproc_per_node=3)(lambda: "never")
    with pytest.raises(OptionError, match=r"3 ranks need 3 GPUs.*has 2 visible"):
        train.distributed()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(OptionError, match="has 1 visible"):
        distributed(nproc_per_node=2)(lambda: "never").distributed()
    assert isolated.jobs() == []


WORKLOAD = "experiment_name: big\ncommand: sleep 600\ncompute:\n  nproc_per_node: {n}\n"


@pytest.fixture
def workdir(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.yaml").write_text(WORKLOAD.format(n=10_000))
    return tmp_path


@pytest.mark.heavy
def test_air_run_refuses_a_workload_the_machine_cannot_hold(workdir: Path) -> None:
    refused = air("run", "-f", "w.yaml", "--dry-run", check=False)
    assert refused.returncode == 1
    assert "compute.nproc_per_node: 10000 CPU ranks on" in refused.stderr
    assert "--oversubscribe (compute.oversubscribe: true)" in refused.stderr
    assert air("run", "-f", "w.yaml", "--dry-run", "--oversubscribe").returncode == 0
    meant = air("run", "-f", "w.yaml", "--dry-run", "--override", "compute.oversubscribe=true")
    assert meant.returncode == 0
    on_ray = air(
        "run", "-f", "w.yaml", "--dry-run", "--override", "compute.oversubscribe=true",
        "--override", "backend=ray", check=False,
    )  # fmt: skip
    assert "compute.oversubscribe is for" in on_ray.stderr
    assert on_ray.returncode == 1
    assert air("list", "--all-status").stdout.strip() == "no jobs"


def rank_specs(count: int, log_dir: Path) -> list[RankSpec]:
    env = {**os.environ, "AIR_JOB_ID": f"launch-{os.getpid()}", "AIR_ATTEMPT": "1"}
    return [RankSpec(r, ["sleep", "600"], env, log_dir / f"rank_{r}.log") for r in range(count)]


def test_a_cancel_stops_a_launch_in_progress(tmp_path: Path) -> None:
    ranks = LocalRanks(rank_specs(300, tmp_path))

    def cancel_once_three_are_up() -> None:
        until(lambda: len(ranks.pids()) >= 3, "three ranks started", 120, step=0.01)
        ranks.cancel()

    threading.Thread(target=cancel_once_three_are_up, daemon=True).start()
    outcome = ranks.run()
    assert (outcome.status, outcome.message) == ("CANCELLED", "cancelled")
    started = len(ranks.pids())
    assert started < 300, "every rank was started before the cancel was looked at"
    assert outcome.exit_codes[started:] == [None] * (300 - started)
    assert job_processes(f"launch-{os.getpid()}") == []


@pytest.mark.heavy
def test_sigterm_to_the_supervisor_stops_a_launch_in_progress(workdir: Path) -> None:
    """What ``air cancel`` does, while an oversubscribed workload's ranks start."""
    (workdir / "w.yaml").write_text(WORKLOAD.format(n=400))
    job_id = submitted_id(air("run", "-f", "w.yaml", "--oversubscribe"))
    store = JobStore(workdir / "air")
    logs = store.attempt_dir(job_id, 1) / "logs" / "node_0"
    until(lambda: len(list(logs.glob("rank_*.log"))) >= 3, "three ranks started", 60, step=0.01)
    cancelled = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "cancel", job_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cancelled.stdout.strip() == f"Job {job_id} cancelled", cancelled.stderr
    assert len(list(logs.glob("rank_*.log"))) < 400, "the launch went on after SIGTERM"
    assert_gone_within(job_id, time.monotonic())
