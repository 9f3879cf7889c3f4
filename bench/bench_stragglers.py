"""The straggler hint's figures (issue 38, item 4; see docs/benchmarks.md).

1. ``hint``: a 4-rank ``air run`` job on the CPU (gloo, DDP, ``--oversubscribe``), a plain
   loop marking its steps with ``jupyter_air.step()`` (``tests/perf/slow_ranks.py``); 150
   ms added to rank 3's backward (a module's backward hook sleeping there), or, in another
   job, to rank 1's data loader (its dataset sleeping once a batch). The time from the
   attempt's start (the store's record) and from the job's first step mark to the
   straggler hint in the attempt's hints file, and the hint; ``--rounds`` jobs of each.
2. ``overhead``: what the split costs a step. A 2-rank DDP loop on gloo (a DataLoader, a
   two-layer MLP, SGD, ``jupyter_air.step()`` each step), started three ways, the arms
   alternating within each round: ``off`` (``AIR_PERF=0``: nothing of ours runs),
   ``marks`` (the step marks alone) and ``phases`` (the marks and ``perf.phases``, as a
   rank of ours gets them). Each rank times its own steps; the figure is each round's
   ratio of median step times, and the median over rounds. On a loaded machine these
   ratios are noise; so, beside them, ``micro``: one process (DDP over gloo, one rank),
   a small loop with its marks and ``phases`` installed (its notes on, as on a job of
   several ranks), 200 batches of 100 steps each way, alternating: the hooks counting,
   or passing every call through (the tracker following no thread); the best batch of
   each: the split's own cost in microseconds a step (the pass-through's few calls a
   step are not in it).

Run: ``.venv/bin/python bench/bench_stragglers.py [--rounds 3] [--only hint|overhead]``.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.env import free_port  # noqa: E402
from jupyter_air.jobs.node.hints import read_hints  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.perf.marks import Phase, rank_files  # noqa: E402
from tests.air_cli import air  # noqa: E402
from tests.waits import until, wait_settled  # noqa: E402

#: The training: ``slow_ranks.py backward=3`` or ``data=1``.
SLOW_RANKS = ROOT / "tests" / "perf" / "slow_ranks.py"

LOOP = """\
import json, os, sys, time
if os.environ["ARM"] == "phases":
    from jupyter_air.perf import phases
    phases.install()  # as a rank's start does, before the user's imports
import torch, torch.distributed as dist
import jupyter_air

STEPS = int(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo")
data = torch.utils.data.TensorDataset(torch.randn(64 * STEPS, 256))
loader = torch.utils.data.DataLoader(data, batch_size=64)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ends = []
for (x,) in loader:
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    jupyter_air.step(samples=64)
    ends.append(time.perf_counter())
steps = [b - a for a, b in zip(ends, ends[1:])]
print("RESULT " + json.dumps(steps), flush=True)
dist.destroy_process_group()
"""


MICRO = """\
import os, threading, time
import torch, torch.distributed as dist
import jupyter_air
from jupyter_air.perf import phases

torch.set_num_threads(1)
dist.init_process_group("gloo")
data = torch.utils.data.TensorDataset(torch.randn(8 * 100, 16))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
os.environ["WORLD_SIZE"] = "2"  # the notes a job of several ranks writes
phases.install()
tracker = phases._tracker
training = threading.get_ident()

def batch(on):
    tracker._owner = training if on else -1  # off: every hook passes the call through
    began = time.perf_counter()
    for (x,) in torch.utils.data.DataLoader(data, batch_size=8):
        loss = model(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        jupyter_air.step(samples=8)
    return (time.perf_counter() - began) / 100

times = {True: [], False: []}
for i in range(200):
    for on in (True, False) if i % 2 else (False, True):
        times[on].append(batch(on))
print(f"RESULT {min(times[False])} {min(times[True])}", flush=True)
dist.destroy_process_group()
"""


def first_mark(perf: Path) -> float | None:
    """The time of the job's first step mark (any rank's)."""
    times = []
    for path in rank_files(perf).values():
        for line in path.read_text().splitlines():
            if '"s":' in line and '"dt":' in line:
                times.append(json.loads(line)["t"])
                break
    return min(times) if times else None


def hint(workdir: Path, where: str) -> dict[str, Any]:
    """One job slowed at ``where``: seconds to its straggler hint, and the hint."""
    slow = {"backward": 3, "data": 1}[where]
    workload = {
        "experiment_name": "bench-stragglers",
        "command": f"{sys.executable} {SLOW_RANKS} {where}={slow}",
        "compute": {"nproc_per_node": 4, "oversubscribe": True},
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    done = air("run", "-f", str(workdir / "w.yaml"))
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split()[1]
    store = JobStore(Path(os.environ["AIR_HOME"]))
    attempt = store.attempt_dir(job_id, 1)

    def straggler() -> tuple[float, str] | None:
        hints = [h["text"] for h in read_hints(attempt)["hints"] if h["kind"] == "straggler"]
        return (time.time(), hints[0]) if hints else None

    try:
        seen, text = until(straggler, f"a straggler hint ({where})", timeout=300, step=0.1)
        started = store.attempts(job_id)[0].started
        first = first_mark(attempt / "perf")
        assert first is not None
        split = ranks_split(attempt / "perf")
    finally:
        air("cancel", job_id)
        wait_settled(store, job_id, timeout=120)
    return {
        "from_start": seen - started,
        "from_first_step": seen - first,
        "text": text,
        "split": split,
    }


def ranks_split(perf: Path) -> str:
    """Each rank's median step time and split (ms), over its steps so far but the first 5."""
    said = []
    for rank, path in rank_files(perf).items():
        lines = [json.loads(x) for x in path.read_text().splitlines() if '"dt":' in x][5:]
        dt = statistics.median(x["dt"] for x in lines) * 1000
        ph = {k.value: statistics.median(x["ph"].get(k, 0.0) for x in lines) * 1000 for k in Phase}
        said.append(
            f"rank {rank} {dt:.0f} ms (data {ph['data']:.1f}, compute {ph['compute']:.1f}, "
            f"comm {ph['comm']:.1f})"
        )
    return "; ".join(said)


def hints(workdir: Path, rounds: int) -> None:
    for where, rank, phase in (("backward", 3, "compute (backward)"), ("data", 1, "data")):
        found = [hint(workdir, where) for _ in range(rounds)]
        for got in found:
            if not (got["text"].startswith(f"rank {rank}: ") and phase in got["text"]):
                raise SystemExit(f"the hint does not name rank {rank} and {phase}: {got}")
        start = [g["from_start"] for g in found]
        step = [g["from_first_step"] for g in found]
        print(
            f"== 150 ms in {where}: hint after {statistics.median(start):.1f} s from the "
            f"attempt's start ({min(start):.1f}-{max(start):.1f}), "
            f"{statistics.median(step):.1f} s from its first step mark "
            f"({min(step):.1f}-{max(step):.1f}); said: {found[-1]['text']!r}; a step, "
            f"medians: {found[-1]['split']}",
            flush=True,
        )


def loop(folder: Path, arm: str, steps: int) -> float:
    """The 2-rank loop with ``arm``: the median of its ranks' step times (warm-up out)."""
    (folder / "train.py").write_text(LOOP)
    perf = folder / "perf"
    perf.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base.update(
        ARM=arm,
        AIR_PERF="0" if arm == "off" else "1",
        AIR_PERF_DIR=str(perf),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        PYTHONPATH=str(ROOT),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "train.py", str(steps)],
            cwd=folder,
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    times: list[float] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None or "[air]" in out:
            raise SystemExit(f"a rank failed ({proc.returncode}):\n{out[-3000:]}")
        got = json.loads(line[len("RESULT ") :])
        times += got[len(got) // 10 :]
    marked = bool(rank_files(perf))
    split = '"ph"' in (perf / "rank-0.jsonl").read_text() if marked else False
    if (marked, split) != (arm != "off", arm == "phases"):
        raise SystemExit(f"arm {arm}: marks {marked}, split {split}")
    return statistics.median(times)


def overhead(rounds: int, steps: int) -> None:
    arms = ["off", "marks", "phases"]
    medians: dict[str, list[float]] = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in arms[r % 3 :] + arms[: r % 3]:
            with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
                medians[arm].append(loop(Path(tmp), arm, steps))
        print(
            f"round {r + 1}: "
            + ", ".join(f"{arm} {medians[arm][-1] * 1000:.3f} ms" for arm in arms),
            flush=True,
        )
    alone = [p / m for p, m in zip(medians["phases"], medians["marks"], strict=True)]
    together = [p / o for p, o in zip(medians["phases"], medians["off"], strict=True)]
    print(
        f"== step time, medians: off {statistics.median(medians['off']) * 1000:.3f} ms, "
        f"marks {statistics.median(medians['marks']) * 1000:.3f} ms, phases "
        f"{statistics.median(medians['phases']) * 1000:.3f} ms; phases / marks "
        f"{statistics.median(alone):.4f} ({min(alone):.4f}-{max(alone):.4f}), "
        f"phases / off {statistics.median(together):.4f} "
        f"({min(together):.4f}-{max(together):.4f})",
        flush=True,
    )


def micro() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
        (Path(tmp) / "micro.py").write_text(MICRO)
        env = {
            **os.environ,
            "AIR_PERF_DIR": tmp,
            "RANK": "0",
            "WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "PYTHONPATH": str(ROOT),
        }
        out = subprocess.run(
            [sys.executable, "micro.py"], cwd=tmp, env=env, capture_output=True, text=True
        )
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            raise SystemExit(f"micro failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        before, after = (float(x) for x in line.split()[1:])
        print(
            f"== one rank, best step: {before * 1e6:.0f} us passed through, {after * 1e6:.0f} "
            f"us counted: {(after - before) * 1e6:+.1f} us a step",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--only", choices=["hint", "overhead"])
    args = parser.parse_args()
    if args.only != "overhead":
        workdir = Path(tempfile.mkdtemp(prefix="bench-stragglers-"))
        os.environ.update(  # the air commands' and their jobs'
            AIR_HOME=str(workdir / "air"),
            MLFLOW_TRACKING_URI=f"sqlite:///{workdir}/mlflow.db",
            JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
            PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        )
        try:
            hints(workdir, args.rounds)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.only != "hint":
        micro()
        overhead(args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
