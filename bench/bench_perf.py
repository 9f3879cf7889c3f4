"""What the step marks cost a training, and how good their ETA is (issue 38, items 1
and 3; see docs/benchmarks.md).

1. ``overhead``: a 2-rank DDP job on the CPU (gloo), the HF Trainer training a small
   GPT-2 with nothing of ours in its code, started with exactly the environment our
   ranks get (``jobs.env.rank_env``): the hooks on (``AIR_PERF_DIR`` set, the rank's
   ``sitecustomize`` hooking the Trainer) or off (``AIR_PERF=0``: nothing of ours in
   the rank). Each rank times its own steps (a callback of the script's, end to end), in
   wall time and in its own CPU time (``time.process_time``: what our hooks add is CPU
   work, and a CPU second is a CPU second on a loaded machine, where the wall time of a
   step swings by more than the 1 % to be measured), and says its peak RSS. Arms
   alternate within each round (the order rotates); the figure is each round's on/off
   ratio of the median step time, and the median of the rounds.
   Beside it, a plain loop logging ``log_metrics(step=...)`` every step (the cadence
   hook) the same way.
2. ``micro``: what the hooks do at each HF step (its begin and end marked, its batch
   counted), timed alone in this process: the CPU they add to a step, without the
   machine's noise.
3. ``eta``: a steady job (the HF Trainer, each step held to ``--hold`` seconds by the
   script's own callback, so the step time does not depend on the machine's load) of
   ``--steps`` steps; its marks are read while it runs, as the supervisor reads them
   (``perf.progress``), and the predicted end after 10 %, 25 % and 50 % of its steps is
   compared with the end it had: error = |predicted - actual time left| / actual.

Run: ``.venv/bin/python bench/bench_perf.py [--rounds 6] [--steps 200]
[--only overhead|micro|eta]``.
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
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.env import RankPlace, free_port, inherited_env, rank_env  # noqa: E402
from jupyter_air.perf import hooks, marks, progress  # noqa: E402

HF = """\
import json, os, resource, sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

STEPS, HOLD = int(sys.argv[1]), float(sys.argv[2])

class Clock(TrainerCallback):
    def __init__(self):
        self.ends, self.cpu = [], []
    def on_step_end(self, args, state, control, **kwargs):
        if HOLD:
            left = HOLD - (time.perf_counter() - (self.ends[-1] if self.ends else 0))
            time.sleep(max(left, 0) if self.ends else HOLD)
        self.ends.append(time.perf_counter())
        self.cpu.append(time.process_time())

torch.manual_seed(0)
config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                    bos_token_id=0, eos_token_id=0)
ids = torch.randint(0, 256, (8 * STEPS, 64))
args = TrainingArguments(
    output_dir="out", max_steps=STEPS, per_device_train_batch_size=4, save_strategy="no",
    report_to="none", use_cpu=True, ddp_backend="gloo", disable_tqdm=True, logging_strategy="no",
)
clock = Clock()
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, callbacks=[clock],
                  train_dataset=[{"input_ids": row, "labels": row} for row in ids])
trainer.train()
steps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
cpu = [b - a for a, b in zip(clock.cpu, clock.cpu[1:])]
print("RESULT " + json.dumps({"steps": steps, "cpu": cpu, "rss_kib": resource.getrusage(
    resource.RUSAGE_SELF).ru_maxrss}), flush=True)
"""

LOOP = """\
import json, resource, sys, time
import torch, torch.distributed as dist
from jupyter_air import log_metrics

STEPS = int(sys.argv[1])
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ends, cpu = [], []
for step in range(1, STEPS + 1):
    loss = model(torch.randn(64, 256)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    log_metrics({"loss": loss.item()}, step=step)
    ends.append(time.perf_counter())
    cpu.append(time.process_time())
steps = [b - a for a, b in zip(ends, ends[1:])]
cpu = [b - a for a, b in zip(cpu, cpu[1:])]
print("RESULT " + json.dumps({"steps": steps, "cpu": cpu, "rss_kib": resource.getrusage(
    resource.RUSAGE_SELF).ru_maxrss}), flush=True)
dist.destroy_process_group()
"""


def launch(
    script: str, args: list[str], folder: Path, on: bool, ranks: int = 2
) -> list[subprocess.Popen[str]]:
    """The ranks of a job as ours start them, hooks on or off, marks in ``folder/perf``."""
    (folder / "train.py").write_text(script)
    perf = folder / "perf"
    perf.mkdir(exist_ok=True)
    base = inherited_env()
    base.pop("PYTHONPATH", None)
    base.update({"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""})
    base["AIR_PERF"] = "1" if on else "0"
    extra = {
        marks.PERF_DIR_ENV: str(perf),
        "AIR_METRICS_JOURNAL": str(folder / "metrics.jsonl"),
        "MLFLOW_RUN_ID": "bench",
    }
    port = free_port()
    procs = []
    for rank in range(ranks):
        env = rank_env(
            base,
            RankPlace(rank, rank, 0, ranks, 1),
            master_addr="127.0.0.1",
            master_port=port,
            job_id=f"bench-{folder.name}",
            attempt=1,
            max_restarts=0,
            gpus=None,
            extra=extra,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "train.py", *args],
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def results(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    found = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            raise SystemExit(f"a rank failed ({proc.returncode}):\n{out[-3000:]}")
        if "[air]" in out:
            raise SystemExit(f"a hook of ours complained:\n{out[-3000:]}")
        found.append(json.loads(line[len("RESULT ") :]))
    return found


def overhead(rounds: int, steps: int) -> None:
    for name, script, args in (
        ("HF Trainer", HF, [str(steps), "0"]),
        ("plain loop, log_metrics every step", LOOP, [str(steps * 4)]),
    ):
        rss: list[tuple[bool, int]] = []
        figures: dict[str, dict[bool, list[float]]] = {
            kind: {True: [], False: []} for kind in ("steps", "cpu")
        }
        for r in range(rounds):
            for on in (True, False) if r % 2 == 0 else (False, True):
                with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
                    got = results(launch(script, args, Path(tmp), on))
                    marked = list((Path(tmp) / "perf").glob("rank-*.jsonl"))
                    if bool(marked) != on:
                        raise SystemExit(f"hooks {'on' if on else 'off'}, marks: {marked}")
                skip = max(len(got[0]["steps"]) // 10, 1)  # warm-up left out
                for kind, by_arm in figures.items():
                    by_arm[on].append(statistics.median(s for g in got for s in g[kind][skip:]))
                rss.append((on, max(g["rss_kib"] for g in got)))
            print(f"{name}, round {r + 1}: " + _round(figures), flush=True)
        on_rss = statistics.median(k for o, k in rss if o) / 1024
        off_rss = statistics.median(k for o, k in rss if not o) / 1024
        for kind, by_arm in figures.items():
            ratios = [a / b for a, b in zip(by_arm[True], by_arm[False], strict=True)]
            print(
                f"== {name}, {'wall' if kind == 'steps' else 'CPU'} time a step: medians "
                f"on {statistics.median(by_arm[True]) * 1000:.2f} ms, "
                f"off {statistics.median(by_arm[False]) * 1000:.2f} ms; ratio median "
                f"{statistics.median(ratios):.4f} (rounds {min(ratios):.4f}-{max(ratios):.4f})",
                flush=True,
            )
        print(
            f"== {name}: peak RSS a rank, medians: on {on_rss:.1f} MiB, off {off_rss:.1f} MiB "
            f"({on_rss - off_rss:+.1f} MiB)",
            flush=True,
        )


def micro() -> None:
    """What the hooks do at each step of the HF Trainer, timed alone in this process:
    a step's begin and end marked, and its batch counted (the CPU work they add)."""
    import torch

    batch = {
        "input_ids": torch.zeros(4, 64, dtype=torch.long),
        "attention_mask": torch.ones(4, 64, dtype=torch.long),
    }
    n = 20000
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        one = marks.Marks(tmp, 0)

        def hf_step() -> None:
            one.begin()
            samples, tokens = hooks.batch_size(batch)
            one.step(marks.Source.HF, samples=samples, tokens=tokens)

        for name, work in (
            ("Marks.step", lambda: one.step(marks.Source.HF, samples=8, tokens=512)),
            ("an HF step's hooks (begin, batch counted, step marked)", hf_step),
        ):
            seconds = min(timeit.repeat(work, number=n, repeat=5))
            print(f"== {name}: {seconds / n * 1e6:.1f} us", flush=True)


def _round(figures: dict[str, dict[bool, list[float]]]) -> str:
    """The latest round's medians, wall and CPU, on and off, and their ratios."""
    said = []
    for kind, by_arm in figures.items():
        on, off = by_arm[True][-1], by_arm[False][-1]
        said.append(f"{kind} on {on * 1000:.2f} ms, off {off * 1000:.2f} ms ({on / off:.4f}x)")
    return "; ".join(said)


def eta(steps: int, hold: float) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        folder = Path(tmp)
        procs = launch(HF, [str(steps), str(hold)], folder, True)
        follower = progress.Follower(folder / "perf")
        predicted: dict[int, tuple[float, int]] = {}  # percent -> (predicted end, step)
        while any(p.poll() is None for p in procs):
            now = follower.update()
            if now is not None and now.total and now.eta_s is not None:
                for percent in (10, 25, 50):
                    if percent not in predicted and now.step >= now.total * percent / 100:
                        predicted[percent] = (now.updated + now.eta_s, now.step)
            time.sleep(0.05)
        results(procs)
        final = follower.update()
        if final is None or final.total != steps:
            raise SystemExit(f"the job's marks say {final}")
        end = final.updated
        for percent, (at_end, step) in sorted(predicted.items()):
            first = _mark_time(folder / "perf" / "rank-0.jsonl", step)
            left = end - first
            error = abs(at_end - end) / left
            print(
                f"== ETA after {percent} % (step {step} of {steps}): predicted "
                f"{at_end - first:.2f} s left, was {left:.2f} s: error {error * 100:.1f} %",
                flush=True,
            )


def _mark_time(path: Path, step: int) -> float:
    for line in path.read_text().splitlines():
        mark = json.loads(line)
        if mark.get("s") == step:
            return float(mark["t"])
    raise SystemExit(f"no mark of step {step}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hold", type=float, default=0.1, help="seconds a steady step takes")
    parser.add_argument("--only", choices=["overhead", "micro", "eta"])
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.only in (None, "overhead"):
        overhead(args.rounds, args.steps)
    if args.only in (None, "micro"):
        micro()
    if args.only in (None, "eta"):
        eta(args.steps, args.hold)


if __name__ == "__main__":
    main()
