"""How many ranks this machine holds: the one rule for the magic, the decorator and
``air run`` (the local backend; a Ray cluster's capacity is checked by ``backends.ray.cluster``).

With GPUs, each rank gets its own (``CUDA_VISIBLE_DEVICES``): more ranks than visible
GPUs share them, and usually run out of GPU memory. Without GPUs, ranks share the cores:
``CPU_RANKS_PER_CORE`` per core still lets a small machine (a laptop, a CI runner) run
the usual 2- or 4-rank tests, while thousands of ranks, which exhaust processes, memory
and file descriptors long before they train anything, are refused. Either limit can be
lifted on purpose (``--oversubscribe``).

On a GPU in MIG mode the ranks are placed on its free slices instead, one each
(``gpu.placement``); the job's spec keeps each rank's slice (``DEVICES``), which makes
it busy for the next job until this one ends. Between reading what live jobs hold and
recording a job, a submission holds ``placing``: two at once would both see a slice
free and both take it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..gpu.placement import Unit
    from .store import Job

#: CPU ranks per usable core. Each rank is a whole interpreter with its framework
#: (0.3 to 0.5 GB with torch) running one busy thread (OMP_NUM_THREADS=1): past 4 per
#: core it mostly waits for the CPU, and memory is usually the next limit.
CPU_RANKS_PER_CORE = 4

#: The local backend's setting, in the job's spec, that lists each local rank's device
#: (its ``CUDA_VISIBLE_DEVICES``) where the job was placed on MIG slices.
DEVICES = "devices"


#: Seconds a submission waits for another one of the same store to be recorded (which
#: may ask a tracking server first: its probe's seconds) before it is refused.
PLACING_WAIT = 60.0


class TooManyRanks(ValueError):
    """More ranks than this machine holds; the message says how to run them anyway."""


class PlacingBusy(TimeoutError):
    """Another submission kept the store's placing lock longer than ``PLACING_WAIT``."""


@contextmanager
def placing(home: Path, wait: float = PLACING_WAIT) -> Iterator[Callable[[], None]]:
    """Hold the store's placing lock (``home/placing.lock``, flock): one submission at a
    time from ``held_by`` to its job's record. Yields ``release``, for a submission that
    took no slice: the rest of its start need not keep others waiting. Waits at most
    ``wait`` seconds (a process of the store's owner could hold it on purpose), then
    raises ``PlacingBusy``."""
    fd = os.open(home / "placing.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PlacingBusy(
                        f"another submission has been placing its job for over {wait:g} s"
                    ) from None
                time.sleep(0.05)
        yield lambda: fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)  # closing lets the lock go, if release did not


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


def check_here(
    nproc_per_node: int,
    override: str,
    *,
    mig: str | None = None,
    oversubscribe: bool = False,
    held: Mapping[str, str] | None = None,
) -> list[Unit] | None:
    """``check`` against this machine (the GPUs a job may use here and the cores this
    process may run on), unless ``oversubscribe``; or, where the job asks for MIG slices
    (``mig``) or may use a GPU in MIG mode, the slice of each local rank, ``held`` ones
    busy (``gpu.placement.choose``; too few free raise ``TooManyRanks`` naming the free
    ones). None: each rank gets its visible GPU by local rank."""
    from ..gpu import placement

    found = units_here(held or {})
    try:
        chosen = placement.choose(
            found, nproc_per_node, mig, oversubscribe=oversubscribe, override=override
        )
    except placement.NoRoom as err:
        raise TooManyRanks(str(err)) from None
    if chosen is None and not oversubscribe:
        check(nproc_per_node, len(found), usable_cores(), override)
    return chosen


def default_ranks(mig: str | None = None, held: Mapping[str, str] | None = None) -> int:
    """Ranks when the submitter says nothing: one per visible GPU, or per free MIG slice
    the job may take on a GPU in MIG mode; 1 without GPUs."""
    from ..gpu import placement

    found = units_here(held or {})
    if placement.involved(found, mig):
        return placement.default_count(found, mig)
    return max(1, len(found))


def units_here(held: Mapping[str, str]) -> list[Unit]:
    """The GPUs a job may use here (``env.visible_gpus``), a GPU in MIG mode as its slices."""
    from ..gpu import placement
    from ..gpu.nvml import Nvml
    from .env import visible_gpus

    nvml = Nvml()
    try:
        inventory = nvml.inventory()
        slices = {info.index: nvml.mig_devices(info.index) for info in inventory if info.mig_mode}
    finally:
        nvml.shutdown()
    return placement.units(visible_gpus(os.environ, len(inventory)), inventory, slices, held)


def held_by(jobs: Iterable[Job], caller: str) -> dict[str, str]:
    """The devices that live jobs supervised on this machine were placed on, each with
    whose job holds it: its id for the caller's own, no name for another's."""
    held = {}
    for job in jobs:
        if job.done or not job.supervised_here:
            continue
        whose = f"job {job.id}" if job.owner == caller else "another user's job"
        for device in job.spec.backend.settings.get(DEVICES) or ():
            held[str(device)] = whose
    return held


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
