"""The ranks whose recorders and stacks are saved here (torch 2.13, gloo, 2 ranks):
``absent``, rank 1 never enters the 5th collective; ``mismatch``, rank 1 calls a
broadcast where rank 0 calls an all_reduce. Each rank ran
``RANK=R WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python ranks.py CASE`` with
``flight_recorder.rank_env``'s environment; ``flight_recorder.gather`` and
``stacks.dump`` took the files once both had printed ``ready`` (their line numbers are
the script's before this docstring)."""

import os
import sys
import time

import torch
import torch.distributed as dist

from jupyter_air.jobs.node import flight_recorder

flight_recorder.start()
case = sys.argv[1]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")


def load_batch() -> None:
    while True:
        time.sleep(0.2)


x = torch.ones(1024)
for _ in range(3):
    dist.all_reduce(x)
dist.broadcast(torch.zeros(3, 4, dtype=torch.int64), 0)
print(rank, "ready", flush=True)
if case == "absent":
    if rank == 1:
        load_batch()
    dist.all_reduce(x)
elif rank == 1:
    dist.broadcast(torch.zeros(3, 4, dtype=torch.int64), 0)
else:
    dist.all_reduce(x)
