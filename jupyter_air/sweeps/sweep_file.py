"""The sweep YAML of ``air sweep -f``: a workload file plus what to search and how.

::

    experiment_name: mnist
    command: python train.py          # reads jupyter_air.params()
    compute: {nproc_per_node: 2}
    space:
      lr: {type: float, low: 1.0e-5, high: 0.1, log: true}
      layers: {type: int, low: 1, high: 4}
      optimizer: [adam, sgd]          # a list: categorical
    objective: {minimize: val_loss}   # a metric the trial logs with log_metrics
    trials: 20
    parallel: 2
    sampler: tpe                      # tpe, random, grid
    pruner: median                    # median, hyperband, none; or {name: median, ...}
    storage: sqlite:///studies.db     # optional: the study at this Optuna RDB URL

Checked as workload files are (pydantic, strict, unknown fields refused), each error in
one line naming the field and its line, before anything starts. Optuna is not imported
here: ``space`` turns the checked space into its distributions.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..jobs import workload_file
from ..jobs.workload_file import WorkloadError, WorkloadFile
from . import storage as storage_url

#: The most parameters a space holds (each becomes an MLflow param of every trial).
MAX_PARAMS = 100


class SamplerName(enum.StrEnum):
    TPE = "tpe"
    RANDOM = "random"
    GRID = "grid"


class PrunerName(enum.StrEnum):
    MEDIAN = "median"
    HYPERBAND = "hyperband"
    NONE = "none"


class Direction(enum.StrEnum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FloatParam(_Strict):
    type: Literal["float"]
    # Not strict: PyYAML reads ``1e-5`` (no dot) as text.
    low: float = Field(strict=False)
    high: float = Field(strict=False)
    log: bool = False
    step: float | None = Field(None, gt=0, strict=False)

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log: true needs low above 0, not {self.low}")
        if self.log and self.step is not None:
            raise ValueError("give log: true or a step, not both")
        return self


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and (self.low <= 0 or self.step != 1):
            raise ValueError("log: true needs low above 0 and no step")
        return self


Choice = str | int | float | bool | None


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _distinct(cls, value: list[Choice]) -> list[Choice]:
        seen = [repr(v) for v in value]
        if len(set(seen)) < len(seen):
            raise ValueError("each choice once")
        return value


def _kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):  # a checked one, serialized
        return str(getattr(value, "type", None))
    if isinstance(value, dict):
        kind = value.get("type")
        return kind if kind in ("float", "int", "categorical") else None
    return None


def _choices(value: Any) -> Any:
    """A list stands for its choices (``optimizer: [adam, sgd]``)."""
    return {"type": "categorical", "choices": value} if isinstance(value, list) else value


Param = Annotated[
    Annotated[FloatParam, Tag("float")]
    | Annotated[IntParam, Tag("int")]
    | Annotated[CategoricalParam, Tag("categorical")],
    Discriminator(
        _kind,
        custom_error_type="param",
        custom_error_message="expected {type: float|int|categorical, ...} or a list of choices",
    ),
    BeforeValidator(_choices),
]


class Objective(_Strict):
    """The metric a trial logs (``log_metrics``) and which way is better."""

    minimize: str | None = Field(None, min_length=1)
    maximize: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> Objective:
        if (self.minimize is None) == (self.maximize is None):
            raise ValueError("give exactly one of minimize: METRIC or maximize: METRIC")
        return self

    @property
    def metric(self) -> str:
        return self.minimize or self.maximize or ""

    @property
    def direction(self) -> Direction:
        return Direction.MINIMIZE if self.minimize is not None else Direction.MAXIMIZE


class Pruner(_Strict):
    """When a trial is stopped early, from the objective's points as it logs them."""

    name: PrunerName = Field(PrunerName.MEDIAN, strict=False)
    #: median: trials that finish before any is pruned, and steps before a trial may be.
    n_startup_trials: int = Field(5, ge=0)
    n_warmup_steps: int = Field(0, ge=0)
    #: hyperband: the smallest and largest step a trial is judged at.
    min_resource: int = Field(1, ge=1)
    max_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(3, ge=2)


class SweepFile(WorkloadFile):
    """A workload and its search."""

    objective: Objective
    sampler: SamplerName = Field(SamplerName.TPE, strict=False)
    pruner: Pruner = Field(default_factory=lambda: Pruner.model_validate({"name": "none"}))
    trials: int = Field(ge=1, le=10_000, description="how many trials in all")
    parallel: int = Field(1, ge=1, le=256, description="trials running at once")
    seed: int | None = Field(None, description="the sampler's seed, for a search that repeats")
    space: dict[str, Param] = Field(min_length=1, max_length=MAX_PARAMS)
    storage: str | None = Field(
        None,
        min_length=1,
        description="an Optuna RDB URL the study lives at (sqlite:///PATH, relative to "
        "working_dir; postgresql://...); by default AIR_HOME's own",
    )

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                storage_url.parse(value)
            except storage_url.BadStorage as err:
                raise ValueError(str(err)) from None
        return value

    @field_validator("pruner", mode="before")
    @classmethod
    def _pruner_name(cls, value: Any) -> Any:
        """``pruner: median`` is ``pruner: {name: median}``."""
        return {"name": value} if isinstance(value, str) else value

    @field_validator("space")
    @classmethod
    def _space(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for name in value:
            if not name or not name.isidentifier():
                raise ValueError(f"{name!r}: a parameter's name is a Python identifier")
        if info.data.get("sampler") is SamplerName.GRID:
            for name, param in value.items():
                if isinstance(param, FloatParam) and param.step is None:
                    raise ValueError(
                        f"{name}: sampler grid needs every value listed: give the float a "
                        "step, or its choices"
                    )
        return value

    @property
    def direction(self) -> Direction:
        return self.objective.direction


def load(path: Path) -> SweepFile:
    """Read and validate a sweep file; a bad field raises ``WorkloadError`` in one line."""
    node, data = workload_file.read_mapping(path, "space: {lr: {type: float, ...}}")
    try:
        return SweepFile.model_validate(data)
    except ValidationError as err:
        raise WorkloadError(f"{path}: " + workload_file.describe(err, _where(node))) from None


def from_dict(
    doc: dict[str, Any], name: Callable[[str], str] = str, model: type[SweepFile] = SweepFile
) -> SweepFile:
    """A sweep given as data (the kernel, a schedule's task as ``model``): errors name
    the fields without lines, each dotted field as ``name`` says it (the magic's flags)."""
    try:
        return model.model_validate(doc)
    except ValidationError as err:
        raise WorkloadError(
            workload_file.describe(err, lambda loc: name(_dotted(_named(loc))))
        ) from None


def _where(node: yaml.Node | None) -> Any:
    def where(loc: tuple[Any, ...]) -> str:
        return workload_file._where(_named(loc), node)

    return where


def _named(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The field's path without pydantic's union tags (``space.lr.float.low`` is
    ``space.lr.low``)."""
    if len(loc) > 2 and loc[0] == "space" and loc[2] in ("float", "int", "categorical"):
        return (*loc[:2], *loc[3:])
    return loc


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(map(str, loc))
