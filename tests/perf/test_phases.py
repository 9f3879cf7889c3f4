"""A rank's step split into waiting for data, compute and waiting in collectives (issue
38, item 4): the tracker's accounting on a clock of our own, on a GPU's CUDA events
played by a GPU of our own (the real one: the ``gpu`` test), then two real gloo ranks
under DDP, where a rank slowed in its backward makes the other wait in the all-reduce
that ends its backward: the wait is the other's comm, not its compute."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.env import free_port
from jupyter_air.perf.marks import Marks, Phase, Source
from jupyter_air.perf.phases import Place, StreamTimer, Tracker


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


class PlayedGpu:
    """A GPU whose stream runs behind the CPU: ``now`` is where its queue of work ends
    (an event recorded now is reached then), ``done`` how far it has run."""

    def __init__(self) -> None:
        self.now = 0.0
        self.done = 0.0
        self.made = 0

    def event(self, enable_timing: bool = False) -> PlayedEvent:
        assert enable_timing
        self.made += 1
        return PlayedEvent(self)


class PlayedEvent:
    """``torch.cuda.Event``'s part the timer uses."""

    def __init__(self, gpu: PlayedGpu) -> None:
        self.gpu, self.at = gpu, -1.0

    def record(self) -> None:
        self.at = self.gpu.now

    def query(self) -> bool:
        return self.gpu.done >= self.at

    def elapsed_time(self, end: PlayedEvent) -> float:
        assert self.query(), "read before the GPU passed it: a wait"
        assert end.query(), "read before the GPU passed it: a wait"
        return (end.at - self.at) * 1000.0  # milliseconds, as CUDA's


def test_on_a_gpu_the_split_is_the_streams_time_read_once_the_gpu_has_passed_it(
    tmp_path: Path,
) -> None:
    cpu, gpu = [0.0], PlayedGpu()
    marks = Marks(str(tmp_path), 0)
    cuda: list[StreamTimer] = []  # CUDA is initialized once the model is on the GPU
    tracker = Tracker(lambda: marks, clock=lambda: cpu[0], streams=lambda: next(iter(cuda), None))

    def read() -> None:  # 0.3 s of the CPU in the DataLoader, the GPU idle for 0.1 of it
        cpu[0] += 0.3
        gpu.now = gpu.done = gpu.now + 0.1

    tracker.waiting(Place.DATA, lambda: None)()  # before CUDA: the CPU's clock
    cuda.append(StreamTimer(gpu.event))
    tracker.waiting(Place.DATA, read)()
    tracker.move(Place.BACKWARD)
    cpu[0] += 0.01  # the backward's kernels queued in 10 ms, to run for 0.6 s
    gpu.now += 0.6
    tracker.move(Place.OTHER)
    marks.step(Source.STEP, step=1)  # the GPU is still in the backward pass
    gpu.done = gpu.now  # it catches up
    tracker.optimizer_began()
    gpu.now += 0.05
    tracker.optimizer_ended()
    gpu.done = gpu.now
    tracker.move(Place.OTHER)
    marks.step(Source.STEP, step=2)
    one, two = lines(tmp_path / "rank-0.jsonl")
    assert one["ph"] == {Phase.DATA: pytest.approx(0.1)}, "the GPU's idle time, not the CPU's"
    assert two["ph"] == {Phase.COMPUTE: pytest.approx(0.65)}, "the backward, read a step later"
    for step in range(3, 300):  # a long run reuses its events
        tracker.waiting(Place.DATA, read)()
        tracker.move(Place.BACKWARD)
        gpu.now += 0.01
        tracker.move(Place.OTHER)
        gpu.done = gpu.now
        marks.step(Source.STEP, step=step)
    assert gpu.made < 10


@pytest.mark.gpu
def test_on_a_real_gpu_the_compute_is_the_kernels_time_not_their_launch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    marks = Marks(str(tmp_path), 0)
    tracker = Tracker(lambda: marks)  # CUDA's events, as a rank's
    tracker.waiting(Place.DATA, lambda: None)()
    began = time.perf_counter()
    tracker.move(Place.BACKWARD)
    for _ in range(40):
        x = torch.tanh(x @ x)
    launched = time.perf_counter() - began
    tracker.move(Place.OTHER)
    torch.cuda.synchronize()
    ran = time.perf_counter() - began
    tracker.move(Place.OTHER)  # the GPU has passed the backward's end: its span is read
    marks.step(Source.STEP, step=1)
    (step,) = lines(tmp_path / "rank-0.jsonl")
    assert ran > 5 * launched, "the CPU ran ahead of the GPU, as in training"
    assert step["ph"][Phase.COMPUTE] == pytest.approx(ran, rel=0.3)


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
    if step == 59:  # 6 notes of the split: the median of 5 outlives a stall on a loaded core
        break
# DDP holds the process group: destroyed with it now, not by the interpreter's teardown,
# where gloo's threads can abort the rank ("terminate called without an active exception").
del ddp, optimizer
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
        assert len(notes) == 5
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
