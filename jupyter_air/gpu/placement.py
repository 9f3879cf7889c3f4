"""Which GPU or MIG slice each rank of a job gets on this machine.

CUDA runs a process on one MIG device (slice) of a MIG-enabled GPU, named in
``CUDA_VISIBLE_DEVICES`` by its ``MIG-<uuid>``; a GPU's index there gives every process
the GPU's first slice, whoever holds it. So on a GPU in MIG mode its slices are what
ranks are placed on, one rank each, and only free ones: a slice is busy while NVML lists
a process on it, or while a live job of this machine holds it (its ranks may not have
reached CUDA yet). Where no GPU a job may use is in MIG mode and the job asks for no
slice, nothing here applies: each rank gets its visible GPU by local rank, as ever
(``jobs.env``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nvml import GpuInfo, MigDevice

#: ``compute.mig: any`` (``--mig any``): slices of whatever profile, never a whole GPU.
ANY = "any"
#: A MIG profile as NVIDIA names them: ``1g.10gb``; ``1c.3g.40gb``, a compute instance
#: of a larger GPU instance; ``1g.10gb+me``, with the media engines.
PROFILE = re.compile(r"(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)?")


@dataclass(frozen=True)
class Unit:
    """One place for one rank: a whole GPU, or a slice of a GPU in MIG mode."""

    #: What the rank's ``CUDA_VISIBLE_DEVICES`` says: an index, a ``GPU-`` or ``MIG-`` UUID.
    device: str
    #: The GPU's NVML index; None: an entry of CUDA_VISIBLE_DEVICES that NVML does not list.
    gpu: int | None
    #: The slice's index among its GPU's MIG devices (``nvidia-smi -L``'s "Device N").
    slice: int | None = None
    profile: str | None = None
    #: Who holds it ("a process", "job 20261206-..."); None: free.
    busy: str | None = None

    @property
    def mig(self) -> bool:
        return self.device.startswith("MIG-")

    def __str__(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else self.device
        if self.slice is None:
            return where
        return f"{where} slice {self.slice} ({self.profile or 'profile unknown'})"

    def with_holder(self) -> str:
        """It, and who holds it: ``GPU 0 slice 0 (3g.40gb, a process)``."""
        text = str(self)
        return f"{text[:-1]}, {self.busy})" if text.endswith(")") else f"{text} ({self.busy})"


class NoRoom(ValueError):
    """The ranks cannot be placed; the message says what is free and what to do."""


def units(
    entries: Sequence[str],
    inventory: Sequence[GpuInfo],
    slices: Mapping[int, Sequence[MigDevice]],
    held: Mapping[str, str],
) -> list[Unit]:
    """The places a job may use: each entry of its visible GPUs (``jobs.env.visible_gpus``)
    as itself, or, for a GPU in MIG mode, as its slices (``slices``, by the GPU's index);
    ``held``: who holds a device (its ``MIG-`` UUID), by a live job's placement."""
    by_index = {info.index: info for info in inventory}
    by_uuid = {info.uuid: info for info in inventory if info.uuid}
    each = {
        index: [_slice(index, device, held) for device in devices if device.uuid]
        for index, devices in slices.items()
    }
    found: list[Unit] = []
    for entry in entries:
        if entry.startswith("MIG-"):  # the kernel was given one slice: that one only
            mine = [unit for group in each.values() for unit in group if unit.device == entry]
            found += mine or [Unit(entry, None, busy=held.get(entry))]
            continue
        info = by_index.get(int(entry)) if entry.isdigit() else by_uuid.get(entry)
        if info is not None and info.mig_mode:
            found += each.get(info.index, [])
        else:
            found.append(Unit(entry, None if info is None else info.index))
    return found


def _slice(index: int, device: MigDevice, held: Mapping[str, str]) -> Unit:
    uuid = str(device.uuid)
    busy = held.get(uuid) or ("a process" if device.processes else None)
    return Unit(uuid, index, device.index, device.profile, busy)


def fits(unit: Unit, mig: str | None) -> bool:
    """Whether ``unit`` is one a job asking for ``mig`` may get (None: anything)."""
    if mig is None:
        return True
    return unit.mig and (mig == ANY or unit.profile == mig)


def involved(found: Sequence[Unit], mig: str | None) -> bool:
    """Whether this job's placement is this module's: it asks for slices, or may use a
    GPU in MIG mode."""
    return mig is not None or any(unit.mig for unit in found)


def default_count(found: Sequence[Unit], mig: str | None) -> int:
    """Ranks when the submitter says nothing: one per free place the job may take (at
    least one, refused then if none is free)."""
    return max(1, sum(1 for unit in found if fits(unit, mig) and unit.busy is None))


def choose(
    found: Sequence[Unit], nproc: int, mig: str | None, *, oversubscribe: bool, override: str
) -> list[Unit] | None:
    """The place of each local rank, in rank order; None where this module has no say
    (``involved``). ``oversubscribe`` shares the free places (or, none free, the busy
    ones) among more ranks; else too few free ones raise ``NoRoom``, naming them."""
    if not involved(found, mig):
        return None
    eligible = [unit for unit in found if fits(unit, mig)]
    if not eligible:
        raise NoRoom(_none_fits(found, mig))
    free = [unit for unit in eligible if unit.busy is None]
    if len(free) >= nproc:
        return free[:nproc]
    if oversubscribe:
        pool = free or eligible
        return [pool[rank % len(pool)] for rank in range(nproc)]
    raise NoRoom(_too_few(found, nproc, mig, free, eligible, override))


def _none_fits(found: Sequence[Unit], mig: str | None) -> str:
    profiles = sorted({unit.profile or "profile unknown" for unit in found if unit.mig})
    if not profiles:
        return f"no GPU this job may use is in MIG mode: no slice {mig} to give its ranks"
    return (
        f"no MIG slice {mig} on the GPUs this job may use: their slices are {', '.join(profiles)}"
    )


def _too_few(
    found: Sequence[Unit],
    nproc: int,
    mig: str | None,
    free: list[Unit],
    eligible: list[Unit],
    override: str,
) -> str:
    if mig is None:
        what = "GPUs or MIG slices" if any(not unit.mig for unit in found) else "MIG slices"
    else:
        what = "MIG slices" + ("" if mig == ANY else f" {mig}")
    ranks = f"{nproc} rank needs 1" if nproc == 1 else f"{nproc} ranks need {nproc}"
    text = f"{ranks} of the {what} (one each), and {_count(len(free))} free"
    text += f": {', '.join(map(str, free))}" if free else ""
    others = [u for u in found if u.busy is None and u.mig and u not in eligible]
    if others:
        text += f"; other free slices: {', '.join(map(str, others))}"
    busy = [unit.with_holder() for unit in eligible if unit.busy is not None]
    if busy:
        text += f"; busy: {', '.join(busy)}"
    fix = f"ask for at most {len(free)}" if free else "wait for one to be freed"
    return f"{text}. {fix.capitalize()}, or pass {override} to share them"


def _count(n: int) -> str:
    return "none is" if n == 0 else ("1 is" if n == 1 else f"{n} are")
