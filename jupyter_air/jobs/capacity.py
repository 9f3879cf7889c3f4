"""How many ranks this machine holds: the one rule for the magic, the decorator and
``air run`` (the local backend; a Ray cluster's capacity is checked by ``backends.ray.cluster``).

With GPUs, each rank gets its own (``CUDA_VISIBLE_DEVICES``): more ranks than visible
GPUs share them, and usually run out of GPU memory. Without GPUs, ranks share the cores:
``CPU_RANKS_PER_CORE`` per core still lets a small machine (a laptop, a CI runner) run
the usual 2- or 4-rank tests, while thousands of ranks, which exhaust processes, memory
and file descriptors long before they train anything, are refused. Either limit can be
lifted on purpose (``--oversubscribe``).
"""

from __future__ import annotations

import os

#: CPU ranks per usable core. Each rank is a whole interpreter with its framework
#: (0.3 to 0.5 GB with torch) running one busy thread (OMP_NUM_THREADS=1): past 4 per
#: core it mostly waits for the CPU, and memory is usually the next limit.
CPU_RANKS_PER_CORE = 4


class TooManyRanks(ValueError):
    """More ranks than this machine holds; the message says how to run them anyway."""


def check(nproc_per_node: int, gpus: int, cores: int, override: str) -> None:
    """Refuse ``nproc_per_node`` ranks on a machine with ``gpus`` visible GPUs and
    ``cores`` usable cores; ``override`` names the option that lifts the limit."""
    if gpus > 0 and nproc_per_node > gpus:
        raise TooManyRanks(
            f"{nproc_per_node} ranks need {nproc_per_node} GPUs (one each), and this machine "
            f"has {gpus} visible: ask for at most {gpus}, or pass {override} to share GPUs"
        )
    limit = CPU_RANKS_PER_CORE * cores
    if gpus == 0 and nproc_per_node > limit:
        raise TooManyRanks(
            f"{nproc_per_node} CPU ranks on {cores} core(s) is more than "
            f"{CPU_RANKS_PER_CORE} per core: ask for at most {limit}, or pass {override} "
            "to start them anyway"
        )


def check_here(nproc_per_node: int, override: str) -> None:
    """``check`` against this machine: the GPUs a job may use here and the cores this
    process may run on."""
    from .env import gpu_count, visible_gpus

    gpus = len(visible_gpus(os.environ, gpu_count()))
    check(nproc_per_node, gpus, usable_cores(), override)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
