"""A soak: 200 jobs back to back with a Jupyter server up and its panels polled.

100 trivial ``%%air_distributed -n 1`` cells from one kernel, then 100 ``air run -f
w.yaml --watch`` of a trivial command, one after the other, while a thread polls the
server as the GPU panel and the jobs list do (``GET jupyter-air/gpu`` and
``GET jupyter-air/jobs`` every second). Figures (issue 17's targets):
- the server's RSS growth from after the first jobs to the end (< 10 MB), and its open
  file descriptors and threads then and at the end (nothing left behind);
- the processes of the store's jobs left once everything settled (none: supervisors,
  watchdogs, ranks, and the runs' tail process once idle);
- every job SUCCEEDED, its run FINISHED with its logs attached and system metrics.

A benchmark script with its figures, not a timed test. It takes minutes on 2 cores.
Run: ``.venv/bin/python bench/bench_soak.py [--cells 100] [--runs 100]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_back_to_back import CELL, check_runs, settle  # noqa: E402
from bench.bench_runs import get, start_server  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.tracking.run_tails import IDLE_EXIT  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402

AIR = str(Path(sys.executable).with_name("air"))
WORKLOAD = "experiment_name: soak\ncommand: python rank.py\n"
RANK = "import os\nprint('rank', os.environ['RANK'])\n"


class Poller:
    """The panels' polling, as a browser tab does it."""

    def __init__(self, url: str, token: str) -> None:
        self._routes = [url + "jupyter-air/gpu", url + "jupyter-air/jobs"]
        self._token = token
        self._stop = threading.Event()
        self.polls = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            for route in self._routes:
                try:
                    get(route, self._token)
                    self.polls += 1
                except OSError:
                    self.errors += 1


def server_figures(server: psutil.Process) -> dict[str, float]:
    return {
        "rss_mb": round(server.memory_info().rss / 1e6, 1),
        "fds": server.num_fds(),
        "threads": server.num_threads(),
        "children": len([c for c in server.children(recursive=True) if c.is_running()]),
    }


def jobs_processes(home: Path) -> list[str]:
    """Processes of this store's jobs still running (zombies are ended)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(a.startswith("jupyter_air.jobs.") for a in cmdline):
            try:
                env = proc.environ()
            except psutil.Error:
                env = {}
            if str(home) in " ".join(cmdline) or env.get("AIR_HOME") == str(home):
                found.append(" ".join(cmdline[:4]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-soak-"))
    (work / "root").mkdir()
    home = work / "air"
    tracking_uri = f"sqlite:///{work}/mlflow.db"
    os.environ.update(
        {"AIR_HOME": str(home), "MLFLOW_TRACKING_URI": tracking_uri, "CUDA_VISIBLE_DEVICES": ""}
    )
    (work / "w.yaml").write_text(WORKLOAD)
    (work / "rank.py").write_text(RANK)
    server_process, url, token = start_server(work, "jupyter_server")
    server = psutil.Process(server_process.pid)
    kernel = Kernel(dict(os.environ), cwd=work)
    results: dict[str, object] = {}
    try:
        with Poller(url, token) as poller:
            kernel.run("%load_ext jupyter_air\nimport mlflow")
            for _ in range(3):  # warm: the store, the experiment, the server's imports
                kernel.run(CELL)
            settle(kernel, home)
            time.sleep(3)
            results["server_before"] = before = server_figures(server)
            started = time.monotonic()
            for _ in range(args.cells):
                execution = kernel.run(CELL)
                assert execution.error is None, execution.traceback
            results["cells_s"] = round(time.monotonic() - started, 1)
            settle(kernel, home)
            started = time.monotonic()
            for _ in range(args.runs):
                subprocess.run(
                    [AIR, "run", "-f", "w.yaml", "--watch"],
                    cwd=work,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            results["air_runs_s"] = round(time.monotonic() - started, 1)
            settle(kernel, home)
            time.sleep(IDLE_EXIT + 5)  # the runs' tail process ends once idle
            gc.collect()
            results["server_after"] = after = server_figures(server)
            results["server_rss_growth_mb"] = round(after["rss_mb"] - before["rss_mb"], 1)
            results["polls"], results["poll_errors"] = poller.polls, poller.errors
        results["jobs_processes_left"] = jobs_processes(home)
        results["runs"] = check_runs(JobStore(home), tracking_uri)
    finally:
        kernel.shutdown()
        server_process.terminate()
        server_process.wait(30)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
