"""A job's GPU energy: NVML's total energy counter where a GPU has one (Volta on), its
power integrated over the samples where it has none, and the figure a run keeps.

The counter is exact (the driver counts every millijoule); integration sees only the
power at each sample and guesses the rest (trapezoids), so a run whose figure holds any
integrated energy says how much of it (``gpu_energy_integrated_kwh``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..job_dir import AttemptDir
from . import journal

J_PER_KWH = 3.6e6
#: The run's metric (MLflow's ``system/`` prefix, ``system/node_N/`` on several nodes).
ENERGY_KWH = "gpu_energy_kwh"
#: The part of it integrated from power samples, logged only where there is such a part.
INTEGRATED_KWH = "gpu_energy_integrated_kwh"
#: Its grams of CO2, logged where the grid's carbon intensity is set.
CO2_GRAMS = "gpu_co2_grams"
#: The grid's carbon intensity (g CO2 per kWh); ``c.AirMetrics.grams_co2_per_kwh``'s default.
INTENSITY_ENV = "AIR_GRAMS_CO2_PER_KWH"


def env_grams_co2_per_kwh() -> float | None:
    """``$AIR_GRAMS_CO2_PER_KWH``, or None when unset; ValueError when not a number."""
    text = os.environ.get(INTENSITY_ENV, "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"{INTENSITY_ENV} must be a number of grams per kWh, got {text!r}"
        ) from None


_RUN_KEY = re.compile(rf"system/(?:node_\d+/)?({ENERGY_KWH}|{INTEGRATED_KWH})")


class EnergyMeter:
    """The energy of some GPUs since their first reading, GPU by GPU: the counter's rise
    (a counter that falls, the driver reloaded, starts over from there, keeping what it
    had counted), or, for a GPU that never gave a counter, its power integrated between
    readings."""

    def __init__(self, grams_co2_per_kwh: float | None = None) -> None:
        self._grams_co2_per_kwh = grams_co2_per_kwh
        self._base_mj: dict[int, int] = {}
        self._last_mj: dict[int, int] = {}
        self._carried_j: dict[int, float] = {}
        self._integrated_j: dict[int, float] = {}
        self._last_power: dict[int, tuple[float, float]] = {}
        self._readings: dict[int, int] = {}

    def add(self, index: int, t: float, energy_mj: int | None, power_w: float | None) -> None:
        """One reading of GPU ``index`` at ``t`` (seconds, one monotonic clock)."""
        self._readings[index] = self._readings.get(index, 0) + 1
        if energy_mj is not None:
            last = self._last_mj.get(index)
            if last is not None and energy_mj < last:  # the counter restarted
                self._carried_j[index] = self._counted_j(index)
                self._base_mj[index] = energy_mj
            self._base_mj.setdefault(index, energy_mj)
            self._last_mj[index] = energy_mj
        elif power_w is not None and index not in self._base_mj:
            before = self._last_power.get(index)
            if before is not None:
                step = (before[1] + power_w) / 2 * (t - before[0])
                self._integrated_j[index] = self._integrated_j.get(index, 0.0) + step
        if power_w is None:
            self._last_power.pop(index, None)  # no guess across a gap in the power
        else:
            self._last_power[index] = (t, power_w)

    def _counted_j(self, index: int) -> float:
        counted = (self._last_mj[index] - self._base_mj[index]) / 1000
        return self._carried_j.get(index, 0.0) + counted

    def metrics(self) -> dict[str, float]:
        """The figures a sample carries: none before a second reading (one reading has no
        span), the integrated part only where some GPU had no counter, the grams of CO2
        where the grid's intensity is known."""
        if max(self._readings.values(), default=0) < 2:
            return {}
        if not (self._base_mj or self._integrated_j or self._last_power):
            return {}  # neither a counter nor a power reading: nothing measured
        counted = sum(self._counted_j(index) for index in self._base_mj)
        integrated = sum(self._integrated_j.values())
        figures = {ENERGY_KWH: (counted + integrated) / J_PER_KWH}
        if any(index not in self._base_mj for index in self._last_power) or integrated:
            figures[INTEGRATED_KWH] = integrated / J_PER_KWH
        if self._grams_co2_per_kwh is not None:
            figures[CO2_GRAMS] = figures[ENERGY_KWH] * self._grams_co2_per_kwh
        return figures


@dataclass(frozen=True)
class RunEnergy:
    """A run's GPU energy, its nodes summed; ``integrated_kwh``: the part of it that power
    integration guessed (0: all of it counted by the GPUs)."""

    kwh: float
    integrated_kwh: float

    def co2_grams(self, grams_per_kwh: float) -> float:
        return self.kwh * grams_per_kwh

    def line(self, grams_per_kwh: float | None = None) -> str:
        """``air get``'s words for it."""
        text = f"{self.kwh:.4g} kWh"
        if self.integrated_kwh:
            text += f" ({self.integrated_kwh:.4g} kWh of it integrated from power samples)"
        else:
            text += " (the GPUs' energy counters)"
        if grams_per_kwh is not None:
            text += f", {self.co2_grams(grams_per_kwh):.3g} g CO2 at {grams_per_kwh:g} g/kWh"
        return text


def _journal_points(files: AttemptDir) -> Iterator[journal.Point]:
    offset = 0
    while lines := journal.read_lines(files.metrics_journal, offset):
        for line in lines:
            yield from line.points
        offset = lines[-1].end


def run_energy(files: AttemptDir) -> RunEnergy | None:
    """An attempt's GPU energy from its journal (each node's last figure, summed), or None
    where no sample measured any."""
    last: dict[str, float] = {}
    for point in _journal_points(files):
        if _RUN_KEY.fullmatch(point.key):
            last[point.key] = point.value
    if not last:
        return None
    kwh = sum(v for k, v in last.items() if k.endswith(ENERGY_KWH))
    integrated = sum(v for k, v in last.items() if k.endswith(INTEGRATED_KWH))
    return RunEnergy(kwh, integrated)
