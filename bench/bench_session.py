"""Warm sessions against fresh cells, side by side in one kernel (see docs/benchmarks.md,
"Warm sessions").

Every time is from the kernel's execute request to its idle status (what a user waits
for); the two sides alternate, ``--runs`` times each; medians.

1. ``trivial``: ``x = 1`` on a 2-rank session (each cell still a child MLflow run), the
   same as a fresh ``%%air_distributed -n 2`` cell, and a bare kernel cell ``pass`` (the
   kernel's own round trip, the floor). The warm cell's overhead is warm - bare. With
   ``--px``, also ipyparallel's ``%%px x = 1`` on 2 engines started in the same kernel,
   the warm-rank peer that keeps no MLflow run (``pip install ipyparallel`` first: it is
   not a dependency of jupyter_air).
2. ``steps``: "change the learning rate and train 20 more steps" of a small DDP model on
   gloo. Warm: the model, its optimizer and the process group live on the ranks since an
   earlier cell; the cell sets the new learning rate (a kernel name) and trains. Fresh:
   the same 20 steps in a ``%%air_distributed -n 2`` cell that must import torch, join
   the group and build the model first.
3. ``memory``: the resident memory of an idle session, each rank (RSS and USS) and the
   job's supervisor; once right after ``%air_session start``, once after part 2 (torch,
   the process group and the model loaded).

Run: ``.venv/bin/python bench/bench_session.py [--runs 7] [--px]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402
from tests.kernel.conftest import Kernel, job_processes  # noqa: E402

TRIVIAL = "x = 1\n"
MODEL = """\
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
if not dist.is_initialized():
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs, targets = torch.randn(512, 64), torch.randn(512, 1)
"""
STEPS = """\
for group in optimizer.param_groups:
    group["lr"] = lr
for _ in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
float(loss)
"""
SESSION_JOB = re.compile(r"Session job (\d{8}-\d{6}-[0-9a-f]{6})")


def timed(kernel: Kernel, code: str) -> float:
    start = time.perf_counter()
    done = kernel.run(code)
    seconds = time.perf_counter() - start
    assert done.error is None, done.traceback
    return seconds


def trivial(kernel: Kernel, runs: int, px: bool) -> dict[str, Any]:
    times: dict[str, list[float]] = {"warm": [], "fresh": [], "kernel": []}
    if px:
        times["px"] = []
    for _ in range(runs):
        times["warm"].append(timed(kernel, f"%%air_distributed --session\n{TRIVIAL}"))
        times["fresh"].append(timed(kernel, f"%%air_distributed -n 2 --oversubscribe\n{TRIVIAL}"))
        time.sleep(1.0)  # the fresh job's supervisor ends its run after the cell
        times["kernel"].append(timed(kernel, "pass"))
        if px:
            times["px"].append(timed(kernel, f"%%px\n{TRIVIAL}"))
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "median_s": {k: round(v, 4) for k, v in medians.items()},
        "warm_overhead_ms": round((medians["warm"] - medians["kernel"]) * 1000, 1),
        "warm_vs_fresh": round(medians["warm"] / medians["fresh"], 3),
    }
    if px:
        result["px_overhead_ms"] = round((medians["px"] - medians["kernel"]) * 1000, 1)
        result["warm_vs_px"] = round(medians["warm"] / medians["px"], 2)
    return result


PX_START = """\
import ipyparallel as ipp
_px_cluster = ipp.Cluster(n=2)
_px_client = _px_cluster.start_and_connect_sync(activate=True)
_px_client.wait_for_engines(2, timeout=120)
"""


def steps(kernel: Kernel, runs: int) -> dict[str, Any]:
    timed(kernel, f"%%air_distributed --session\n{MODEL}")  # the model, once
    times: dict[str, list[float]] = {"warm": [], "fresh": []}
    for run in range(runs):
        timed(kernel, f"lr = {0.01 / (run + 2)}")
        times["warm"].append(timed(kernel, f"%%air_distributed --session\n{STEPS}"))
        fresh = f"%%air_distributed -n 2 --oversubscribe\n{MODEL}{STEPS}"
        times["fresh"].append(timed(kernel, fresh))
        time.sleep(1.0)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "median_s": {k: round(v, 3) for k, v in medians.items()},
        "warm_vs_fresh": round(medians["warm"] / medians["fresh"], 3),
    }


def memory(store: JobStore, job_id: str) -> dict[str, Any]:
    """RSS and USS (memory no other process shares) of each rank, and the supervisor's RSS."""
    time.sleep(2.0)  # idle: what the last cell freed is freed
    ranks = {}
    for proc in job_processes(job_id):
        info = proc.memory_full_info()
        ranks[proc.environ().get("RANK", str(proc.pid))] = {
            "rss_mb": round(info.rss / 2**20, 1),
            "uss_mb": round(info.uss / 2**20, 1),
        }
    supervisor = store.get(job_id).supervisor_pid
    assert supervisor is not None
    return {
        "ranks": dict(sorted(ranks.items())),
        "supervisor_rss_mb": round(psutil.Process(supervisor).memory_info().rss / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--px", action="store_true", help="also ipyparallel's %%%%px (installed)")
    args = parser.parse_args()
    if args.px:
        try:
            import ipyparallel  # noqa: F401
        except ImportError:
            parser.error("--px needs ipyparallel: .venv/bin/pip install ipyparallel")
    work = Path(tempfile.mkdtemp(prefix="air-bench-session-"))
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "CUDA_VISIBLE_DEVICES": "",
    }
    kernel = Kernel(env, cwd=work)
    report: dict[str, Any] = {"runs": args.runs}
    try:
        assert kernel.run("%load_ext jupyter_air\nimport mlflow").error is None
        started = kernel.run("%air_session start -n 2 --oversubscribe --idle-timeout 0")
        assert started.error is None, started.traceback
        found = SESSION_JOB.search(started.text)
        assert found, started.text
        store = JobStore(work / "air")
        report["memory_after_start"] = memory(store, found.group(1))
        timed(kernel, f"%%air_distributed --session\n{TRIVIAL}")  # first cell: warm-up
        if args.px:
            assert kernel.run(PX_START).error is None
            timed(kernel, f"%%px\n{TRIVIAL}")  # first cell: warm-up
        report["trivial"] = trivial(kernel, args.runs, args.px)
        report["steps"] = steps(kernel, args.runs)
        report["memory_after_steps"] = memory(store, found.group(1))
        kernel.run("%air_session stop")
        if args.px:
            kernel.run("_px_cluster.stop_cluster_sync()")
    finally:
        kernel.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
