"""A team's tracking server that dies mid-job (issue 23; see docs/benchmarks.md).

Side by side in this one script, against one real ``mlflow server`` (uvicorn, an sqlite
backend store, ``--serve-artifacts``), arms alternating within each round:

1. ``up``: a 2-rank ``air run`` job, ``log_metrics`` every step, 1,000 steps of 5 ms of
   work each, with the server up all along;
2. ``down``: the same job with the server killed (kill -9 of its process group) at step
   100; the server is started again on its port once the job has ended, and the time
   until all 1,000 points, the run's end and both ranks' logs are on it is taken
   (nobody acts: the user's tail process tries again by itself).

The wall time of a job is its supervisor's, from its start to its recorded end. Then,
once: a job whose server stops answering (a proxy that accepts and never replies) is
cancelled with ``air cancel``, and the time until every process of it is gone is taken.

Run: ``.venv/bin/python bench/bench_tracking_outage.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402
from tests.tracking.test_mlflow_permissions import (  # noqa: E402
    Server,
    start_server,
    stop_server,
    wait_ready,
)
from tests.tracking_proxy import Mode, TrackingProxy  # noqa: E402
from tests.waits import job_processes  # noqa: E402

STEPS = 1000
KILL_AT = 100
TRAIN = """\
import os, sys, time
from pathlib import Path
from jupyter_air import log_metrics
for step in range({steps}):
    deadline = time.perf_counter() + 0.005
    while time.perf_counter() < deadline:  # 5 ms of work
        pass
    log_metrics({{"loss": 1 / (step + 1), "lr": 0.1, "acc": step / {steps}}}, step=step)
    if step == {kill_at} and os.environ["RANK"] == "0":
        Path(sys.argv[1]).touch()
"""


def wait(check: Callable[[], object], what: str, timeout: float) -> float:
    """Seconds until ``check()`` is true."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"{what}: not after {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - start


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "server"
        self.root.mkdir()
        self.server = self._start()
        self.home = tmp / "air"
        self.env = {
            **os.environ,
            "AIR_HOME": str(self.home),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        }
        self.jobs = JobStore(self.home)

    def _start(self, port: int | None = None) -> Server:
        server = start_server(
            self.root,
            "--serve-artifacts",
            "--artifacts-destination",
            str(self.root / "a"),
            port=port,
        )
        wait_ready(server)
        return server

    def restart(self) -> None:
        self.server = self._start(int(self.server.uri.rsplit(":", 1)[1]))

    def air(self, uri: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_air.cli", *args],
            capture_output=True,
            text=True,
            env={**self.env, "MLFLOW_TRACKING_URI": uri},
            cwd=self.tmp,
            timeout=300,
        )
        if done.returncode:
            raise SystemExit(f"air {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def submit(self, uri: str, name: str, steps: int = STEPS) -> tuple[str, Path]:
        mark = self.tmp / f"{name}.mark"
        (self.tmp / "train.py").write_text(TRAIN.format(steps=steps, kill_at=KILL_AT))
        workload = self.tmp / f"{name}.yaml"
        workload.write_text(
            f"command: {sys.executable} train.py {mark}\nexperiment_name: bench-outage\n"
            f"mlflow_run_name: {name}\ncompute:\n  nproc_per_node: 2\n"
        )
        doc = json.loads(self.air(uri, "run", "-f", str(workload), "--output", "json"))
        return doc["id"], mark

    def wall(self, job_id: str) -> float:
        wait(lambda: self.jobs.get(job_id).done, "the job's end", 600)
        job = self.jobs.get(job_id)
        assert job.status == "SUCCEEDED", job.message
        assert job.started is not None
        assert job.ended is not None
        return job.ended - job.started

    def landed(self, job_id: str) -> bool:
        from mlflow import MlflowClient

        client = MlflowClient(self.server.uri)
        run_id = self.jobs.attempts(job_id)[0].run_id or ""
        try:
            run = client.get_run(run_id)
            history = client.get_metric_history(run_id, "loss")
            logs = client.list_artifacts(run_id, "logs/node_0")
        except Exception:
            return False
        return run.info.status == "FINISHED" and len(history) == STEPS and len(logs) == 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    bench = Bench(Path(tempfile.mkdtemp(prefix="bench-outage-")))
    up: list[float] = []
    down: list[float] = []
    back: list[float] = []
    try:
        for round_ in range(args.rounds):
            job_id, _ = bench.submit(bench.server.uri, f"up-{round_}")
            up.append(bench.wall(job_id))
            job_id, mark = bench.submit(bench.server.uri, f"down-{round_}")
            wait(mark.exists, "step 100", 300)
            stop_server(bench.server)
            down.append(bench.wall(job_id))
            bench.restart()
            landed = functools.partial(bench.landed, job_id)
            back.append(wait(landed, "every point on the server", 300))
            print(
                f"round {round_}: up {up[-1]:.2f} s, down {down[-1]:.2f} s, back {back[-1]:.1f} s"
            )

        proxy = TrackingProxy(bench.server.uri)
        job_id, mark = bench.submit(proxy.uri, "cancelled", steps=1_000_000)
        wait(mark.exists, "step 100", 300)
        proxy.switch(Mode.SILENT)
        time.sleep(3)  # its shipper is waiting on the server now
        started = time.monotonic()
        bench.air(proxy.uri, "cancel", job_id)
        answered = time.monotonic() - started
        gone = answered + wait(lambda: not job_processes(job_id), "every process gone", 120)
        proxy.close()
    finally:
        if bench.server.process.poll() is None:
            stop_server(bench.server)
        # Its tail process would try what waits for the stopped server as long as its
        # store is there: the store goes, and the process with it.
        shutil.rmtree(bench.tmp, ignore_errors=True)

    ratio = statistics.median(down) / statistics.median(up)
    print(
        f"wall time, median of {args.rounds}: up {statistics.median(up):.2f} s, "
        f"down {statistics.median(down):.2f} s: {ratio:.3f}x"
    )
    print(
        f"server back -> every point, the end and the logs on it: median "
        f"{statistics.median(back):.1f} s, max {max(back):.1f} s"
    )
    print(
        f"cancel while the server says nothing: air cancel answered in {answered:.1f} s, "
        f"every process gone in {gone:.1f} s"
    )


if __name__ == "__main__":
    main()
