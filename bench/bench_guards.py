"""A guard: a NaN loss journaled to the job stopped, its outcome recorded and its
notification received (issue 39, item 2; see docs/benchmarks.md).

Each of ``--rounds`` ``air run`` jobs trains a rank that logs a loss every 20 ms
(``jupyter_air.log_metrics``), a NaN at step 100 (2 s in, the job well under way), and
trains on; its guard is ``loss: nan -> notify, stop`` and its target a real webhook
receiver on loopback. Taken from the NaN point's own time in the journal (when
``log_metrics`` wrote it):

1. notified: the guard's notification reaches the receiver;
2. stopped: the job's end is recorded (its supervisor's ``ended``, FAILED, with why);
3. told the end: the failure's notification reaches the receiver.

The target is p50 <= 2 s for the later of 2 and 3 (the job stopped, its outcome
recorded and the notification sent).

Run: ``.venv/bin/python bench/bench_guards.py [--rounds 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_notify import wait_for  # noqa: E402

from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.tracking.journal import read  # noqa: E402
from tests.notify_servers import WebhookReceiver  # noqa: E402

TRAIN = """\
import math, time
from jupyter_air import log_metrics

for step in range(1, 100_000):
    log_metrics({"loss": math.nan if step >= 100 else 1 / step}, step=step)
    time.sleep(0.02)
"""
WHY = "guard 'loss: nan' at step 100 (loss = nan)"


def one_job(work: Path, env: dict[str, str], hook: str) -> str:
    workload = {
        "experiment_name": "bench-guards",
        "command": f"{sys.executable} train.py",
        "notify": [{"webhook": hook, "on": ["failure"]}],
        "guard": ["loss: nan -> notify, stop"],
    }
    (work / "w.yaml").write_text(json.dumps(workload))
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.split()[1]


def nan_time(store: JobStore, job_id: str) -> float:
    """When rank 0's ``log_metrics`` journaled the NaN (Unix seconds)."""
    journal = store.attempt_dir(job_id, 1) / "metrics.jsonl"
    (first,) = [
        p.timestamp / 1000
        for points, _ in read(journal, 0, 1 << 30)
        for p in points
        if p.key == "loss" and p.step == 100
    ]
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-guards-"))
    (work / "train.py").write_text(TRAIN)
    receiver = WebhookReceiver().start()
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
    }
    store = JobStore(work / "air")
    took: dict[str, list[float]] = {"notified": [], "stopped": [], "end told": [], "all": []}
    try:
        for round_ in range(args.rounds):
            job_id = one_job(work, env, receiver.url)
            wait_for(lambda: store.get(job_id).ended is not None, "the job's end")  # noqa: B023
            wait_for(lambda: len(receiver.received) >= 2 * (round_ + 1), "both posts")  # noqa: B023
            job = store.get(job_id)
            assert (job.status, job.message) == ("FAILED", WHY), (job.status, job.message)
            posts = receiver.posts[-2:]
            guard, end = receiver.received[-2:]
            assert posts[0][0]["event"] == "guard", posts[0][0]["title"]
            assert posts[1][0]["event"] == "failure", posts[1][0]["title"]
            nan = nan_time(store, job_id)
            assert job.ended is not None
            took["notified"].append(guard - nan)
            took["stopped"].append(job.ended - nan)
            took["end told"].append(end - nan)
            took["all"].append(max(job.ended, end) - nan)
            said = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in took.items())
            print(f"round {round_ + 1}: {said}", flush=True)
    finally:
        receiver.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'from the NaN journaled to':28} {'p50 s':>7} {'max s':>7}")
    for name, values in took.items():
        print(f"{name:28} {statistics.median(values):7.2f} {max(values):7.2f}")


if __name__ == "__main__":
    main()
