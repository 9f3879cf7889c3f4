"""MFU of a known model against the hand computation (issue 38, item 2).

1. ``job``: a real 2-rank job (``air run``, local backend, gloo on the CPU) under the fake
   NVML driver playing two "NVIDIA H100 80GB HBM3". Each rank trains the small GPT of
   ``tests/perf/gpt.py`` (width 512, 4 layers, 8 heads, 32 tokens of context: 12.9 M
   parameters) with DDP, a batch of 8 sequences a rank, and marks each step with
   ``jupyter_air.step(samples=8, tokens=256)``: nothing else of ours in its code. The
   figure the product gives, ``perf.mfu.of_job`` over the ranks' marks, is set against
   the hand computation ``6 x N x D / (T x peak)`` with N the parameters, D a rank's
   tokens a step, T the step time (the mean of the marked steps after the counted one,
   the same T on both sides) and the H100's dense fp32 peak, 67 TFLOP/s (the ranks run
   fp32 on the CPU). Also: the counted step's time against the others' (the counter's
   one-off cost) and what the listener costs at every later step.
2. ``bf16``: the same model in one process, a step under CPU autocast to bfloat16:
   the dtype found is bf16 and the peak divided by is the H100's bf16 one, 989.5.

Run: ``.venv/bin/python bench/bench_mfu.py [--steps 12]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.gpu.peaks import TERA  # noqa: E402
from jupyter_air.job_dir import JobDir  # noqa: E402
from jupyter_air.perf.marks import rank_files  # noqa: E402
from jupyter_air.perf.mfu import of_job  # noqa: E402
from tests.air_cli import air  # noqa: E402
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for  # noqa: E402
from tests.waits import wait_settled  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
BATCH = 8

TRAIN = """\
import sys
sys.path.insert(0, {root!r})
import torch, torch.distributed as dist
import jupyter_air
from tests.perf.gpt import CONTEXT, Gpt, batch, parameters, train_step

dist.init_process_group("gloo")
torch.manual_seed(0)
model = Gpt()
print("parameters", parameters(model), flush=True)
model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range({steps}):
    train_step(model, optimizer, batch({batch}))
    jupyter_air.step(samples={batch}, tokens={batch} * CONTEXT)
dist.destroy_process_group()
"""


def job(workdir: Path, steps: int) -> dict[str, Any]:
    from tests.perf.gpt import CONTEXT, Gpt, parameters

    scenario = Scenario(gpus=[FakeGpu(name=H100), FakeGpu(name=H100)]).write(workdir / "nvml")
    env = {
        **env_for(build_library(), scenario),
        "AIR_HOME": str(workdir / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db",
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    os.environ.update(env)  # this script's own: the CLI below inherits it
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    (workdir / "train.py").write_text(TRAIN.format(root=str(ROOT), steps=steps, batch=BATCH))
    workload = {
        "experiment_name": "bench-mfu",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    submitted = air("run", "-f", str(workdir / "w.yaml"))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    settled = wait_settled(Path(env["AIR_HOME"]), job_id, timeout=900)
    assert settled.status == "SUCCEEDED", air("logs", job_id).stdout
    perf = JobDir.under(Path(env["AIR_HOME"]), job_id).attempt(1).perf
    lines = {
        rank: [json.loads(line) for line in path.read_text().splitlines()]
        for rank, path in rank_files(perf).items()
    }
    flops = {rank: next(line for line in found if "flops" in line) for rank, found in lines.items()}
    step_times = [line["dt"] for line in lines[0] if "dt" in line]
    counted_at = 2  # the step between the first two marks' ends
    after = [dt for s, dt in enumerate(step_times, start=1) if s > counted_at]
    t = statistics.mean(after)
    n = parameters(Gpt())
    d = BATCH * CONTEXT
    mfu = of_job(perf, t)
    hand = 6 * n * d / (t * 67 * TERA)
    return {
        "parameters": n,
        "tokens_per_rank_step": d,
        "flops": {rank: line["flops"] for rank, line in flops.items()},
        "lines": flops,
        "six_nd": 6 * n * d,
        "step_time_s": t,
        "counted_step_s": step_times[counted_at - 1],
        "other_steps_median_s": statistics.median(after),
        "mfu": mfu.value,
        "why": mfu.why,
        "hand": hand,
    }


def bf16() -> dict[str, Any]:
    import torch

    from jupyter_air.gpu.peaks import peak
    from jupyter_air.perf.flops import Count
    from tests.perf.gpt import CONTEXT, Gpt, batch, parameters, train_step

    model = Gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    count = Count()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        train_step(model, optimizer, batch(2))
    result = count.stop()
    return {
        "dtype": result.dtype,
        "ratio_to_6nd": result.flops / (6 * parameters(model) * 2 * CONTEXT),
        "peak": str(peak(H100, result.dtype)),
    }


def listener_cost() -> float:
    """Seconds one step mark's FLOPs listener takes once it has counted."""
    from jupyter_air.perf.flops import Stage, StepFlops
    from jupyter_air.perf.marks import Marks

    folder = tempfile.mkdtemp(prefix="bench-mfu-marks-")
    try:
        listener = StepFlops(Marks(folder, 0))
        listener.stage = Stage.DONE
        n = 200_000
        return min(timeit.repeat(lambda: listener.at_mark(7), number=n, repeat=5)) / n
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-mfu-"))
    try:
        got = job(workdir, args.steps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    n, d = got["parameters"], got["tokens_per_rank_step"]
    print(f"parameters N = {n:,}; tokens a rank a step D = {d}")
    for rank, line in got["lines"].items():
        print(f"rank {rank}'s flops line: {json.dumps(line)}")
    for rank, flops in got["flops"].items():
        print(
            f"rank {rank}: counted {flops:,.0f} FLOP a step; 6ND {got['six_nd']:,}; "
            f"counted / 6ND = {flops / got['six_nd']:.4f}"
        )
    print(
        f"step time T = {got['step_time_s'] * 1e3:.1f} ms (mean of the steps after the counted "
        f"one); MFU of_job = {got['mfu']:.6%}; by hand 6ND / (T x 67 TFLOP/s) = "
        f"{got['hand']:.6%}; ratio {got['mfu'] / got['hand']:.4f}"
    )
    print(f"why: {got['why']}")
    print(
        f"counted step {got['counted_step_s'] * 1e3:.1f} ms; the steps after it, median "
        f"{got['other_steps_median_s'] * 1e3:.1f} ms "
        f"(x{got['counted_step_s'] / got['other_steps_median_s']:.2f} for the one counted step)"
    )
    print(f"the listener at each later step mark: {listener_cost() * 1e9:.0f} ns")
    half = bf16()
    print(
        f"bf16 autocast step in one process: dtype {half['dtype']}, counted / 6ND = "
        f"{half['ratio_to_6nd']:.4f}, divided by {half['peak']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
