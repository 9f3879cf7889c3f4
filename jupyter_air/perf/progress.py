"""How far a job is and how fast it goes, read from its ranks' step marks
(``perf.marks``): the latest step, the planned length, a smoothed step time, the job's
samples and tokens per second, and the ETA.

The step time is the time the leading rank took for its last steps (up to ``WINDOW`` of
them, within ``HORIZON`` seconds) divided by their number: the first step's length (a
warm-up, a compilation) is never in it, a log_metrics cadence of every k steps counts
k steps, and pauses inside the window (an evaluation, a checkpoint) are spread over it
as they will be over the rest of the run. A reader follows a file from where it last
stopped and starts a new file from its tail, so a long job costs no more than a short one.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .marks import parse, rank_files

#: The most recent steps the step time is taken over.
WINDOW = 100
#: The oldest step (seconds before the newest) the step time is taken over.
HORIZON = 600.0
#: How much of a file a new reader starts with: enough for ``WINDOW`` steps.
TAIL_BYTES = 64 * 1024
_CHUNK = 1024 * 1024
_PLAN = b'{"plan":'


@dataclass(frozen=True)
class Rate:
    """One rank's figures over its recent steps."""

    step: int
    step_time_s: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    updated: float


@dataclass(frozen=True)
class Progress:
    """A job's progress, from every rank's marks."""

    step: int  # the latest step marked (the highest over ranks)
    total: int | None  # planned steps; None when unknown
    step_time_s: float | None  # smoothed seconds per step
    samples_per_s: float | None  # the job's, all ranks together
    tokens_per_s: float | None
    eta_s: float | None  # None without total or step time
    updated: float  # time.time() of the latest mark

    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(self.step / self.total, 1.0)

    def line(self, now: float | None = None) -> str:
        """``step 4,210 / 10,000 (42 %), ETA 18:40 (23 min)``; without a planned length,
        ``step 4,210, 3.2 steps/s``. The ETA counts down from the latest mark to ``now``."""
        if self.total is None:
            text = f"step {self.step:,}"
            if self.step_time_s:
                per_s = 1 / self.step_time_s
                rate = f"{per_s:.1f} steps/s" if per_s >= 1 else f"{self.step_time_s:.1f} s/step"
                text += f", {rate}"
            return text
        text = f"step {self.step:,} / {self.total:,} ({int(100 * (self.fraction() or 0))} %)"
        if self.eta_s is None or self.step >= self.total:
            return text
        now = time.time() if now is None else now
        left = max(self.eta_s - max(now - self.updated, 0.0), 0.0)
        ends = datetime.fromtimestamp(now + left)
        clock = ends.strftime("%H:%M")
        if ends.date() != datetime.fromtimestamp(now).date():
            clock = f"{ends:%b} {ends.day} {ends:%H:%M}"
        return f"{text}, ETA {clock} ({duration(left)})"

    def to_json(self) -> dict[str, Any]:
        """The jobs API's ``progress`` object."""
        return {
            "step": self.step,
            "total": self.total,
            "fraction": self.fraction(),
            "step_time_s": self.step_time_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "eta_s": self.eta_s,
            "updated": self.updated,
            "line": self.line(),
        }


def duration(seconds: float) -> str:
    """``45 s``, ``23 min``, ``2 h 05 min``, ``3 d 4 h``."""
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@dataclass
class _File:
    """What was read of one rank's file so far."""

    offset: int = 0
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=WINDOW + 1))
    plan: tuple[float, int] | None = None  # (t, total) of its latest plan line

    def take(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if isinstance(line.get("plan"), int):
                self.plan = (float(line.get("t", 0.0)), line["plan"])
            elif _is_step(line):
                if self.steps and line["s"] <= self.steps[-1]["s"]:
                    self.steps.clear()  # a new numbering (a new training in the rank)
                self.steps.append(line)

    def rate(self) -> Rate | None:
        if not self.steps:
            return None
        steps = list(self.steps)
        last = steps[-1]
        start = next(i for i, line in enumerate(steps) if line["t"] >= last["t"] - HORIZON)
        start = min(start, len(steps) - 2) if len(steps) > 1 else 0
        first, after = steps[start], steps[start + 1 :]
        span, count = last["t"] - first["t"], last["s"] - first["s"]
        if count <= 0 or span <= 0:
            return Rate(last["s"], None, None, None, last["t"])
        return Rate(
            last["s"],
            span / count,
            _per_s(after, "n", first["s"], span),
            _per_s(after, "k", first["s"], span),
            last["t"],
        )


def _is_step(line: dict[str, Any]) -> bool:
    """A step line (``s``, ``t``, ``dt``, ``src``); others' kinds may carry a step too."""
    return (
        isinstance(line.get("s"), int)
        and isinstance(line.get("t"), (int, float))
        and isinstance(line.get("dt"), (int, float))
        and "src" in line
    )


def _per_s(lines: list[dict[str, Any]], key: str, since: int, span: float) -> float | None:
    """Samples (``n``) or tokens (``k``) per second over ``lines``: each line's count
    per step times the steps it stands for."""
    total, previous = 0.0, since
    for line in lines:
        value = line.get(key)
        if not isinstance(value, (int, float)):
            return None
        total += value * (line["s"] - previous)
        previous = line["s"]
    return total / span


class Follower:
    """Reads a job's marks folder as it grows: each ``update`` reads only what the ranks
    appended since the last one."""

    def __init__(self, perf_dir: Path) -> None:
        self.perf_dir = perf_dir
        self._files: dict[int, _File] = {}

    def update(self) -> Progress | None:
        """The job's progress now; None until a step is marked."""
        for rank, path in rank_files(self.perf_dir).items():
            state = self._files.get(rank)
            if state is None:
                state = self._files[rank] = _File()
            try:
                _follow(path, state)
            except OSError:
                continue
        return self.progress()

    def rates(self) -> dict[int, Rate]:
        """Each rank's figures, by global rank (those with a step marked)."""
        return {
            rank: rate for rank, state in self._files.items() if (rate := state.rate()) is not None
        }

    def progress(self) -> Progress | None:
        rates = self.rates()
        if not rates:
            return None
        lead = max(rates.values(), key=lambda r: r.step)
        plans = [state.plan for state in self._files.values() if state.plan is not None]
        total = max(plans)[1] if plans else None
        eta = None
        if total is not None and lead.step_time_s is not None:
            eta = max(total - lead.step, 0) * lead.step_time_s
        return Progress(
            step=lead.step,
            total=total,
            step_time_s=lead.step_time_s,
            samples_per_s=_sum(r.samples_per_s for r in rates.values()),
            tokens_per_s=_sum(r.tokens_per_s for r in rates.values()),
            eta_s=eta,
            updated=max(r.updated for r in rates.values()),
        )


def _sum(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _follow(path: Path, state: _File) -> None:
    """Read what ``path`` gained since ``state.offset``; a first look starts at its tail
    (from a line's start) and finds the latest plan before it."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < state.offset:  # not the file we were reading
            state.offset, state.plan = 0, None
            state.steps.clear()
        if state.offset == 0 and size > TAIL_BYTES:
            f.seek(size - TAIL_BYTES)
            skipped = f.readline()
            state.offset = size - TAIL_BYTES + len(skipped)
            state.plan = _plan_before(f, state.offset)
        f.seek(state.offset)
        lines, used = parse(f.read(size - state.offset))
    state.offset += used
    state.take(lines)


def _plan_before(f: Any, end: int) -> tuple[float, int] | None:
    """The latest plan line that starts before ``end``, read backwards."""
    while end > 0:
        start = max(end - _CHUNK, 0)
        f.seek(start)
        chunk = f.read(end - start + len(_PLAN))  # a plan line may straddle ``end``
        at = chunk.rfind(_PLAN, 0, end - start + len(_PLAN) - 1)  # one starting before it
        if at >= 0:
            f.seek(start + at)
            lines, _ = parse(f.readline())
            state = _File()
            state.take(lines)
            if state.plan is not None:
                return state.plan
            end = start + at
            continue
        end = start
    return None


def read(perf_dir: Path) -> Progress | None:
    """A job's progress from its marks folder; None when no step was marked yet."""
    return Follower(perf_dir).update()
