"""Which rank holds the others back, and where its time goes: read from every rank's
step marks (``perf.marks``), whose steps ``perf.phases`` split into waiting for data,
compute and waiting in collectives.

A rank straggles when, over the latest steps that every rank marked (up to
``Rule.window``, at least ``Rule.min_steps``), its time in one phase is above
``Rule.ratio`` times the median of the other ranks' on most of those steps
(``Rule.share``), by enough of a step to matter (``Rule.excess``). Step by step, not on
averages: a few slow steps (a checkpoint, a pause) make no straggler, and the median of
the others leaves one odd peer out.

Waiting in collectives is never what a rank is blamed for: the rank that comes last to
a collective waits least, so a rank waiting longer than the others waits for them; their
long waits are how a straggler shows. A slow rank's compute is then said more closely
from its notes (``cs``): its backward pass, its optimizer's step, or the rest.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .marks import Phase, parse, rank_files

#: The phases a rank can be blamed for, and how a hint says them: the others' what, and
#: (where the others spend next to nothing in it) what the rank does a step.
BLAMED = {
    Phase.DATA: ("wait for data", "waiting for data"),
    Phase.COMPUTE: ("compute", "in compute"),
}
#: Where in its compute (``perf.phases.Place``), as a hint says it.
PARTS = {"backward": "backward", "optimizer": "optimizer step", "other": "forward and the rest"}


@dataclass(frozen=True)
class Rule:
    #: The latest steps looked at.
    window: int = 200
    #: Fewer steps marked by every rank: nothing is said yet.
    min_steps: int = 20
    #: The rank's time over the others' median, on a step where it is slower.
    ratio: float = 1.25
    #: The share of the steps where it must be slower.
    share: float = 0.8
    #: The least excess over the others, as a share of the step's time.
    excess: float = 0.1


@dataclass(frozen=True)
class Straggler:
    """A rank slower than the others in ``phase``: ``mine`` and ``theirs`` are its and
    the others' median seconds a step, over ``steps`` steps."""

    rank: int
    phase: Phase
    part: str | None  # where in the compute (a key of PARTS), when known
    mine: float
    theirs: float
    steps: int

    #: The hint's kind (``jobs.node.hints``: the run's tag ``air.hint.straggler``).
    kind = "straggler"

    @property
    def value(self) -> float:
        """The figure behind the hint: seconds a step above the others."""
        return round(self.mine - self.theirs, 4)

    @property
    def text(self) -> str:
        noun, doing = BLAMED[self.phase]
        where = f" ({PARTS.get(self.part, self.part)})" if self.part is not None else ""
        if self.theirs > 0 and self.mine / self.theirs < 100:
            return (
                f"rank {self.rank}: {self.mine / self.theirs:.1f}x the others' {noun}{where} "
                f"for the last {self.steps} steps ({_seconds(self.mine)} vs "
                f"{_seconds(self.theirs)} a step)"
            )
        return (
            f"rank {self.rank}: {_seconds(self.mine)} a step {doing}{where}, the others "
            f"{_seconds(self.theirs)}, for the last {self.steps} steps"
        )


@dataclass(frozen=True)
class Split:
    """One step of one rank: its seconds by phase, and its length."""

    phases: Mapping[str, float]
    dt: float


class _RankMarks:
    """What has been read of one rank's marks file: its latest steps and notes."""

    def __init__(self, keep: int) -> None:
        self.offset = 0
        self.keep = keep
        self.steps: dict[int, Split] = {}
        self.parts: dict[int, Mapping[str, float]] = {}

    def add(self, line: Mapping[str, Any]) -> None:
        step = line.get("s")
        if not isinstance(step, int):
            return
        if "cs" in line:
            if (parts := _seconds_by_key(line["cs"])) is not None:
                _keep(self.parts, step, parts, self.keep)
            return
        phases, dt = _seconds_by_key(line.get("ph")), line.get("dt")
        if phases is None or not isinstance(dt, int | float):
            return
        if self.steps and step <= next(reversed(self.steps)):  # counted again from here
            self.steps.clear()
            self.parts.clear()
        _keep(self.steps, step, Split(phases, float(dt)), self.keep)


class Watch:
    """The stragglers of one job, from its marks folder, read as its files grow."""

    def __init__(self, perf_dir: Path, rule: Rule | None = None) -> None:
        self.perf_dir = perf_dir
        self.rule = rule or Rule()
        self._ranks: dict[int, _RankMarks] = {}

    def update(self) -> list[Straggler]:
        """Read what the ranks appended since, and say who straggles now."""
        for rank, path in rank_files(self.perf_dir).items():
            seen = self._ranks.setdefault(rank, _RankMarks(2 * self.rule.window))
            try:
                with path.open("rb") as f:
                    f.seek(seen.offset)
                    data = f.read()
            except OSError:
                continue
            lines, used = parse(data)
            seen.offset += used
            for line in lines:
                seen.add(line)
        steps = {rank: seen.steps for rank, seen in self._ranks.items()}
        parts = {rank: seen.parts for rank, seen in self._ranks.items()}
        return find(steps, parts, self.rule)


def find(
    steps: Mapping[int, Mapping[int, Split]],
    parts: Mapping[int, Mapping[int, Mapping[str, float]]],
    rule: Rule,
) -> list[Straggler]:
    """The stragglers among ``steps`` (rank -> step number -> split), the slowest first;
    ``parts`` (rank -> step -> compute by place) says where in their compute."""
    ranks = sorted(rank for rank, marked in steps.items() if marked)
    if len(ranks) < 2:
        return []
    common = sorted(set.intersection(*(set(steps[rank]) for rank in ranks)))[-rule.window :]
    if len(common) < rule.min_steps:
        return []
    found: dict[int, Straggler] = {}
    for phase in BLAMED:
        table = [[steps[rank][s].phases.get(phase, 0.0) for rank in ranks] for s in common]
        others = [_others_medians(row) for row in table]
        lengths = [statistics.median(steps[rank][s].dt for rank in ranks) for s in common]
        for i, rank in enumerate(ranks):
            mine, theirs = _slower(table, others, lengths, i, rule)
            if mine is None or theirs is None:
                continue
            best = found.get(rank)
            if best is None or mine - theirs > best.mine - best.theirs:
                part = _part(parts, ranks, i, common) if phase is Phase.COMPUTE else None
                found[rank] = Straggler(rank, phase, part, mine, theirs, len(common))
    return sorted(found.values(), key=lambda s: s.theirs - s.mine)


def _slower(
    table: Sequence[Sequence[float]],
    others: Sequence[Sequence[float]],
    lengths: Sequence[float],
    i: int,
    rule: Rule,
) -> tuple[float | None, float | None]:
    """Rank ``i``'s and the others' median seconds, when it is slower on enough steps
    (``others``: each step's medians of the others, by rank)."""
    mine = [row[i] for row in table]
    theirs = [row[i] for row in others]
    slower = sum(
        1
        for value, median, length in zip(mine, theirs, lengths, strict=True)
        if value > rule.ratio * median and value - median > rule.excess * length
    )
    if slower < rule.share * len(table):
        return None, None
    return statistics.median(mine), statistics.median(theirs)


def _part(
    parts: Mapping[int, Mapping[int, Mapping[str, float]]],
    ranks: Sequence[int],
    i: int,
    common: Sequence[int],
) -> str | None:
    """Where rank ``i``'s compute exceeds the others' most, over the steps all noted."""
    noted = [s for s in common if all(s in parts.get(rank, {}) for rank in ranks)]
    if not noted:
        return None
    keys = sorted({key for rank in ranks for s in noted for key in parts[rank][s]})
    excess = {
        key: statistics.median(
            row[i] - _others_medians(row)[i]
            for row in ([parts[rank][s].get(key, 0.0) for rank in ranks] for s in noted)
        )
        for key in keys
    }
    key = max(excess, key=lambda k: excess[k], default=None)
    return key if key is not None and excess[key] > 0 else None


def _others_medians(row: Sequence[float]) -> list[float]:
    """For each value of ``row``, the median of the others: one sort for them all."""
    n = len(row)
    order = sorted(range(n), key=row.__getitem__)
    ranked = [row[j] for j in order]
    where = [0] * n
    for position, j in enumerate(order):
        where[j] = position
    low, high = (n - 2) // 2, (n - 1) // 2  # the middle of n - 1 values

    def without(k: int, position: int) -> float:  # the k-th of the others
        return ranked[k if k < position else k + 1]

    return [(without(low, p) + without(high, p)) / 2 for p in where]


def _seconds_by_key(value: Any) -> dict[str, float] | None:
    if not isinstance(value, dict):
        return None
    return {k: float(v) for k, v in value.items() if isinstance(v, int | float)}


def _keep(into: dict[int, Any], step: int, value: Any, keep: int) -> None:
    into[step] = value
    while len(into) > keep:
        del into[next(iter(into))]


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    ms = value * 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms" if ms >= 1 else f"{ms:.2f} ms"
