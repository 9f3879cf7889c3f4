"""A small DDP training on gloo with a straggler or two, the command of the straggler
test's job and of bench/bench_stragglers.py: ``python slow_ranks.py [data=R]
[backward=R]``: rank R waits 150 ms for each batch from its data loader, or spends 150 ms
more in its backward pass (a module's backward hook sleeping there). It marks its steps
with ``jupyter_air.step()`` and trains until it is stopped."""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import jupyter_air

#: Seconds added to a slowed rank's phase, a step.
DELAY = 0.15
BATCH = 16


class Batches(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self, slow: bool) -> None:
        self.slow = slow

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.slow and i % BATCH == 0:
            time.sleep(DELAY)
        return torch.randn(32)


def main(args: list[str]) -> None:
    slowed = {place: int(rank) for place, rank in (arg.split("=") for arg in args)}
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    if slowed.get("backward") == rank:

        def sleep(*_: Any) -> None:
            time.sleep(DELAY)

        model[2].register_full_backward_hook(sleep)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    batches = Batches(slowed.get("data") == rank)
    for x in torch.utils.data.DataLoader(batches, batch_size=BATCH):
        ddp(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        jupyter_air.step(samples=BATCH)


if __name__ == "__main__":
    main(sys.argv[1:])
