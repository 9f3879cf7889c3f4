"""Issue 26's figures (see docs/benchmarks.md): the stacks of a stuck 2-rank job, and
what resuming from a checkpoint costs a retry.

1. Stacks: a 2-rank ``air run`` job whose rank 1 never reaches the ``all_reduce`` rank 0
   waits in. Side by side, ``--rounds`` times each: ``air stacks ID`` (a new process,
   as a user types it: the request to the supervisor, py-spy on both ranks, the set
   saved and printed), and two baselines: ``air get ID`` (what any ``air`` command costs
   to start and read the job) and ``py-spy dump --pid`` of one rank run by hand.
   Target: ``air stacks`` <= 2 s.
2. Resume overhead: a 2-rank job saving a checkpoint of ``--megabytes`` of tensors with
   ``jupyter_air.checkpoint`` every step, rank 1 killed by SIGKILL after step 3,
   ``max_retries: 1``. From each attempt's start (its record) to its first step
   (``starts at step N`` in rank 0's log): the fresh first attempt against the retry
   that finds, trusts and loads the checkpoint.

Run: ``.venv/bin/python bench/bench_long_runs.py [--rounds 5] [--megabytes 64]``.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.logs.query import LogFilter, read_all  # noqa: E402
from tests.waits import until, wait_settled  # noqa: E402

HUNG = """\
import time
import torch, torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    while True:
        time.sleep(0.2)
dist.all_reduce(torch.ones(1))
"""

RESUMING = """\
import os, signal
import torch, torch.distributed as dist
from jupyter_air import checkpoint

dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), os.environ["AIR_ATTEMPT"]
state, done = checkpoint.load() or ({{"w": torch.zeros({floats})}}, 0)
print(f"attempt {{attempt}} starts at step {{done}}", flush=True)
for step in range(done, 6):
    state["w"] += 1
    dist.all_reduce(torch.zeros(1))
    checkpoint.save(state, step + 1)
    dist.barrier()
    if attempt == "1" and step + 1 == 3 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
dist.destroy_process_group()
"""


def air(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def submit(workdir: Path, script: str, env: dict[str, str], **fields: object) -> str:
    (workdir / "train.py").write_text(script)
    workload = {
        "experiment_name": "bench-long-runs",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
        **fields,
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    done = air("run", "-f", str(workdir / "w.yaml"), env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[1]


def rank_pids(job_id: str) -> dict[int, int]:
    import psutil

    found = {}
    for proc in psutil.process_iter(["pid"]):
        try:
            environ = proc.environ()
        except (psutil.Error, OSError):
            continue
        ours = environ.get("AIR_JOB_ID") == job_id and "RANK" in environ
        if ours and "train.py" in " ".join(proc.cmdline()):
            found[int(environ["RANK"])] = proc.pid
    return found


def stacks(workdir: Path, env: dict[str, str], rounds: int) -> dict[str, float]:
    job_id = submit(workdir, HUNG, env)
    store = JobStore(Path(env["AIR_HOME"]))
    try:
        until(lambda: len(rank_pids(job_id)) == 2, "both ranks", timeout=120)
        attempt = store.attempt_dir(job_id, 1)
        until(
            lambda: sum("ready" in line.text for line in read_all(attempt, LogFilter())) == 2,
            "both ranks in the process group",
        )
        pid = rank_pids(job_id)[1]
        ours, baseline, floor = [], [], []
        for _ in range(rounds):
            began = time.perf_counter()
            shown = air("stacks", job_id, env=env)
            ours.append(time.perf_counter() - began)
            assert "all_reduce" in shown.stdout, shown.stdout + shown.stderr
            began = time.perf_counter()
            air("get", job_id, env=env)
            floor.append(time.perf_counter() - began)
            began = time.perf_counter()
            subprocess.run(
                [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(pid)],
                capture_output=True,
                check=True,
            )
            baseline.append(time.perf_counter() - began)
    finally:
        air("cancel", job_id, env=env)
        wait_settled(store, job_id, timeout=120)
    return {
        "air_stacks_p50": statistics.median(ours),
        "air_get_p50": statistics.median(floor),
        "py_spy_p50": statistics.median(baseline),
    }


def first_step(store: JobStore, job_id: str, attempt: int) -> float:
    """Seconds from the attempt's start to rank 0's ``starts at step`` line."""
    started = store.attempts(job_id)[attempt - 1].started
    lines = read_all(store.attempt_dir(job_id, attempt), LogFilter(rank=0))
    said = next(line.t for line in lines if "starts at step" in line.text)
    return said - started


def resume(workdir: Path, env: dict[str, str], rounds: int, megabytes: int) -> dict[str, float]:
    store = JobStore(Path(env["AIR_HOME"]))
    script = RESUMING.format(floats=megabytes * 1024 * 1024 // 4)
    fresh, resumed = [], []
    for _ in range(rounds):
        job_id = submit(workdir, script, env, max_retries=1)
        job = wait_settled(store, job_id, timeout=300)
        assert job.status == "SUCCEEDED", job.message
        fresh.append(first_step(store, job_id, 1))
        resumed.append(first_step(store, job_id, 2))
        lines = read_all(store.attempt_dir(job_id, 2), LogFilter(rank=0))
        assert any("starts at step 3" in line.text for line in lines), "it resumed"
    return {"fresh_p50": statistics.median(fresh), "resumed_p50": statistics.median(resumed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-long-runs-"))
    env = {
        **os.environ,
        "AIR_HOME": str(workdir / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db",
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    try:
        taken = stacks(workdir, env, args.rounds)
        print(
            f"stacks of a 2-rank job: air stacks p50 {taken['air_stacks_p50']:.2f} s; "
            f"air get of the same job p50 {taken['air_get_p50']:.2f} s (the CLI's own start); "
            f"py-spy dump of one rank by hand p50 {taken['py_spy_p50']:.2f} s"
        )
        cost = resume(workdir, env, args.rounds, args.megabytes)
        print(
            f"start to first step, {args.megabytes} MiB checkpoint: fresh attempt p50 "
            f"{cost['fresh_p50']:.2f} s, resumed retry p50 {cost['resumed_p50']:.2f} s "
            f"(x{cost['resumed_p50'] / cost['fresh_p50']:.2f})"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
