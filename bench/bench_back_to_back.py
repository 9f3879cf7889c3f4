"""Back-to-back trivial cells from one kernel vs the same cell alone (see docs/benchmarks.md).

Side by side, in one kernel:
1. trivial ``%%air_distributed -n 1`` cells alone, each once every process of the
   previous job has ended and the runs' tail process is idle: what one cell costs alone;
2. the same cell back to back, each as soon as the previous one returned.
Both in ``--blocks`` alternating blocks (``--alone`` and ``--cells`` in all), so that a
machine whose load changes (other users, other tests) weighs on both alike.

The target (issue 17): the back-to-back cells take at most 1.5x ``cells`` times one
alone, and the processes of finished jobs (their supervisors and watchdogs, and the
per-user process that ends their runs) never hold more than 300 MB RSS together,
sampled every 0.1 s. Then every job's run is checked: FINISHED, its logs attached,
its system metrics recorded.

Run: ``.venv/bin/python bench/bench_back_to_back.py [--cells 100] [--alone 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402

CELL = "%%air_distributed -n 1\nimport os\nprint('rank', os.environ['RANK'])\n"
DONE = ("SUCCEEDED", "FAILED", "CANCELLED")
JOBS_TAIL = "jupyter_air.tracking.run_tails"


class FinishedJobsRss:
    """The summed RSS of the processes of this store's finished jobs, sampled."""

    def __init__(self, kernel_pid: int, store: JobStore) -> None:
        self._kernel = psutil.Process(kernel_pid)
        self._store = store
        self._home = str(store.home)
        self.peak = 0
        self.peak_count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> FinishedJobsRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            total, count = self.sample()
            if total > self.peak:
                self.peak, self.peak_count = total, count

    def sample(self) -> tuple[int, int]:
        status: dict[str, str] = {}
        total = count = 0
        for proc in self._candidates():
            try:
                job_id = self._job_of(proc)
                if job_id is None:
                    continue
                if job_id == "tails" or self._status(job_id, status) in DONE:
                    total += proc.memory_info().rss
                    count += 1
            except (psutil.Error, KeyError):
                continue
        return total, count

    def _candidates(self) -> list[psutil.Process]:
        found = self._kernel.children(recursive=True)
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if JOBS_TAIL in cmdline and self._home in cmdline:
                found.append(proc)
        return found

    def _job_of(self, proc: psutil.Process) -> str | None:
        cmdline = proc.cmdline()
        if JOBS_TAIL in cmdline:
            return "tails"
        if "jupyter_air.jobs.supervision.supervisor" in cmdline:
            return cmdline[cmdline.index("jupyter_air.jobs.supervision.supervisor") + 1]
        for arg in cmdline:
            if arg.startswith("AIR_JOB_ID="):  # a watchdog's match
                return arg.split("=", 1)[1]
        return proc.environ().get("AIR_JOB_ID")

    def _status(self, job_id: str, cache: dict[str, str]) -> str:
        if job_id not in cache:
            cache[job_id] = self._store.get(job_id).status
        return cache[job_id]


def settle(kernel: Kernel, home: Path) -> None:
    """Wait until every process of the kernel's jobs has ended and the tail process has
    nothing pending: the next cell then runs alone. (The kernel's other children, such as
    the MLflow UI it serves, stay; the idle tail process costs nothing.)"""
    kernel_process = psutil.Process(kernel_pid(kernel))
    jobs = []
    for proc in kernel_process.children(recursive=True):
        try:
            cmdline = proc.cmdline()
        except psutil.Error:
            continue
        if any(a.startswith("jupyter_air.jobs.") for a in cmdline) and JOBS_TAIL not in cmdline:
            jobs.append(proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(_running(p) for p in jobs):
        time.sleep(0.05)
    while list((home / "tails").glob("*.json")):
        time.sleep(0.05)


def kernel_pid(kernel: Kernel) -> int:
    pid: int = getattr(kernel.manager.provisioner, "pid")  # noqa: B009 (a local provisioner)
    return pid


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (the kernel reaps its supervisors when it next starts one)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cell(kernel: Kernel) -> float:
    execution = kernel.run(CELL)
    assert execution.error is None, execution.traceback
    assert "rank 0" in execution.stdout, execution.stdout
    return execution.seconds


def _share(total: int, blocks: int, block: int) -> int:
    return total // blocks + (block < total % blocks)


def alone_cells(kernel: Kernel, home: Path, count: int) -> list[float]:
    """``count`` cells, each with nothing of an earlier job left running."""
    seconds = []
    for _ in range(count):
        seconds.append(cell(kernel))
        settle(kernel, home)
    return seconds


def check_runs(store: JobStore, tracking_uri: str) -> dict[str, int]:
    """Every job's runs: ended, their logs attached, their system metrics recorded."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    counts = {"jobs": 0, "succeeded": 0, "runs_finished": 0, "logs": 0, "metrics": 0}
    for job in store.jobs(active_only=False, limit=100_000):
        counts["jobs"] += 1
        counts["succeeded"] += job.status == "SUCCEEDED"
        for attempt in store.attempts(job.id):
            assert attempt.run_id is not None, f"job {job.id} attempt {attempt.attempt}: no run"
            run = client.get_run(attempt.run_id)
            counts["runs_finished"] += run.info.status == "FINISHED"
            counts["logs"] += bool(client.list_artifacts(attempt.run_id, "logs/node_0"))
            counts["metrics"] += any(k.startswith("system/") for k in run.data.metrics)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--alone", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-b2b-"))
    home = work / "air"
    tracking_uri = f"sqlite:///{work}/mlflow.db"
    env = {
        **os.environ,
        "AIR_HOME": str(home),
        "MLFLOW_TRACKING_URI": tracking_uri,
        "CUDA_VISIBLE_DEVICES": "",
    }
    kernel = Kernel(env, cwd=work)
    try:
        kernel.run("%load_ext jupyter_air\nimport mlflow")
        store = JobStore(home)
        cell(kernel)  # the first call creates the MLflow store and the experiment
        settle(kernel, home)
        alone: list[float] = []
        back_to_back: list[float] = []
        wall = 0.0
        with FinishedJobsRss(kernel_pid(kernel), store) as rss:
            for block in range(args.blocks):
                alone += alone_cells(kernel, home, _share(args.alone, args.blocks, block))
                started = time.monotonic()
                for _ in range(_share(args.cells, args.blocks, block)):
                    back_to_back.append(cell(kernel))
                wall += time.monotonic() - started
                settle(kernel, home)
        counts = check_runs(store, tracking_uri)
    finally:
        kernel.shutdown()
    one = statistics.median(alone)
    print(
        json.dumps(
            {
                "alone_seconds": [round(x, 3) for x in alone],
                "alone_median_s": round(one, 3),
                "back_to_back_total_s": round(wall, 1),
                "back_to_back_per_cell_median_s": round(statistics.median(back_to_back), 3),
                "ratio_vs_cells_x_alone": round(wall / (args.cells * one), 2),
                "finished_jobs_peak_rss_mb": round(rss.peak / 1e6, 1),
                "finished_jobs_processes_at_peak": rss.peak_count,
                "runs": counts,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
