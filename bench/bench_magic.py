"""``%%air_distributed`` vs torchrun vs bare Popen, side by side (see docs/benchmarks.md).

The same tiny 2-rank gloo DDP script, run alternately, ``--runs`` times each:
1. as a ``%%air_distributed -n 2`` cell through a real kernel (mlflow already imported
   there, as after a notebook's first call);
2. by ``torchrun --nproc-per-node 2``;
3. by two bare ``subprocess.Popen`` with the environment contract.
Then a trivial 2-rank cell (print the rank) against two bare Popen of the same.

After each call the script waits for the job's supervisor to finish its MLflow work
(it does so after the cell has returned); ``--back-to-back`` does not wait, so each
launch competes with the previous job's MLflow import on this 2-core machine.

Run: ``.venv/bin/python bench/bench_magic.py [--runs 5] [--back-to-back]``.
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

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.env import free_port  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402

DDP = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 16)
for _ in range(20):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
dist.destroy_process_group()
# torch can abort at interpreter exit after a gloo run ("terminate called without an
# active exception"); every launcher's ranks leave the same way to stay comparable.
import os, sys
sys.stdout.flush()
os._exit(0)
"""
TRIVIAL = "import os\nprint('rank', os.environ['RANK'])\n"


def bare(script: Path) -> float:
    """Two ranks by hand: the floor any launcher is measured against."""
    port = free_port()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-u", str(script)],
            env={
                **os.environ,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1",
            },
            stdout=subprocess.DEVNULL,
        )
        for rank in range(2)
    ]
    codes = [p.wait() for p in procs]
    assert codes == [0, 0], codes
    return time.perf_counter() - start


def torchrun(script: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def magic(kernel: Kernel, body: str, settle: bool = False) -> float:
    execution = kernel.run("%%air_distributed -n 2\n" + body)
    assert execution.error is None, execution.traceback
    if settle:  # the supervisor finishes MLflow after the cell returned: let it end
        kernel_process = psutil.Process(kernel.manager.provisioner.pid)  # type: ignore[attr-defined]
        psutil.wait_procs(kernel_process.children(recursive=True), timeout=30)
    return execution.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--back-to-back",
        action="store_true",
        help="do not wait for a job's supervisor to finish MLflow before the next launch",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-magic-"))
    (work / "ddp.py").write_text(DDP)
    (work / "trivial.py").write_text(TRIVIAL)
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "CUDA_VISIBLE_DEVICES": "",
    }
    kernel = Kernel(env, cwd=work)
    try:
        kernel.run("%load_ext jupyter_air\nimport mlflow")
        settle = not args.back_to_back
        magic(kernel, "1", settle)  # first call: the MLflow store and experiment are created
        times: dict[str, list[float]] = {k: [] for k in ("magic", "torchrun", "bare")}
        trivial: dict[str, list[float]] = {"magic": [], "bare": []}
        for _ in range(args.runs):
            times["magic"].append(magic(kernel, DDP, settle))
            times["torchrun"].append(torchrun(work / "ddp.py"))
            times["bare"].append(bare(work / "ddp.py"))
            trivial["magic"].append(magic(kernel, TRIVIAL, settle))
            trivial["bare"].append(bare(work / "trivial.py"))
    finally:
        kernel.shutdown()
    med = {k: statistics.median(v) for k, v in times.items()}
    tmed = {k: statistics.median(v) for k, v in trivial.items()}
    print(
        json.dumps(
            {
                "ddp_seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
                "ddp_median": {k: round(v, 2) for k, v in med.items()},
                "ratio_magic_vs_torchrun": round(med["magic"] / med["torchrun"], 2),
                "ratio_magic_vs_bare": round(med["magic"] / med["bare"], 2),
                "trivial_seconds": {k: [round(x, 2) for x in v] for k, v in trivial.items()},
                "trivial_overhead_over_bare_s": round(tmed["magic"] - tmed["bare"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
