"""A trivial cell on a warm session vs the same as a fresh ``%%air_distributed`` cell,
side by side in one kernel (see docs/benchmarks.md, "Warm sessions").

Alternately, ``--runs`` times each, timed from the kernel's execute request to its
idle status (what a user waits for):
1. ``%%air_distributed --session`` on a 2-rank session (each cell still a child MLflow run);
2. ``%%air_distributed -n 2`` (fresh ranks, a job and a run per cell);
3. a bare kernel cell ``pass`` (the kernel's own round trip, the floor).
The warm cell's overhead is (1) - (3).

Run: ``.venv/bin/python bench/bench_session.py [--runs 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kernel.conftest import Kernel  # noqa: E402

TRIVIAL = "x = 1\n"


def timed(kernel: Kernel, code: str) -> float:
    start = time.perf_counter()
    done = kernel.run(code)
    seconds = time.perf_counter() - start
    assert done.error is None, done.traceback
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-session-"))
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "CUDA_VISIBLE_DEVICES": "",
    }
    kernel = Kernel(env, cwd=work)
    try:
        assert kernel.run("%load_ext jupyter_air\nimport mlflow").error is None
        started = kernel.run("%air_session start -n 2 --oversubscribe --idle-timeout 0")
        assert started.error is None, started.traceback
        timed(kernel, f"%%air_distributed --session\n{TRIVIAL}")  # first cell: warm-up
        times: dict[str, list[float]] = {"warm": [], "fresh": [], "kernel": []}
        for _ in range(args.runs):
            times["warm"].append(timed(kernel, f"%%air_distributed --session\n{TRIVIAL}"))
            times["fresh"].append(
                timed(kernel, f"%%air_distributed -n 2 --oversubscribe\n{TRIVIAL}")
            )
            time.sleep(1.0)  # the fresh job's supervisor ends its run after the cell
            times["kernel"].append(timed(kernel, "pass"))
        kernel.run("%air_session stop")
    finally:
        kernel.shutdown()
    medians = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "runs": args.runs,
        "median_s": {k: round(v, 4) for k, v in medians.items()},
        "warm_overhead_ms": round((medians["warm"] - medians["kernel"]) * 1000, 1),
        "warm_vs_fresh": round(medians["warm"] / medians["fresh"], 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
