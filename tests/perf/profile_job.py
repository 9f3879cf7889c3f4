"""A running job to profile (issue 38, item 5), shared by the tests of each backend and
the benchmark: a 2-rank DDP loop on the CPU (gloo) that marks its steps with
``jupyter_air.step`` and runs until the file ``stop`` appears in its working directory."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_air.perf import profiles, traces
from jupyter_air.perf.profiles import Profile
from tests.waits import until

Air = Callable[..., subprocess.CompletedProcess[str]]

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
    # The ranks stop together: a file seen by one rank only would leave the other in a
    # backward whose peer is gone.
    if step % 10 == 0:
        stop = torch.tensor([float(os.path.exists("stop"))])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
del model, opt  # the group goes now, not in the interpreter's teardown
dist.destroy_process_group()
"""


def workload(python: str, backend: str = "local", nnodes: int = 1, extra: str = "") -> str:
    """``air run -f``'s file of the job: 2 ranks of ``train.py`` on ``backend`` (one a
    node on 2 nodes)."""
    return (
        "experiment_name: profile-test\n"
        f"command: {python} train.py\n"
        f"compute: {{nnodes: {nnodes}, nproc_per_node: {2 // nnodes}}}\n"
        f"backend: {backend}\n{extra}"
    )


def profiled(air: Air, job_id: str, perf: Path, tracking_uri: str) -> Profile:
    """``air profile JOB --steps 5`` of the running job, checked: every rank profiled the
    same 5 steps, the summary printed, the merged trace and every rank's trace kept with
    the attempt and on its run."""
    until(lambda: (perf / "rank-1.jsonl").exists(), "the ranks' first steps", 300)
    shown = air("profile", job_id, "--steps", "5")
    assert shown.returncode == 0, shown.stderr
    assert f"asked the 2 ranks of job {job_id} to profile 5 steps" in shown.stderr
    out = shown.stdout
    assert "Each rank's profiled steps (compute / communication / idle):" in out
    assert "Top operators by self time (all ranks):" in out
    assert "aten::" in out
    (profile,) = profiles.of_attempt(perf)
    answers = profile.answers()
    assert answers[0]["steps"] == answers[1]["steps"]
    first, last = answers[0]["steps"]
    assert last - first == 4
    merged = profile.folder / profiles.MERGED
    assert f"Merged trace: {merged} (open it in Perfetto or chrome://tracing)" in out
    check_merged(json.loads(gzip.decompress(merged.read_bytes())))
    done = profile.finished()
    assert done is not None
    run_id = done["artifacts"]["run_id"]
    assert run_id
    assert f"On the run: profile/{profile.id}/ of run {run_id}" in out
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    kept = {Path(a.path).name for a in client.list_artifacts(run_id, f"profile/{profile.id}")}
    assert kept == {"rank-0.json", "rank-1.json", "merged.json.gz", "summary.txt", "summary.json"}
    return profile


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
