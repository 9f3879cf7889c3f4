"""A running job to profile (issue 38, item 5), shared by the tests of each backend and
the benchmark: a 2-rank DDP loop on the CPU (gloo) that marks its steps with
``jupyter_air.step`` and runs until the file ``stop`` appears in its working directory."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from jupyter_air.perf import traces

TRAIN = """
import os, time
import torch, torch.distributed as dist
import jupyter_air

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = torch.randn(64, 256)
for step in range(int(os.environ.get("MAX_STEPS", "100000"))):
    model(batch).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(float(os.environ.get("PAUSE", "0.02")))
    jupyter_air.step(samples=64)
    if step % 10 == 0 and os.path.exists("stop"):
        break
dist.destroy_process_group()
"""


def workload(python: str, backend: str = "local", extra: str = "") -> str:
    """``air run -f``'s file of the job: 2 ranks of ``train.py`` on ``backend``."""
    return (
        "experiment_name: profile-test\n"
        f"command: {python} train.py\n"
        "compute:\n  nproc_per_node: 2\n"
        f"backend: {backend}\n{extra}"
    )


def step_times(perf_dir: Path, rank: int = 0) -> dict[int, float]:
    """Each marked step's seconds, by step number, of one rank."""
    found = {}
    for line in (perf_dir / f"rank-{rank}.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if "s" in doc and "dt" in doc:
            found[doc["s"]] = doc["dt"]
    return found


def speeds(perf_dir: Path, first: int, last: int) -> tuple[float, float]:
    """The median step time before the profile and after it (its steps, the warm-up
    step and the one that exports the trace left out)."""
    times = step_times(perf_dir)
    before = [dt for s, dt in times.items() if 5 < s < first - 1]
    after = [dt for s, dt in times.items() if s > last + 1]
    return statistics.median(before), statistics.median(after)


def check_merged(merged: dict[str, Any], ranks: int = 2) -> None:
    """A process per rank, every rank's profiled steps in it."""
    names = {
        e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"
    }
    assert sorted(names) == list(range(ranks))
    for rank in range(ranks):
        steps = {
            e["name"]
            for e in merged["traceEvents"]
            if e["pid"] == rank and traces.STEP.match(str(e.get("name")))
        }
        assert len(steps) == 5, (rank, steps)
