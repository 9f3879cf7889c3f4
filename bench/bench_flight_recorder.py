"""What the flight recorder costs a training, and how soon a hang is named (issue 39,
item 1; see docs/benchmarks.md).

1. ``overhead``: a 2-rank DDP job on the CPU (gloo), a plain training loop, started with
   exactly the environment our ranks get (``jobs.env.rank_env`` and
   ``node.flight_recorder.rank_env``): the recorder on (``TORCH_FR_BUFFER_SIZE``, the
   rank's ``sitecustomize`` starting its answering thread) or off
   (``AIR_FLIGHT_RECORDER=0``: neither). ``AIR_PERF=0`` in both arms, so that only the
   recorder differs. Each rank times its own steps in wall time and in its own CPU time;
   in each round both jobs run at once (4 ranks), so that the machine's load weighs on
   both alike (the order they start in rotates); the figure is each round's on/off
   ratio of the median step time, and the median of the rounds.
2. ``micro``: one rank alone (a gloo group of 1) times ``all_reduce`` of one float in its
   own CPU time, the recorder on and off, each arm's best run: what recording one
   collective costs, without the machine's noise; times the collectives a DDP step of
   ``overhead`` calls (counted by the recorder), over its CPU time a step, that is the
   share of a step the recorder takes.
3. ``hang``: a real job through ``air run`` whose rank 1 never enters the all_reduce
   rank 0 waits in, on two fake idle GPUs, ``AIR_HINT_SILENT_AFTER`` seconds of silence
   for the likely-hang hint: the seconds from the hint (in the attempt's hints file) to
   the named hang there, and the seconds ``air stacks`` takes to answer with it.
4. ``stall``: the same job with every threshold at its default and the fake GPUs kept
   busy (the likely-hang hint cannot fire): the seconds from the hang's beginning to the
   named hang in the hints, which the supervisor's check of ranks silent for
   ``AIR_HINT_STALLED_AFTER`` (90 s) gives: the issue's whole report within 2 minutes.

Run: ``.venv/bin/python bench/bench_flight_recorder.py [--rounds 6] [--steps 400]
[--only overhead|micro|hang|stall]``.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.env import RankPlace, free_port, inherited_env, rank_env  # noqa: E402
from jupyter_air.jobs.node import flight_recorder  # noqa: E402

LOOP = """\
import json, os, sys, threading, time
import torch, torch.distributed as dist

STEPS = int(sys.argv[1])
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)),
    bucket_cap_mb=0.25)  # several all_reduces a step: the recorder records each
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ends, cpu = [], []
for step in range(STEPS):
    loss = model(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    ends.append(time.perf_counter())
    cpu.append(time.process_time())
threads = sorted(t.name for t in threading.enumerate())
steps = [b - a for a, b in zip(ends, ends[1:])]
cpu = [b - a for a, b in zip(cpu, cpu[1:])]
status = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, True))["pg_status"]
calls = int(status.get("0", {}).get("last_enqueued_collective", 0)) if status else 0
print("RESULT " + json.dumps({"steps": steps, "cpu": cpu, "threads": threads,
                              "collectives": calls}), flush=True)
dist.destroy_process_group()
os._exit(0)  # as our ranks leave: no C++ teardown of rank 0's store (rank_main.exit_now)
"""

ONE = """\
import json, os, time, timeit
import torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
x = torch.ones(1)
for _ in range(2000):
    dist.all_reduce(x)
runs = timeit.repeat(lambda: dist.all_reduce(x), number=5000, repeat=7, timer=time.process_time)
print("RESULT " + json.dumps({"us": min(runs) / 5000 * 1e6}), flush=True)
os._exit(0)  # no teardown of the group's store: not what is measured
"""


def environment(folder: Path, rank: int, ranks: int, port: int, on: bool) -> dict[str, str]:
    """A rank's environment as a node of ours makes it, the recorder on or off."""
    base = inherited_env()
    base.pop("PYTHONPATH", None)
    base.update({"CUDA_VISIBLE_DEVICES": "", "AIR_PERF": "0"})
    base[flight_recorder.ENV] = "" if on else "0"
    env = rank_env(
        base,
        RankPlace(rank, rank, 0, ranks, 1),
        master_addr="127.0.0.1",
        master_port=port,
        job_id=f"bench-{folder.name}",
        attempt=1,
        max_restarts=0,
        gpus=None,
    )
    env.update(flight_recorder.rank_env(env, folder / "flight"))
    return env


def run(script: str, args: list[str], folder: Path, on: bool, ranks: int) -> list[dict[str, Any]]:
    return results(launch(script, args, folder, on, ranks))


def launch(
    script: str, args: list[str], folder: Path, on: bool, ranks: int
) -> list[subprocess.Popen[str]]:
    (folder / "train.py").write_text(script)
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, "train.py", *args],
            cwd=folder,
            env=environment(folder, rank, ranks, port, on),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(ranks)
    ]


def results(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    found = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            raise SystemExit(f"a rank failed ({proc.returncode}):\n{out[-3000:]}")
        found.append(json.loads(line[len("RESULT ") :]))
    return found


def overhead(rounds: int, steps: int) -> None:
    figures: dict[str, dict[bool, list[float]]] = {
        k: {True: [], False: []} for k in ("steps", "cpu")
    }
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="bench-fr-") as tmp:
            both = {}  # the two arms at once: the machine's load is the same for both
            for on in (True, False) if r % 2 == 0 else (False, True):
                (Path(tmp) / str(on)).mkdir()
                both[on] = launch(LOOP, [str(steps)], Path(tmp) / str(on), on, 2)
            runs = {on: results(procs) for on, procs in both.items()}
        for on, got in runs.items():
            listening = all("air-flight-recorder" in g["threads"] for g in got)
            if listening != on:
                raise SystemExit(f"recorder {'on' if on else 'off'}, threads: {got[0]['threads']}")
            if on:
                print(f"collectives a step: {got[0]['collectives'] / (steps):.1f}", flush=True)
            skip = max(len(got[0]["steps"]) // 10, 1)  # warm-up left out
            for kind, by_arm in figures.items():
                by_arm[on].append(statistics.median(s for g in got for s in g[kind][skip:]))
        said = [
            f"{kind} on {a[True][-1] * 1000:.3f} ms, off {a[False][-1] * 1000:.3f} ms "
            f"({a[True][-1] / a[False][-1]:.4f}x)"
            for kind, a in figures.items()
        ]
        print(f"round {r + 1}: " + "; ".join(said), flush=True)
    for kind, by_arm in figures.items():
        ratios = [a / b for a, b in zip(by_arm[True], by_arm[False], strict=True)]
        print(
            f"== 2-rank DDP loop, {'wall' if kind == 'steps' else 'CPU'} time a step: medians "
            f"on {statistics.median(by_arm[True]) * 1000:.3f} ms, "
            f"off {statistics.median(by_arm[False]) * 1000:.3f} ms; ratio median "
            f"{statistics.median(ratios):.4f} (rounds {min(ratios):.4f}-{max(ratios):.4f})",
            flush=True,
        )


def micro(pairs: int = 4) -> None:
    """Each arm's best of ``pairs`` runs (the machine's load only ever adds)."""
    best: dict[bool, float] = {}
    for _ in range(pairs):
        for on in (False, True):
            with tempfile.TemporaryDirectory(prefix="bench-fr-") as tmp:
                (us,) = (g["us"] for g in run(ONE, [], Path(tmp), on, 1))
            best[on] = min(best.get(on, us), us)
    for on in (False, True):
        print(
            f"== all_reduce of one float, one rank, recorder {'on' if on else 'off'}: "
            f"{best[on]:.2f} us of CPU (best of {pairs} runs)"
        )
    step: dict[bool, float] = {}  # the loop of ``overhead`` on one rank: its own CPU a step
    for _ in range(pairs):
        for on in (False, True):
            with tempfile.TemporaryDirectory(prefix="bench-fr-") as tmp:
                (got,) = run(LOOP, ["600"], Path(tmp), on, 1)
            cpu = statistics.median(got["cpu"][60:])
            step[on] = min(step.get(on, cpu), cpu)
    print(
        f"== the DDP loop's step on one rank, CPU: on {step[True] * 1e6:.0f} us, off "
        f"{step[False] * 1e6:.0f} us ({step[True] / step[False]:.4f}x, best of {pairs} runs)"
    )


HUNG = """\
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    while True:
        time.sleep(0.2)
dist.all_reduce(torch.ones(1024))
"""


def hang(silent_after: float | None) -> None:
    """The likely-hang hint's path (``silent_after`` s), or with None every default and
    busy GPUs: the silent ranks' check's."""
    from jupyter_air.jobs.node.hints import read_hints
    from jupyter_air.jobs.store import JobStore
    from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for

    air = [sys.executable, "-m", "jupyter_air.cli"]
    # the job's run tail may still write there as it goes
    with tempfile.TemporaryDirectory(prefix="bench-fr-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(HUNG)
        Scenario(gpus=[FakeGpu(util=100), FakeGpu(util=100)]).write(work / "nvml.txt")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIR_HINT_")},
            **env_for(build_library(), work / "nvml.txt"),
            "AIR_HOME": str(work / "air"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        }
        if silent_after is not None:
            env["AIR_HINT_SILENT_AFTER"] = str(silent_after)
            env["AIR_HINT_IDLE_UTILIZATION"] = "50"
            env["AIR_SYSTEM_METRICS_INTERVAL"] = "1"
        workload = {"command": f"{sys.executable} train.py", "compute": {"nproc_per_node": 2}}
        (work / "w.yaml").write_text(json.dumps({"experiment_name": "bench", **workload}))

        def cli(*args: str) -> str:
            done = subprocess.run([*air, *args], cwd=work, env=env, capture_output=True, text=True)
            return done.stdout

        job_id = cli("run", "-f", "w.yaml").split()[1]
        attempt = JobStore(work / "air").attempt_dir(job_id, 1)
        try:
            while cli("logs", job_id).count(" ready") < 2:
                time.sleep(0.5)
            began = time.time()  # both ranks in the process group: the hang begins
            if silent_after is not None:
                Scenario(gpus=[FakeGpu(util=0), FakeGpu(util=0)]).write(work / "nvml.txt")
            hinted = named = None
            while named is None and time.time() - began < 600:
                kinds = {h["kind"] for h in read_hints(attempt)["hints"]}
                now = time.time()
                hinted = hinted or (now if "silent_rank" in kinds else None)
                named = now if "hang" in kinds else None
                time.sleep(0.1)
            asked = time.time()
            shown = cli("stacks", job_id)
            answered = time.time() - asked
        finally:
            cli("cancel", job_id)
    line = next((x for x in shown.splitlines() if x.startswith("Collectives: ")), "none")
    if named is None:
        raise SystemExit("no named hang in 10 min")
    if silent_after is None:
        print(f"== every default: named in the hints {named - began:.1f} s after the hang began")
    elif hinted is None:
        raise SystemExit("named, but the likely-hang hint never fired")
    else:
        print(
            f"== hint {hinted - began:.1f} s after the hang began (silent after {silent_after:g} s)"
        )
        print(f"== named in the hints {named - hinted:.1f} s after the hint, {named - began:.1f} s")
    print(f"== air stacks answered in {answered:.1f} s: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--silent-after", type=float, default=5.0)
    parser.add_argument("--only", choices=("overhead", "micro", "hang", "stall"))
    args = parser.parse_args()
    if args.only in (None, "micro"):
        micro()
    if args.only in (None, "overhead"):
        overhead(args.rounds, args.steps)
    if args.only in (None, "hang"):
        hang(args.silent_after)
    if args.only in (None, "stall"):
        hang(None)


if __name__ == "__main__":
    main()
