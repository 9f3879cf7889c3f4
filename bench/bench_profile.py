"""Issue 38, item 5's figures (see docs/benchmarks.md): a profile on demand of a running
2-rank job.

A 2-rank DDP job on the CPU (gloo, ``tests/perf/profile_job.py``'s loop, about 40 ms a
step here) runs under ``air run``; ``--rounds`` times, ``air profile ID --steps N`` is
run as a user types it (a new process) and timed from its start to its exit, by which
every rank's trace is kept on the run and the summary printed. Its parts, from the
profile's files: the request to the last rank's answer (the ranks' next look, the
warm-up step, N steps, the export), and that answer to the end (merging, the summary,
the artifacts). Then the steps: the median step time of rank 0 before the first
profile, during the profiled steps, and after the last one (the 50 steps that follow
it), against the same job's steps with no profile. Target: <= 60 s for N = 5; the steps
after the profile at their speed before it (within the run's noise).

Run: ``.venv/bin/python bench/bench_profile.py [--rounds 3] [--steps 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.job_dir import AttemptDir  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.perf import profiles  # noqa: E402
from tests.perf.profile_job import TRAIN, step_times, workload  # noqa: E402
from tests.waits import until, wait_settled  # noqa: E402


def air(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(TRAIN)
        (work / "w.yaml").write_text(workload(sys.executable))
        os.environ.update(
            AIR_HOME=str(work / "air"),
            MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db",
            JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        )
        os.chdir(work)
        job_id = air("run", "-f", "w.yaml").stdout.split()[1]
        store = JobStore(work / "air")
        perf = AttemptDir(store.attempt_dir(job_id, 1)).perf

        def marked() -> int:
            times = step_times(perf) if (perf / "rank-0.jsonl").exists() else {}
            return max(times, default=0)

        until(lambda: marked() >= 100, "100 steps before the first profile", 300)
        walls, answered, finished, spans = [], [], [], []
        for _ in range(args.rounds):
            start = time.time()
            shown = air("profile", job_id, "--steps", str(args.steps))
            walls.append(time.time() - start)
            asked = profiles.of_attempt(perf)[-1]
            done = asked.finished() or {}
            last = max(a["t"] for a in asked.answers().values())
            answered.append(last - asked.requested)
            finished.append(done["time"] - last)
            spans.append(asked.answers()[0]["steps"])
            assert "Top operators by self time" in shown.stdout
            until(lambda: marked() >= spans[-1][1] + 60, "60 steps after the profile", 300)
        (work / "stop").touch()
        wait_settled(store, job_id, 300)

        times = step_times(perf)
        first = spans[0][0]
        never = [dt for s, dt in times.items() if 10 < s < first - 1]
        during = [dt for a, b in spans for s, dt in times.items() if a <= s <= b]
        after = [dt for a, b in spans for s, dt in times.items() if b + 1 < s <= b + 51]
        print(
            json.dumps(
                {
                    "rounds": args.rounds,
                    "steps": args.steps,
                    "air_profile_s": [round(w, 2) for w in walls],
                    "request_to_last_rank_s": [round(a, 2) for a in answered],
                    "finish_s": [round(f, 2) for f in finished],
                    "step_ms_before": round(statistics.median(never) * 1000, 1),
                    "step_ms_profiled": round(statistics.median(during) * 1000, 1),
                    "step_ms_after": round(statistics.median(after) * 1000, 1),
                    "profiled_steps": spans,
                    "last_step": max(times),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
