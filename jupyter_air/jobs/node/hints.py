"""Efficiency hints about a running job, from its GPUs' samples and its ranks' output.

Four things a user wants to know without watching a chart: the job's GPUs are mostly
idle (the input pipeline or the CPU is the bottleneck), a GPU's memory is nearly full
(the next larger batch or a fragmentation spike fails), a rank has printed nothing
for a long time while its GPU is idle (likely a hang, e.g. a collective waiting for a
peer), and a rank holds the others back (a straggler, from the ranks' step marks,
``perf.stragglers``: read every ``STRAGGLER_INTERVAL`` seconds, GPUs or not). Each hint
carries the figure behind it.

The supervisor feeds, for every backend, the NVML samples its system metrics take (the
local node's; each Ray node agent's, sent with its polls) and the ranks' last output
times; it writes the current hints to the attempt's hints file (private, replaced
whole), where the kernel's live view and the server's GPU panel read them, and tags the
run with each hint raised (``air.hint.<kind>``). Thresholds come from the environment
the supervisor inherits (see ``Thresholds.from_env``). The recorder sits on the node
side, below the backends and the supervisor, since every backend's nodes feed it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...job_dir import AttemptDir, read_json, replace_json

if TYPE_CHECKING:  # pynvml stays out of the kernel, which reads hints files only
    from ...gpu.nvml import GpuHealth, GpuInfo, GpuReading

log = logging.getLogger(__name__)

TAG_PREFIX = "air.hint."
#: The kind of the hint that names where a likely hang waits (``jobs.hangs``).
HANG_HINT = "hang"
#: The kind of the hint of a rank silent on an idle GPU: a likely hang.
SILENT_HINT = "silent_rank"
#: Seconds between two reads of the ranks' step marks for stragglers.
STRAGGLER_INTERVAL = 5.0

ENV = {
    "idle_util": "AIR_HINT_IDLE_UTILIZATION",
    "idle_window": "AIR_HINT_IDLE_WINDOW",
    "memory_full": "AIR_HINT_MEMORY_FULL",
    "silent_after": "AIR_HINT_SILENT_AFTER",
    "stalled_after": "AIR_HINT_STALLED_AFTER",
}


@dataclass(frozen=True)
class Thresholds:
    #: Mean utilization (%) of the job's GPUs below which they count as idle.
    idle_util: float = 20.0
    #: Seconds of samples the idle hint averages over (and needs before it says anything).
    idle_window: float = 300.0
    #: Memory used (% of the GPU's total) above which a GPU counts as full.
    memory_full: float = 95.0
    #: Seconds without output from a rank whose GPU is idle before it looks hung.
    silent_after: float = 600.0
    #: Seconds without output or a step mark from any rank before their flight
    #: recorders are read for a collective they are stuck in (GPUs or not).
    stalled_after: float = 90.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Thresholds:
        """``$AIR_HINT_IDLE_UTILIZATION`` (%), ``$AIR_HINT_IDLE_WINDOW`` (s),
        ``$AIR_HINT_MEMORY_FULL`` (%), ``$AIR_HINT_SILENT_AFTER`` (s),
        ``$AIR_HINT_STALLED_AFTER`` (s); a value that is not a positive number keeps the
        default."""
        env = os.environ if environ is None else environ
        values: dict[str, float] = {}
        for field, name in ENV.items():
            try:
                value = float(env.get(name, ""))
            except ValueError:
                continue
            if value > 0:
                values[field] = value
        return cls(**values)


@dataclass(frozen=True)
class GpuSample:
    """One reading of one of the job's GPUs."""

    util: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    health: GpuHealth | None = None  # throttling, ECC, retired pages: gpu.faults says them
    max_sm_clock_mhz: int | None = None


@dataclass(frozen=True)
class Hint:
    kind: str  # idle_gpu, memory_full, silent_rank, straggler
    text: str
    value: float  # the figure behind it

    @property
    def tag(self) -> str:
        return TAG_PREFIX + self.kind


class HintWatch:
    """The hints of one attempt, from samples of its GPUs (keyed by NVML index) and the
    ranks' last output times; ``rank_gpus`` says which GPU each rank holds."""

    def __init__(
        self, thresholds: Thresholds, rank_gpus: Mapping[int, int], started: float
    ) -> None:
        self.thresholds = thresholds
        self.rank_gpus = dict(rank_gpus)
        self.gpus = sorted(set(self.rank_gpus.values()))
        self._started = started
        self._samples: deque[tuple[float, dict[int, GpuSample]]] = deque()
        from ...gpu.faults import HardwareWatch  # the supervisor's only: not the kernel's

        self._hardware = HardwareWatch(self.rank_gpus)

    def add(self, t: float, readings: Mapping[int, GpuSample]) -> None:
        """One sample time; samples older than the idle window are dropped."""
        self._samples.append((t, {i: readings[i] for i in self.gpus if i in readings}))
        self._hardware.add(t, readings)
        while self._samples and t - self._samples[0][0] > self.thresholds.idle_window:
            self._samples.popleft()

    def hints(self, now: float, last_output: Mapping[int, float]) -> list[Hint]:
        if not self._samples:
            return []
        found = [self._idle(now), *self._memory(), *self._silent(now, last_output)]
        found += [Hint(*hint) for hint in self._hardware.hints()]
        return [hint for hint in found if hint is not None]

    def _idle(self, now: float) -> Hint | None:
        limits = self.thresholds
        if now - self._started < limits.idle_window:
            return None  # not watched for a whole window yet
        utils = [s.util for _, gpus in self._samples for s in gpus.values() if s.util is not None]
        if not utils:
            return None
        mean = sum(utils) / len(utils)
        if mean >= limits.idle_util:
            return None
        return Hint(
            "idle_gpu",
            f"GPU{_plural(self.gpus)} {_names(self.gpus)} averaged {mean:.0f} % utilization "
            f"over the last {_duration(limits.idle_window)}: likely input-bound "
            "(data loading or CPU work)",
            round(mean, 1),
        )

    def _memory(self) -> list[Hint]:
        _, latest = self._samples[-1]
        hints = []
        for index, sample in sorted(latest.items()):
            if not sample.mem_used_mib or not sample.mem_total_mib:
                continue
            used = sample.mem_used_mib / sample.mem_total_mib * 100
            if used > self.thresholds.memory_full:
                hints.append(
                    Hint(
                        "memory_full",
                        f"GPU {index} memory at {used:.0f} % of "
                        f"{sample.mem_total_mib / 1024:.0f} GiB: near out of memory",
                        round(used, 1),
                    )
                )
        return hints

    def _silent(self, now: float, last_output: Mapping[int, float]) -> list[Hint]:
        _, latest = self._samples[-1]
        hints = []
        for rank, index in sorted(self.rank_gpus.items()):
            silent = now - max(last_output.get(rank, self._started), self._started)
            sample = latest.get(index)
            if silent < self.thresholds.silent_after or sample is None or sample.util is None:
                continue
            if sample.util < self.thresholds.idle_util:
                hints.append(
                    Hint(
                        SILENT_HINT,
                        f"rank {rank} has printed nothing for {_duration(silent)} while "
                        f"GPU {index} is idle ({sample.util:.0f} %): a likely hang",
                        round(silent),
                    )
                )
        return hints


def rank_gpus(cuda_visible: Sequence[str | None] | Mapping[int, str | None]) -> dict[int, int]:
    """Rank -> NVML index, from each rank's ``CUDA_VISIBLE_DEVICES`` (in rank order, or by
    rank); ranks given by a UUID or without a GPU are left out."""
    by_rank = cuda_visible if isinstance(cuda_visible, Mapping) else dict(enumerate(cuda_visible))
    return {
        rank: int(value)
        for rank, value in by_rank.items()
        if value is not None and value.strip().isdigit()
    }


def write_hints(attempt_dir: Path, gpus: Sequence[int], hints: Sequence[Hint], t: float) -> None:
    """Replace the attempt's hints file: the job's GPUs and the hints now raised."""
    doc = {"t": t, "gpus": list(gpus), "hints": [asdict(h) for h in hints]}
    replace_json(AttemptDir(attempt_dir).hints, doc)


def read_hints(attempt_dir: Path) -> dict[str, Any]:
    """The attempt's hints file, or an empty one (none yet, or not a job with hints)."""
    doc = read_json(AttemptDir(attempt_dir).hints)
    if not isinstance(doc, dict):
        return {"gpus": [], "hints": []}
    gpus = [g for g in doc.get("gpus") or [] if isinstance(g, int)]
    hints = [
        h for h in doc.get("hints") or [] if isinstance(h, dict) and isinstance(h.get("text"), str)
    ]
    return {"gpus": gpus, "hints": hints}


def _plural(items: Sequence[Any]) -> str:
    return "s" if len(items) > 1 else ""


def _names(gpus: Sequence[int]) -> str:
    return ", ".join(str(g) for g in gpus)


def _duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class HintRecorder:
    """One attempt's hints as the supervisor keeps them, for every backend: fed with the
    NVML samples each node agent takes for the run's system metrics, once that node's
    ranks are known (``start``), it rewrites the hints file and tags the run once per
    kind raised (through ``tag``, which may be slow or fail). On several nodes each
    hint names its node, and the file lists no GPUs (an index is only a node's)."""

    def __init__(
        self,
        attempt_dir: Path,
        tag: Callable[[str, str], None],
        thresholds: Thresholds | None = None,
        clock: Callable[[], float] = time.time,
        nnodes: int = 1,
        straggler_interval: float = STRAGGLER_INTERVAL,
        marks: Callable[[], Path] | None = None,
        on_stall: Callable[[float], None] | None = None,
    ) -> None:
        self._dir = attempt_dir
        #: Where the ranks' step marks are now: the attempt's, a warm session's cell's.
        self._marks = marks or (lambda: AttemptDir(attempt_dir).perf)
        self._tag = tag
        self._thresholds = thresholds or Thresholds.from_env()
        self._clock = clock
        self._nnodes = nnodes
        self._watches: dict[int, HintWatch] = {}
        self._last_output: dict[int, Callable[[], Mapping[int, float]]] = {}
        self._hints: dict[int, list[Hint]] = {}
        self._tagged: set[str] = set()
        self._stragglers: list[Hint] = []
        self._hang: list[Hint] = []
        #: Told once every rank has been silent ``stalled_after`` seconds, and again each
        #: ``stalled_after`` more they stay silent (a look too early, before the ranks'
        #: recorders could say where they wait, is not the last), with how long.
        self._on_stall = on_stall
        self._started: float | None = None
        self._told_silent: float | None = None
        self._straggler_interval = straggler_interval
        self._lock = threading.Lock()  # the samples' thread and the stragglers' share the file
        self._closed = threading.Event()
        self._poll: threading.Thread | None = None

    def start(
        self,
        rank_gpus: Mapping[int, int],
        last_output: Callable[[], Mapping[int, float]],
        node: int = 0,
    ) -> None:
        """A node's ranks are starting: which GPU each holds, and their last output times."""
        with self._lock:
            self._watches[node] = HintWatch(self._thresholds, rank_gpus, self._clock())
            self._last_output[node] = last_output
            self._started = self._started or self._clock()
            self._write(self._clock())
        if self._poll is None:
            self._poll = threading.Thread(
                target=self._watch_marks, name="air-stragglers", daemon=True
            )
            self._poll.start()

    def close(self) -> None:
        """The attempt is over: its step marks are read no more."""
        self._closed.set()
        if self._poll is not None:
            self._poll.join(self._straggler_interval)

    def on_nvml(self, readings: Sequence[GpuReading], inventory: Mapping[int, GpuInfo]) -> None:
        """A sample of the run's system metrics (``GpuMonitor``'s listener)."""
        self.on_sample(gpu_samples(readings, inventory))

    def on_sample(self, readings: Mapping[int, GpuSample], node: int = 0) -> None:
        watch = self._watches.get(node)
        if watch is None or not watch.gpus:
            return
        now = self._clock()
        watch.add(now, readings)
        hints = watch.hints(now, self._last_output[node]())
        if self._nnodes > 1:
            hints = [Hint(h.kind, f"node {node}: {h.text}", h.value) for h in hints]
        with self._lock:
            self._hints[node] = hints
            self._write(now)
        self._tag_new(hints)

    def hang(self, hint: Hint) -> None:
        """Where a likely hang waits, named by the supervisor from the ranks' recorders:
        in the hints file from now on, and tagged once."""
        with self._lock:
            self._hang = [hint]
            self._write(self._clock())
        self._tag_new([hint])

    def stall_check(self) -> None:
        """Tell ``on_stall`` once no rank has printed or marked a step for
        ``stalled_after`` seconds, then each ``stalled_after`` more till one is heard."""
        if self._on_stall is None or self._started is None:
            return
        heard = [self._started, *(t for out in self._last_output.values() for t in out().values())]
        with contextlib.suppress(OSError):  # a step mark is a rank heard from
            heard += [path.stat().st_mtime for path in self._marks().glob("rank-*.jsonl")]
        silent = self._clock() - max(heard)
        after = self._thresholds.stalled_after
        if silent < after:
            self._told_silent = None
        elif self._told_silent is None or silent >= self._told_silent + after:
            self._told_silent = silent
            self._on_stall(silent)

    def _watch_marks(self) -> None:
        """The stragglers that the ranks' step marks show, and whether every rank went
        silent, until ``close``."""
        from ...perf.stragglers import Watch  # the supervisor's only: not the kernel's

        watch: Watch | None = None
        failing = False
        while not self._closed.wait(self._straggler_interval):
            try:
                self.stall_check()
            except Exception:  # the stragglers are still read
                log.exception("could not tell whether the ranks are silent")
            try:
                folder = self._marks()
                if watch is None or watch.perf_dir != folder:
                    watch = Watch(folder)
                found = [Hint(s.kind, s.text, s.value) for s in watch.update()]
            except Exception as err:  # said once while it lasts; the next read may work
                if not failing:
                    log.warning("could not read the ranks' step marks: %r", err)
                failing = True
                continue
            failing = False
            if found != self._stragglers:
                with self._lock:
                    self._stragglers = found
                    self._write(self._clock())
                self._tag_new(found)

    def _tag_new(self, hints: Sequence[Hint]) -> None:
        """Tag the run with each kind raised for the first time."""
        new: dict[str, Hint] = {}
        with self._lock:
            for hint in hints:
                if hint.kind not in self._tagged:
                    self._tagged.add(hint.kind)
                    new[hint.kind] = hint
        for hint in new.values():
            self._tag(hint.tag, hint.text)

    def _write(self, now: float) -> None:
        gpus = self._watches[0].gpus if self._nnodes == 1 and 0 in self._watches else []
        hints = [h for node in sorted(self._hints) for h in self._hints[node]]
        write_hints(self._dir, gpus, [*self._hang, *hints, *self._stragglers], now)


def gpu_samples(
    readings: Sequence[GpuReading], inventory: Mapping[int, GpuInfo]
) -> dict[int, GpuSample]:
    """One NVML sample of every GPU, as the hints read it."""
    return {
        index: GpuSample(
            r.util,
            r.mem_used_mib,
            info.mem_total_mib if (info := inventory.get(index)) else None,
            r.health,
            info.max_sm_clock_mhz if info else None,
        )
        for index, r in enumerate(readings)
    }
