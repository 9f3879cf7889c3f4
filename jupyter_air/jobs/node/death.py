"""Why a rank died, in words one can act on: "rank 1 was killed by the out-of-memory
killer", "rank 1 crashed: SIGSEGV (a segmentation fault, in native code) at
train.py:12 in step", "rank 1 ran out of memory (MemoryError)".

The evidence is what the machine keeps: the exit signal; the rank's memory cgroup
(cgroup v2's ``memory.events``, v1's ``memory.oom_control``), whose ``oom_kill`` count
grows when the kernel's OOM killer takes one of its processes, looked at while the rank
runs (its cgroup is gone from ``/proc`` once it exits) with its resident memory; and
the rank's last lines, where Python's ``faulthandler`` (on in every rank,
``PYTHONFAULTHANDLER``) printed the frame of a native crash; and the XID critical errors
NVML's event set delivered for the rank's GPU while it ran (``XidLook``): one shortly
before the death names it, "rank 3 exited -6 (SIGABRT); GPU 3 reported XID 79 (fallen off
the bus) at 14:05:12".
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .hints import rank_gpus

if TYPE_CHECKING:  # NVML only where a rank holds a GPU
    from ...gpu.faults import XidWatch
    from ...gpu.nvml import XidEvent
    from .launch import RankSpec

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: A limit this large is no limit (cgroup v1 writes "unlimited" as a page-rounded max).
NO_LIMIT = 1 << 60

CRASHES = {
    signal.SIGSEGV: "a segmentation fault, in native code",
    signal.SIGBUS: "a bus error, in native code",
    signal.SIGILL: "an illegal instruction, in native code",
    signal.SIGFPE: "a floating-point exception, in native code",
    signal.SIGABRT: "an abort: a failed check in native code, or abort()",
}
#: Seconds before a death in which an XID of the rank's GPU counts as its cause.
XID_BEFORE = 120.0
#: Seconds after it (the driver may report the fault as the rank dies of it).
XID_AFTER = 5.0
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


@dataclass
class _Seen:
    cgroup: Path | None = None
    rss: int | None = None
    #: ``oom_kill`` of each cgroup the rank was seen in, when first seen there.
    oom_before: dict[Path, int] = field(default_factory=dict)


class MemoryWatch:
    """What the ranks' memory looked like while they ran, looked at now and then."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}

    def look(self, rank: int, pid: int) -> None:
        seen = self._seen.setdefault(rank, _Seen())
        cgroup = memory_cgroup(pid)
        if cgroup is not None:
            seen.cgroup = cgroup
            if cgroup not in seen.oom_before:
                count = oom_kills(cgroup)
                if count is not None:
                    seen.oom_before[cgroup] = count
        rss = _rss(pid)
        if rss is not None:
            seen.rss = rss

    def oom_killed(self, rank: int) -> tuple[Path, int, int] | None:
        """The cgroup whose OOM killer count grew since the rank was seen in it."""
        seen = self._seen.get(rank)
        for cgroup, before in seen.oom_before.items() if seen else ():
            now = oom_kills(cgroup)
            if now is not None and now > before:
                return cgroup, before, now
        return None

    def rss(self, rank: int) -> int | None:
        seen = self._seen.get(rank)
        return seen.rss if seen else None


class XidLook:
    """The XID critical errors of the ranks' GPUs while they run (``gpu.faults.XidWatch``,
    on a thread of its own); nothing at all where no rank holds a GPU."""

    def __init__(self, gpus: Mapping[int, int]) -> None:
        self._gpus = dict(gpus)
        self._watch: XidWatch | None = None

    @classmethod
    def of(cls, specs: Sequence[RankSpec]) -> XidLook:
        """For these ranks, each on the GPU its ``CUDA_VISIBLE_DEVICES`` names."""
        return cls(rank_gpus({s.rank: s.env.get("CUDA_VISIBLE_DEVICES") for s in specs}))

    def start(self) -> None:
        if self._gpus and self._watch is None:
            from ...gpu.faults import XidWatch

            self._watch = XidWatch().start()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop(timeout=0)  # it ends at its next wake, within a second

    def near(self, rank: int, t: float | None) -> list[XidEvent]:
        """The XIDs of ``rank``'s GPU from ``XID_BEFORE`` seconds before unix time ``t``
        to ``XID_AFTER`` after it, once those up to ``t`` are surely received."""
        index = self._gpus.get(rank)
        if self._watch is None or index is None or t is None:
            return []
        self._watch.caught_up(t, timeout=XID_AFTER)
        return [e for e in self._watch.events(index, since=t - XID_BEFORE) if e.t <= t + XID_AFTER]


def explain(
    rank: int,
    code: int | None,
    last_lines: Iterable[str],
    memory: MemoryWatch,
    xids: Sequence[XidEvent] = (),
) -> str:
    """The one line of a rank's death (its exit, when it merely exited non-zero)."""
    lines = list(last_lines)
    oom = code is not None and code < 0 and memory.oom_killed(rank) is not None
    if xids and not oom:
        from ...gpu.faults import clock_time, xid_text

        said = ", ".join(f"{xid_text(e.xid)} at {clock_time(e.t)}" for e in xids)
        return f"rank {rank} exited {_exit(code)}; GPU {xids[-1].index} reported {said}"
    if code is not None and code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"rank {rank} was killed by signal {-code}"
        if sig is signal.SIGKILL and (killed := memory.oom_killed(rank)) is not None:
            cgroup, before, after = killed
            rss = memory.rss(rank)
            limit = memory_limit(cgroup)
            said = f"rank {rank} was killed by the out-of-memory killer (SIGKILL)"
            facts = []
            if rss is not None:
                facts.append(f"{_size(rss)} resident at its last look")
            if limit is not None:
                facts.append(f"limit {_size(limit)}")
            facts.append(f"{_shown(cgroup)}: oom_kill {before} -> {after}")
            return f"{said}: {', '.join(facts)}"
        if sig in CRASHES:
            where = crash_frame(lines)
            return f"rank {rank} crashed: {sig.name} ({CRASHES[sig]})" + (
                f" at {where}" if where else ""
            )
        return f"rank {rank} was killed by {sig.name}"
    if any(line.startswith("MemoryError") for line in lines[-5:]):
        return f"rank {rank} ran out of memory (MemoryError), exit code {code}"
    return f"rank {rank} exited with code {code}"


def _exit(code: int | None) -> str:
    """``-6 (SIGABRT)``, ``1``."""
    if code is not None and code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)


def crash_frame(lines: list[str]) -> str | None:
    """Where faulthandler's report says the crash was: the innermost frame of the user's
    code, with the library frame under it (``train.py:12 in step (in string_at,
    ctypes/__init__.py:519)``). With several threads, faulthandler lists each; the
    crash is in the one it calls the current thread."""
    start = max((i for i, line in enumerate(lines) if "Fatal Python error" in line), default=None)
    if start is None:
        return None
    report = lines[start:]
    current = next((i for i, line in enumerate(report) if line.startswith("Current thread")), None)
    if current is not None:
        block = report[current + 1 :]
        end = next((i for i, line in enumerate(block) if not _FRAME.match(line)), len(block))
        report = block[:end]
    frames = [m for line in report if (m := _FRAME.match(line))]
    if not frames:
        return None
    inner = frames[0]
    mine = next((m for m in frames if not _library(m["file"])), inner)
    said = f"{Path(mine['file']).name}:{mine['line']} in {mine['fn']}"
    if mine is not inner:
        path = Path(inner["file"])
        said += f" (in {inner['fn']}, {path.parent.name}/{path.name}:{inner['line']})"
    return said


def _library(path: str) -> bool:
    """A frame of Python's own library or of an installed package, not of the user's."""
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return "site-packages" in path or any(path.startswith(root + os.sep) for root in roots)


def memory_cgroup(pid: int) -> Path | None:
    """The directory of ``pid``'s memory cgroup (v2's unified one, or v1's memory)."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / path.lstrip("/")
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/")
    return None


def oom_kills(cgroup: Path) -> int | None:
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (cgroup / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def memory_limit(cgroup: Path) -> int | None:
    for name in ("memory.max", "memory.limit_in_bytes"):
        try:
            value = (cgroup / name).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < NO_LIMIT:
            return int(value)
        return None
    return None


def _rss(pid: int) -> int | None:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1024:.0f} KiB"


def _shown(cgroup: Path) -> str:
    """``cgroup /airtest`` (v1's memory hierarchy, or v2's one)."""
    relative = cgroup.relative_to(CGROUP_ROOT)
    if relative.parts[:1] == ("memory",):
        relative = Path(*relative.parts[1:]) if len(relative.parts) > 1 else Path()
    return f"cgroup /{relative.as_posix().removeprefix('.')}"
