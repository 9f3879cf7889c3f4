"""A rank's step split into waiting for data, compute and waiting in collectives (issue
38, item 4): the tracker's accounting on a clock of our own, then two real gloo ranks
under DDP, where a rank slowed in its backward makes the other wait in the all-reduce
that ends its backward: the wait is the other's comm, not its compute."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.env import free_port
from jupyter_air.perf.marks import Marks, Phase, Source
from jupyter_air.perf.phases import Place, Tracker


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_move_counts_the_time_spent_where_the_thread_was(tmp_path: Path) -> None:
    now = [0.0]
    marks = Marks(str(tmp_path), 0)
    tracker = Tracker(lambda: marks, clock=lambda: now[0])

    def read() -> None:
        now[0] += 2.0

    wait_for_data = tracker.waiting(Place.DATA, read)
    now[0] = 1.0  # the rank's start (imports, the model): no step's
    wait_for_data()  # 2 s in the DataLoader: the training began
    now[0] = 4.0  # forward, loss, backward: 1 s
    tracker.optimizer_began()
    now[0] = 4.5
    tracker.optimizer_ended()
    marks.step(Source.STEP, step=9)
    now[0] = 6.5
    tracker.optimizer_began()
    now[0] = 7.0
    tracker.optimizer_ended()
    marks.step(Source.STEP, step=10)  # the compute's split is noted every 10 steps
    nine, ten, note = lines(tmp_path / "rank-0.jsonl")
    assert nine["ph"] == {Phase.DATA: 2.0, Phase.COMPUTE: 1.5}
    assert ten["ph"] == {Phase.COMPUTE: 2.5}
    assert note == {"cs": {"other": 1.5, "optimizer": 0.5}, "s": 10, "steps": 2, "t": note["t"]}


def test_a_nested_wait_is_the_outer_ones_and_other_threads_are_not_followed(
    tmp_path: Path,
) -> None:
    now = [0.0]
    marks = Marks(str(tmp_path), 0)
    tracker = Tracker(lambda: marks, clock=lambda: now[0], notes=False)

    def gather(async_op: bool = False) -> None:  # a collective built on another one
        now[0] += 1.0
        if not async_op:
            inner()

    def reduce() -> None:
        now[0] += 1.0

    inner = tracker.waiting(Place.COMM, reduce)
    outer = tracker.waiting(Place.COMM, gather)
    outer()  # before the training's first read of data or backward: no step's
    tracker.waiting(Place.DATA, lambda: None)()
    outer()  # 2 s of waiting, counted once
    assert tracker.place is Place.OTHER
    outer(async_op=True)  # launched, not waited for: 1 s of compute
    elsewhere = threading.Thread(target=outer)  # not the training thread: its time is
    elsewhere.start()  # the training thread's compute meanwhile
    elsewhere.join()
    tracker.move(Place.OTHER)
    marks.step(Source.STEP)
    (step,) = lines(tmp_path / "rank-0.jsonl")  # no notes asked: one line
    assert step["ph"] == {Phase.COMM: 2.0, Phase.COMPUTE: 3.0}


DDP = """\
import os, sys, time
from jupyter_air.perf import marks, phases
phases.install()  # as a rank's start does, before the user's imports
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        if rank == 1 and i % 8 == 0:
            time.sleep(0.06)  # rank 1 waits 60 ms for each batch
        return torch.randn(16)

model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
if rank == 1:  # and computes its backward 60 ms longer
    model[2].register_full_backward_hook(lambda *_: time.sleep(0.06))
ddp = DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
for step, x in enumerate(torch.utils.data.DataLoader(Slow(), batch_size=8)):
    ddp(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if rank == 1:
        time.sleep(0.03)  # 30 ms of its own before the barrier
    dist.barrier()
    marks.current().step(marks.Source.STEP)
    if step == 29:
        break
dist.destroy_process_group()
"""


@pytest.mark.heavy
def test_under_ddp_the_wait_for_a_slow_backward_is_the_others_comm(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP)
    env = {
        **os.environ,
        "AIR_PERF_DIR": str(tmp_path),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    ranks = [
        subprocess.Popen([sys.executable, "train.py"], cwd=tmp_path, env={**env, "RANK": str(r)})
        for r in range(2)
    ]
    assert [rank.wait(timeout=180) for rank in ranks] == [0, 0]

    def medians(rank: int) -> dict[str, float]:
        """The rank's median seconds a step, by phase and by place of its compute."""
        found = lines(tmp_path / f"rank-{rank}.jsonl")
        steps = [line["ph"] for line in found if "ph" in line][10:]  # past the first steps
        notes = [line["cs"] for line in found if "cs" in line][1:]
        split = {**{f"ph.{k}": [s.get(k, 0.0) for s in steps] for k in Phase}}
        split.update({f"cs.{k}": [n.get(k, 0.0) for n in notes] for k in Place if k != "data"})
        return {key: statistics.median(values) for key, values in split.items()}

    slow, waiting = medians(1), medians(0)
    assert slow["ph.data"] > 0.055
    assert waiting["ph.data"] < 0.02
    assert slow["cs.backward"] > 0.055
    assert waiting["cs.backward"] < 0.03
    assert slow["cs.other"] > 0.025
    assert slow["cs.optimizer"] > 0
    assert slow["ph.comm"] < 0.03  # it comes last: nobody to wait for
    assert waiting["ph.comm"] > 0.12  # 60 + 60 + 30 ms of waiting for rank 1
    assert waiting["ph.compute"] < 0.05
