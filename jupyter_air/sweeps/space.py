"""A checked sweep in Optuna's terms: its distributions, sampler and pruner.

The only module besides ``store`` and ``driver`` that imports Optuna.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from .sweep_file import (
    CategoricalParam,
    Direction,
    FloatParam,
    IntParam,
    PrunerName,
    SamplerName,
    SweepFile,
)


def distributions(spec: SweepFile) -> dict[str, BaseDistribution]:
    """Each parameter's distribution, in the file's order."""
    found: dict[str, BaseDistribution] = {}
    for name, p in spec.space.items():
        if isinstance(p, FloatParam):
            found[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            found[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        else:
            found[name] = CategoricalDistribution(p.choices)
    return found


def grid(spec: SweepFile) -> dict[str, list[Any]]:
    """Every value of each parameter (``sampler: grid``; a float has a step there)."""
    values: dict[str, list[Any]] = {}
    for name, p in spec.space.items():
        if isinstance(p, CategoricalParam):
            values[name] = list(p.choices)
        elif isinstance(p, IntParam):
            values[name] = list(range(p.low, p.high + 1, p.step))
        else:
            assert p.step is not None  # the file's check
            count = round((p.high - p.low) / p.step) + 1
            values[name] = [min(p.low + i * p.step, p.high) for i in range(count)]
    return values


def grid_size(spec: SweepFile) -> int:
    return len(list(itertools.product(*grid(spec).values())))


def planned(spec: SweepFile) -> int:
    """How many trials the sweep runs: ``trials``, or fewer where a grid has fewer points
    (a grid visited twice would run a trial twice)."""
    if spec.sampler is SamplerName.GRID:
        return min(spec.trials, grid_size(spec))
    return spec.trials


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid, without its wish to end ``study.optimize`` once every point was
    asked (an error outside that loop): the driver runs no loop of Optuna's, and stops at
    the grid's size (``planned``)."""

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        return None


def sampler(spec: SweepFile) -> optuna.samplers.BaseSampler:
    if spec.sampler is SamplerName.GRID:
        return _Grid(grid(spec), seed=spec.seed)
    if spec.sampler is SamplerName.RANDOM:
        return optuna.samplers.RandomSampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed)


def pruner(spec: SweepFile) -> optuna.pruners.BasePruner:
    p = spec.pruner
    if p.name is PrunerName.MEDIAN:
        return optuna.pruners.MedianPruner(
            n_startup_trials=p.n_startup_trials, n_warmup_steps=p.n_warmup_steps
        )
    if p.name is PrunerName.HYPERBAND:
        return optuna.pruners.HyperbandPruner(
            min_resource=p.min_resource,
            max_resource=p.max_resource,
            reduction_factor=p.reduction_factor,
        )
    return optuna.pruners.NopPruner()


def direction(spec: SweepFile) -> optuna.study.StudyDirection:
    if spec.direction is Direction.MINIMIZE:
        return optuna.study.StudyDirection.MINIMIZE
    return optuna.study.StudyDirection.MAXIMIZE
