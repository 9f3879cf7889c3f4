"""The schedule YAML (the managed product's words), validated as ``air run -f`` files are.

pydantic checks the fields (unknown ones refused); the rules across fields (one cron
form, a valid cron and time zone, task keys unique, ``depends_on`` naming known tasks
without a cycle) follow. A task's ``workload:`` is what ``air run -f`` takes, and its
``sweep:`` what ``air sweep -f`` takes (each firing starts a new sweep), inline or
``file:`` relative to the schedule file; their fields are read in and checked now, and a
``notebook:`` is snapshotted now, so later edits of those files change nothing until
``update``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..jobs import workload_file
from ..jobs.permissions import BadGrant, merged, parse_grant
from ..jobs.workload_file import WorkloadError, WorkloadFile, check_targets
from ..notify.targets import BadTarget, parse_all
from ..sweeps import storage as storage_url
from ..sweeps import sweep_file
from ..sweeps.sweep_file import SweepFile
from .cron import Cron, CronError, Dialect, parse
from .model import CatchUp, PauseStatus, RunIf, ScheduleSpec, TaskSpec

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
TASK_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


class ScheduleFileError(ValueError):
    """The schedule cannot be used; nothing was created or changed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CronBlock(_Strict):
    quartz_cron_expression: str | None = Field(None, description="seconds first, '?' in a day")
    cron: str | None = Field(None, description="the 5-field Unix form")
    timezone_id: str = "UTC"
    pause_status: Literal["UNPAUSED", "PAUSED"] = "UNPAUSED"

    @model_validator(mode="after")
    def _one_form(self) -> CronBlock:
        if (self.quartz_cron_expression is None) == (self.cron is None):
            raise ValueError("schedule: give exactly one of quartz_cron_expression or cron")
        try:
            self.parsed()
        except CronError as err:
            raise ValueError(f"schedule: {err}") from None
        return self

    def parsed(self) -> Cron:
        if self.quartz_cron_expression is not None:
            return parse(self.quartz_cron_expression, Dialect.QUARTZ, self.timezone_id)
        assert self.cron is not None
        return parse(self.cron, Dialect.UNIX, self.timezone_id)


class DependsOn(_Strict):
    task_key: str


class TaskWorkload(WorkloadFile):
    """An inline workload: a workload file's fields; its experiment may come from the
    task or the schedule instead."""

    experiment_name: str | None = Field(None, min_length=1)  # type: ignore[assignment]


class TaskSweep(SweepFile):
    """An inline sweep: a sweep file's fields; its experiment may come from the task or
    the schedule instead."""

    experiment_name: str | None = Field(None, min_length=1)  # type: ignore[assignment]


class TaskModel(_Strict):
    task_key: str
    depends_on: list[DependsOn] = Field(default_factory=list)
    run_if: Literal["ALL_SUCCESS", "ALL_DONE", "NONE_FAILED"] = "ALL_SUCCESS"
    experiment_name: str | None = Field(None, min_length=1)
    workload: dict[str, Any] | None = None
    notebook: str | None = Field(None, min_length=1)
    sweep: dict[str, Any] | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not TASK_KEY.fullmatch(value):
            raise ValueError(f"{value!r}: letters, digits, '_' and '-', at most 100")
        return value

    @model_validator(mode="after")
    def _what(self) -> TaskModel:
        given = [x for x in (self.workload, self.notebook, self.sweep) if x is not None]
        if len(given) != 1:
            raise ValueError(
                f"task {self.task_key!r}: give exactly one of workload, notebook or sweep"
            )
        if self.parameters and self.notebook is None:
            raise ValueError(f"task {self.task_key!r}: parameters are for notebook tasks")
        try:
            json.dumps(self.parameters)
        except (TypeError, ValueError):
            raise ValueError(f"task {self.task_key!r}: parameters must be plain values") from None
        return self


class ScheduleFile(_Strict):
    name: str
    schedule: CronBlock
    max_concurrent_runs: int = Field(1, ge=1, le=1000)
    catch_up: Literal["latest", "none"] = "latest"
    experiment_name: str | None = Field(None, min_length=1)
    permissions: list[str] = Field(
        default_factory=list, description="grants: NAME:LEVEL or group:NAME:LEVEL"
    )
    notify: list[Any] = Field(
        default_factory=list,
        description="whom to tell of the schedule's runs: their end (with their tasks) and "
        "skipped times (notify.targets); each task's job tells its workload's own",
    )
    tasks: list[TaskModel] = Field(min_length=1)

    @field_validator("notify")
    @classmethod
    def _targets(cls, value: list[Any]) -> list[Any]:
        try:
            check_targets(parse_all(value))
        except BadTarget as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(f"{value!r}: letters, digits, '_.-', starting with one, at most 100")
        return value

    @model_validator(mode="after")
    def _graph(self) -> ScheduleFile:
        keys = [t.task_key for t in self.tasks]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"tasks: task_key {duplicates[0]!r} is used by more than one task")
        graph: dict[str, list[str]] = {}
        for t in self.tasks:
            for d in t.depends_on:
                if d.task_key not in keys:
                    raise ValueError(
                        f"task {t.task_key!r} depends_on {d.task_key!r}, which is no task here"
                    )
            graph[t.task_key] = [d.task_key for d in t.depends_on]
        try:
            tuple(TopologicalSorter(graph).static_order())
        except CycleError as err:
            cycle = " -> ".join(err.args[1])
            raise ValueError(f"tasks: depends_on makes a cycle ({cycle})") from None
        return self


def load(path: Path) -> ScheduleSpec:
    """Read and validate a schedule file; workload files and notebooks relative to it."""
    try:
        node, data = workload_file.read_mapping(path, "name: nightly")
    except WorkloadError as err:
        raise ScheduleFileError(str(err)) from None
    try:
        model = ScheduleFile.model_validate(data)
    except ValidationError as err:
        raise ScheduleFileError(workload_file._describe(path, err, node)) from None
    return _resolve(model, path.parent.resolve(), f"{path}: ")


def from_dict(doc: dict[str, Any], base_dir: Path) -> ScheduleSpec:
    """A schedule given as data (the magic, the REST API): relative paths from ``base_dir``."""
    try:
        model = ScheduleFile.model_validate(doc)
    except ValidationError as err:
        where = ".".join
        raise ScheduleFileError(
            workload_file.describe(err, lambda loc: where(map(str, loc)))
        ) from None
    return _resolve(model, base_dir.resolve(), "")


def _resolve(model: ScheduleFile, base: Path, prefix: str) -> ScheduleSpec:
    tasks = []
    for i, t in enumerate(model.tasks):
        where = f"{prefix}tasks.{i} ({t.task_key})"
        workload = notebook = notebook_path = sweep = None
        if t.workload is not None:
            workload = _workload(t.workload, base, where)
        elif t.sweep is not None:
            sweep = _sweep(t.sweep, base, where)
        else:
            assert t.notebook is not None
            notebook_path, notebook = _snapshot(base / t.notebook, where)
        tasks.append(
            TaskSpec(
                task_key=t.task_key,
                depends_on=tuple(d.task_key for d in t.depends_on),
                run_if=RunIf(t.run_if),
                experiment_name=t.experiment_name,
                workload=workload,
                notebook=notebook,
                notebook_path=notebook_path,
                parameters=t.parameters,
                sweep=sweep,
            )
        )
    try:
        grants = merged(parse_grant(text) for text in model.permissions)
    except BadGrant as err:
        raise ScheduleFileError(f"{prefix}permissions: {err}") from None
    parsed = model.schedule.parsed()
    return ScheduleSpec(
        name=model.name,
        cron=parsed.expression,
        dialect=parsed.dialect.value,
        timezone=parsed.timezone,
        pause_status=PauseStatus(model.schedule.pause_status),
        max_concurrent_runs=model.max_concurrent_runs,
        catch_up=CatchUp(model.catch_up),
        tasks=tuple(tasks),
        experiment_name=model.experiment_name,
        grants=grants,
        notify=parse_all(model.notify),
    )


def _workload(doc: dict[str, Any], base: Path, where: str) -> dict[str, Any]:
    """A workload's validated fields with an absolute ``working_dir``."""

    def inline(fields: dict[str, Any]) -> WorkloadFile:
        try:
            return TaskWorkload.model_validate(fields)
        except ValidationError as err:
            raise WorkloadError(
                workload_file.describe(err, lambda loc: ".".join(map(str, loc)))
            ) from None

    return _read(doc, base, f"{where}: workload", workload_file.load, inline)


def _sweep(doc: dict[str, Any], base: Path, where: str) -> dict[str, Any]:
    """A sweep's validated fields with an absolute ``working_dir`` (and a SQLite
    ``storage:`` made absolute from it)."""

    def inline(fields: dict[str, Any]) -> SweepFile:
        return sweep_file.from_dict(fields, model=TaskSweep)

    fields = _read(doc, base, f"{where}: sweep", sweep_file.load, inline)
    storage = fields.get("storage")
    if storage is not None:
        fields["storage"] = storage_url.absolute(storage, Path(fields["working_dir"]))
    return fields


def _read(
    doc: dict[str, Any],
    base: Path,
    where: str,
    from_file: Callable[[Path], WorkloadFile],
    inline: Callable[[dict[str, Any]], WorkloadFile],
) -> dict[str, Any]:
    """A task's workload or sweep, ``file: PATH`` (relative to ``base``) or inline,
    checked (``WorkloadError`` from either reader); its fields with an absolute
    ``working_dir``, relative to its file's folder."""
    try:
        if "file" in doc:
            if set(doc) != {"file"} or not isinstance(doc["file"], str):
                raise WorkloadError("'file: PATH' stands alone")
            path = base / doc["file"]
            spec = from_file(path)
            base = path.parent.resolve()
        else:
            spec = inline(doc)
    except WorkloadError as err:
        raise ScheduleFileError(f"{where}: {err}") from None
    working_dir = (base / spec.working_dir).resolve()
    if not working_dir.is_dir():
        raise ScheduleFileError(f"{where}: working_dir {working_dir} is not a directory")
    return {**spec.model_dump(mode="json"), "working_dir": str(working_dir)}


def _snapshot(path: Path, where: str) -> tuple[str, str]:
    """The notebook's path and its text, checked to be a notebook."""
    import nbformat

    try:
        text = path.read_text()
    except OSError as err:
        raise ScheduleFileError(f"{where}: notebook {path}: {err.strerror}") from None
    try:
        nbformat.reads(text, as_version=4)
    except Exception as err:
        raise ScheduleFileError(f"{where}: {path} is not a notebook: {err}") from None
    return str(path.resolve()), text
