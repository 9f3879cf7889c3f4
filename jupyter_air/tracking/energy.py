"""A job's GPU energy: NVML's total energy counter where a GPU has one (Volta on), its
power integrated over the samples where it has none, and the figures a run keeps.

The counter is exact (the driver counts every millijoule); integration sees only the
power at each sample and guesses the rest (trapezoids), so a run whose figure holds any
integrated energy says how much of it (``gpu_energy_integrated_kwh``).

Each node's sampler measures its own GPUs (``EnergyMeter``); the supervisor, where every
node's samples meet, makes the run's figures of them (``JobEnergy``): on several nodes
their sum, and with the grid's carbon intensity (``grid_intensity``) the grams of CO2.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..job_dir import AttemptDir
from ..paths import write_private
from . import journal
from .sampling import Sample

log = logging.getLogger(__name__)

J_PER_KWH = 3.6e6
#: The run's metric (MLflow's ``system/`` prefix, ``system/node_N/`` on several nodes).
ENERGY_KWH = "gpu_energy_kwh"
#: The part of it integrated from power samples, logged only where there is such a part.
INTEGRATED_KWH = "gpu_energy_integrated_kwh"
#: Its grams of CO2, logged where the grid's carbon intensity is set.
CO2_GRAMS = "gpu_co2_grams"
#: The grid's carbon intensity (g CO2 per kWh) for the jobs started with it set; it wins
#: over the server's setting, and is ``c.AirMetrics.grams_co2_per_kwh``'s default.
INTENSITY_ENV = "AIR_GRAMS_CO2_PER_KWH"
#: ``c.AirMetrics.grams_co2_per_kwh`` as the Jupyter server last started with it, in the
#: user's AIR_HOME, for every job and ``air`` command of that user, however started.
GRID_FILE = "grid.json"
#: Grams of CO2 per kWh that no grid reaches (coal is about 1000).
MAX_INTENSITY = 10_000.0


def checked_intensity(value: float, where: str) -> float:
    """``value`` as grams of CO2 per kWh, or ValueError naming ``where`` it came from."""
    if not (math.isfinite(value) and 0 <= value < MAX_INTENSITY):
        raise ValueError(f"{where} must be 0..{MAX_INTENSITY:g} g/kWh, got {value:g}")
    return value


def env_grams_co2_per_kwh() -> float | None:
    """``$AIR_GRAMS_CO2_PER_KWH``, or None when unset; ValueError when not a number."""
    text = os.environ.get(INTENSITY_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{INTENSITY_ENV} must be a number of grams per kWh, got {text!r}"
        ) from None
    return checked_intensity(value, INTENSITY_ENV)


def grid_intensity(home: Path) -> float | None:
    """The grid's intensity for a job or command of the user of AIR_HOME ``home``:
    ``$AIR_GRAMS_CO2_PER_KWH`` where set, else the server's setting (``GRID_FILE``), else
    None; ValueError, saying where, for a value that is not one."""
    from_env = env_grams_co2_per_kwh()
    if from_env is not None:
        return from_env
    path = home / GRID_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        value = float(doc["grams_co2_per_kwh"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{path}: not a grid intensity ({err}); the server rewrites it") from None
    return checked_intensity(value, str(path))


def jobs_grid_intensity(home: Path) -> float | None:
    """``grid_intensity`` for a job's run: a bad one costs its CO2 figure only, said in
    the log."""
    try:
        return grid_intensity(home)
    except ValueError as err:
        log.warning("no CO2 figure: %s", err)
        return None


def keep_grid_intensity(home: Path, grams_per_kwh: float | None) -> None:
    """The server's setting where the user's jobs and ``air`` commands read it: written
    (private, replaced whole), or removed when there is none."""
    path = home / GRID_FILE
    if grams_per_kwh is None:
        path.unlink(missing_ok=True)
        return
    temporary = path.with_name(f".{GRID_FILE}.{os.getpid()}")
    try:
        write_private(temporary, json.dumps({"grams_co2_per_kwh": grams_per_kwh}) + "\n")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


_RUN_KEY = re.compile(rf"system/(node_\d+/)?({ENERGY_KWH}|{INTEGRATED_KWH}|{CO2_GRAMS})")


class EnergyMeter:
    """The energy of some GPUs since their first reading, GPU by GPU: the counter's rise
    (a counter that falls, the driver reloaded, starts over from there, keeping what it
    had counted), or, for a GPU that never gave a counter, its power integrated between
    readings."""

    def __init__(self) -> None:
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
        span), the integrated part only where some GPU had no counter."""
        if max(self._readings.values(), default=0) < 2:
            return {}
        if not (self._base_mj or self._integrated_j or self._last_power):
            return {}  # neither a counter nor a power reading: nothing measured
        counted = sum(self._counted_j(index) for index in self._base_mj)
        integrated = sum(self._integrated_j.values())
        figures = {ENERGY_KWH: (counted + integrated) / J_PER_KWH}
        if any(index not in self._base_mj for index in self._last_power) or integrated:
            figures[INTEGRATED_KWH] = integrated / J_PER_KWH
        return figures


#: The figures of a node that its job's sum adds up.
_SUMMED = (ENERGY_KWH, INTEGRATED_KWH)


class JobEnergy:
    """The run's energy figures from its nodes' samples, made where the supervisor
    journals them: each energy figure gets its grams of CO2 where the grid's intensity is
    known; on a job of several nodes, each new node figure also gives a sample of the
    job's (logged under ``system/``): every node's latest figure, summed, so the run's
    ``system/gpu_energy_kwh`` is all its GPUs' energy, as on one node."""

    def __init__(self, nnodes: int, grams_co2_per_kwh: float | None) -> None:
        self._nnodes = nnodes
        self._grams_co2_per_kwh = grams_co2_per_kwh
        self._latest: dict[int, dict[str, float]] = {}
        self._step = 0

    def add(self, node: int, samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
        """``node``'s samples, priced in CO2, and the job's samples they make (none on a
        job of one node, whose node's figures are the job's)."""
        priced = [replace(s, metrics=self._priced(s.metrics)) for s in samples]
        totals: list[Sample] = []
        for sample in priced if self._nnodes > 1 else []:
            figures = {k: v for k, v in sample.metrics.items() if k in _SUMMED}
            if not figures:
                continue
            self._latest[node] = figures
            summed = {
                key: sum(f.get(key, 0.0) for f in self._latest.values())
                for key in _SUMMED
                if any(key in f for f in self._latest.values())
            }
            totals.append(Sample(sample.t, self._step, self._priced(summed)))
            self._step += 1
        return priced, totals

    def _priced(self, metrics: dict[str, float]) -> dict[str, float]:
        if self._grams_co2_per_kwh is None or ENERGY_KWH not in metrics:
            return metrics
        return metrics | {CO2_GRAMS: metrics[ENERGY_KWH] * self._grams_co2_per_kwh}


@dataclass(frozen=True)
class RunEnergy:
    """A run's GPU energy, its nodes summed; ``integrated_kwh``: the part of it that power
    integration guessed (0: all of it counted by the GPUs); ``co2_grams``: as the run
    logged it, or as ``priced`` at an intensity (None: neither)."""

    kwh: float
    integrated_kwh: float
    co2_grams: float | None = None

    def priced(self, grams_per_kwh: float | None) -> RunEnergy:
        """With its grams of CO2 at ``grams_per_kwh`` where the run logged none."""
        if self.co2_grams is not None or grams_per_kwh is None:
            return self
        return replace(self, co2_grams=self.kwh * grams_per_kwh)

    def line(self) -> str:
        """``air get``'s words for it."""
        text = f"{self.kwh:.4g} kWh"
        if self.integrated_kwh:
            text += f" ({self.integrated_kwh:.4g} kWh of it integrated from power samples)"
        else:
            text += " (the GPUs' energy counters)"
        if self.co2_grams is not None:
            text += f", {self.co2_grams:.3g} g CO2"
            if self.kwh > 0:
                text += f" at {self.co2_grams / self.kwh:.4g} g/kWh"
        return text


def _journal_points(files: AttemptDir) -> Iterator[journal.Point]:
    offset = 0
    while lines := journal.read_lines(files.metrics_journal, offset):
        for line in lines:
            yield from line.points
        offset = lines[-1].end


def run_energy(files: AttemptDir) -> RunEnergy | None:
    """An attempt's GPU energy from its journal, or None where no sample measured any:
    each node's last figures summed (a journal from before the job's own sum was logged
    has only those), else the run's own (a job of one node)."""
    nodes: dict[tuple[str, str], float] = {}
    run: dict[str, float] = {}
    for point in _journal_points(files):
        if found := _RUN_KEY.fullmatch(point.key):
            node, name = found.groups()
            if node:
                nodes[node, name] = point.value
            else:
                run[name] = point.value
    if nodes:
        run = {}
        for (_, name), value in nodes.items():
            run[name] = run.get(name, 0.0) + value
    if ENERGY_KWH not in run:
        return None
    return RunEnergy(run[ENERGY_KWH], run.get(INTEGRATED_KWH, 0.0), run.get(CO2_GRAMS))
