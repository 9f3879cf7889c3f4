"""The workload YAML of ``air run -f``: validated field by field, errors with their line.

pydantic checks the fields (unknown ones refused, types strict); PyYAML's node marks
give each field's line, so a message reads ``compute.nproc_per_node (line 4): ...``.
``Submission`` holds the rules every submission obeys: the magic's and the decorator's
options are checked by it too (``kernel.options.Options``), named as their flags.
"""

from __future__ import annotations

import enum
import re
import shlex
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..gpu import placement
from ..notify import settings as notify_settings
from ..notify.targets import BadTarget, Channel, Target, parse_all
from . import backends, guards
from .backends.base import Backend
from .backends.settings import aliases, checked
from .permissions import BadGrant, Grant, merged, parse_grant
from .store import JOB_ID

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: How a workload file names what a rule speaks of; ``Submission.model_validate(...,
#: context={"names": ...})`` names them otherwise (the magic's flags).
FILE_NAMES = {
    "compute.nnodes": "compute.nnodes",
    "compute.oversubscribe": "compute.oversubscribe",
    "compute.mig": "compute.mig",
    #: A backend's setting, in the generic form and in an alias (``Backend.aliases``).
    "backend setting": "backend.{key}",
    "alias": "{field}",
    "alias setting": "{field}.{key}",
    "backend": "backend",
    "tracking": "tracking",
    "notify": "notify",
    #: A backend named where it is chosen, and where it is only mentioned.
    "backend named": "'backend: {}'",
    "a backend": "'backend: {}'",
}


class WorkloadError(ValueError):
    """The workload file cannot be used; nothing was submitted."""


def _guard(value: Any) -> Any:
    """One item of ``guard:``, checked (``none`` is checked with the others)."""
    if not (isinstance(value, str) and value.strip().lower() == guards.OFF):
        try:
            guards.parse(value)
        except guards.BadGuard as err:
            raise ValueError(str(err)) from None
    return value


class Compute(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    nproc_per_node: int = Field(1, ge=1, description="ranks on each node")
    nnodes: int = Field(1, ge=1, description="nodes (more than 1 needs a cluster's backend)")
    oversubscribe: bool = Field(False, description="more ranks than this machine holds")
    mig: str | None = Field(
        None,
        description="MIG slices for the ranks, one each: a profile (1g.10gb) or any; "
        "default: a GPU in MIG mode gives its free slices of any profile",
    )

    @field_validator("mig")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        if value is None or value == placement.ANY or placement.PROFILE.fullmatch(value):
            return value
        raise ValueError(f"{value!r} is no MIG profile: write one as 1g.10gb, or any")


class TrackingMode(enum.StrEnum):
    """What a submission does when its tracking server does not answer."""

    #: Refuse in one line, starting nothing (the default).
    REQUIRED = "required"
    #: Run at once; each attempt's run is made, and filled, once the server answers.
    DEFERRED = "deferred"


class Submission(BaseModel):
    """What every submission obeys, however it is written."""

    model_config = ConfigDict(extra="forbid", strict=True)

    compute: Compute = Field(
        default_factory=lambda: Compute(nproc_per_node=1, nnodes=1, oversubscribe=False, mig=None)
    )
    max_retries: int = Field(0, ge=0)
    env: dict[str, str] = Field(default_factory=dict)
    backend: str = Field("local", description="the engine (see jobs/backends)")
    #: The backend's own settings, checked by its ``settings_model``; written as
    #: ``backend: {name: slurm, partition: gpu}`` or an alias (``slurm: {...}``).
    backend_settings: dict[str, Any] = Field(default_factory=dict)
    permissions: list[str] = Field(
        default_factory=list,
        description="grants at submission: NAME:LEVEL or group:NAME:LEVEL",
    )
    tracking: TrackingMode = Field(
        TrackingMode.REQUIRED,
        strict=False,  # the file's words: required, deferred
        description="when the tracking server does not answer: required (refuse) or deferred",
    )
    notify: list[Any] | None = Field(
        None,
        description="whom to tell of its events (notify.targets); none: the user's defaults",
    )
    checkpoint_dir: str | None = Field(
        None,
        min_length=1,
        description="where its checkpoints go, for every attempt ($AIR_CHECKPOINT_DIR); "
        "relative to the working directory; default: under the job's directory",
    )
    resume: str | None = Field(
        None,
        description="a job whose latest complete checkpoint the first attempt starts from",
    )
    #: Conditions on the job's logged metrics and what each does when it holds
    #: (``loss: nan -> stop``), each checked by ``jobs.guards``; ``none``: not even the
    #: default one.
    guard: list[Annotated[Any, AfterValidator(_guard)]] = Field(
        default_factory=list,
        description="conditions on logged metrics, each with its actions, or none (docs/guards.md)",
    )

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any, info: ValidationInfo) -> Any:
        """``backend:`` as a section (its ``name`` and its settings) and each backend's
        older spellings (``ray_address``, ``slurm:``) as ``backend`` and its checked
        ``backend_settings``, each setting named as the submitter wrote it."""
        if not isinstance(data, dict):
            return data
        names: Mapping[str, str] = (info.context or {}).get("names", FILE_NAMES)
        data = dict(data)
        given: dict[str, Any] = {}
        spelled: dict[str, str] = {}  # setting -> how the submitter named it
        if isinstance(section := data.get("backend"), dict):
            given = {k: v for k, v in section.items() if k != "name"}
            data["backend"] = section.get("name", "local")
        more = data.pop("backend_settings", None) or {}
        if not isinstance(more, dict):
            raise ValueError(f"{names['backend']}: the backend's settings must be a mapping")
        given.update(more)
        spelled = {key: names["backend setting"].format(key=key) for key in given}
        chosen = data.get("backend", "local")
        for owner, alias in aliases():
            value = data.pop(alias.field, None)
            if value is None:
                continue
            said = names["alias"].format(field=alias.field, flag=alias.flag)
            if owner.name != chosen:
                raise ValueError(f"{said} is for {names['backend named'].format(owner.name)}")
            if alias.setting is not None:
                given[alias.setting], spelled[alias.setting] = value, said
            elif isinstance(value, dict):
                given.update(value)
                for key in value:
                    form = names["alias setting"]
                    spelled[key] = form.format(field=alias.field, flag=alias.flag, key=key)
            else:
                raise ValueError(f"{said}: expected a mapping of settings")
        data["backend_settings"] = given
        if isinstance(chosen, str) and chosen in backends.names():
            data["backend_settings"] = _checked(backends.get(chosen), given, spelled, names)
        return data

    @field_validator("guard", mode="before")
    @classmethod
    def _guard_list(cls, value: Any) -> Any:
        """One guard, or ``none``, may be given without a list (``guard: none``)."""
        if value is None:
            return []
        return [value] if isinstance(value, str | dict) else value

    @field_validator("guard")
    @classmethod
    def _guards_together(cls, value: list[Any]) -> list[Any]:
        try:
            guards.parse_all(value)
        except guards.BadGuard as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("backend")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in backends.names():
            raise ValueError(f"no backend {value!r}: choose one of {', '.join(backends.names())}")
        return value

    @field_validator("resume")
    @classmethod
    def _job_id(cls, value: str | None) -> str | None:
        if value is not None and not JOB_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a job id (as air list shows them)")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value

    @field_validator("permissions")
    @classmethod
    def _grants(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                parse_grant(text)
            except BadGrant as err:
                raise ValueError(str(err)) from None
        return value

    @field_validator("notify")
    @classmethod
    def _targets(cls, value: list[Any] | None) -> list[Any] | None:
        if value is not None:
            try:
                check_targets(parse_all(value))
            except BadTarget as err:
                raise ValueError(str(err)) from None
        return value

    def targets(self, unwatched: bool) -> tuple[Target, ...]:
        """Whom the job tells: its own targets; else, for a job nobody's notebook waits
        for, the user's defaults (a cell shows its own end)."""
        if self.notify is not None:
            return parse_all(self.notify)
        return default_targets() if unwatched else ()

    @model_validator(mode="after")
    def _placement(self, info: ValidationInfo) -> Submission:
        """What the chosen backend can take, in the words of the submitter's interface."""
        names: Mapping[str, str] = (info.context or {}).get("names", FILE_NAMES)
        chosen = backends.get(self.backend)

        def choose(test: Callable[[Backend], bool], form: str = "backend named") -> str:
            found = [n for n in backends.names() if test(backends.get(n))]
            return " or ".join(names[form].format(n) for n in found)

        if self.compute.nnodes > 1 and not chosen.multi_node:
            raise ValueError(
                f"{names['compute.nnodes']} {self.compute.nnodes} needs a cluster: add "
                f"{choose(lambda b: b.multi_node)} (the {chosen.name} backend runs on this "
                "machine only)"
            )
        for flag, given in (
            ("compute.oversubscribe", self.compute.oversubscribe),
            ("compute.mig", self.compute.mig is not None),
        ):
            if given and chosen.multi_node:
                raise ValueError(
                    f"{names[flag]} is for "
                    f"{choose(lambda b: not b.multi_node, 'a backend')} (this machine)"
                )
        return self

    @property
    def grants(self) -> tuple[Grant, ...]:
        return merged(parse_grant(text) for text in self.permissions)


def _checked(
    backend: Backend, given: dict[str, Any], spelled: dict[str, str], names: Mapping[str, str]
) -> dict[str, Any]:
    """The backend's settings checked by its model, each error named by ``spelled``."""
    try:
        return checked(backend, given)
    except ValidationError as err:

        def where(loc: tuple[Any, ...]) -> str:
            key = str(loc[0])
            rest = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
            return spelled.get(key, names["backend setting"].format(key=key)) + rest

        raise ValueError(describe(err, where)) from None
    except ValueError as err:
        raise ValueError(f"{names['backend']}: {err}") from None


def default_targets() -> tuple[Target, ...]:
    """The user's ``c.AirNotify.defaults``. A bad one is said (a warning, shown in the
    cell or the terminal) and none is used: a mistake in a setting that applies to every
    job must not refuse them all."""
    settings = notify_settings.load()
    try:
        return check_targets(parse_all(settings.defaults), settings)
    except BadTarget as err:
        warnings.warn(f"c.AirNotify.defaults: {err}: none used", stacklevel=2)
        return ()


def check_targets(
    targets: tuple[Target, ...], settings: notify_settings.AirNotify | None = None
) -> tuple[Target, ...]:
    """An email target needs an SMTP server to send it: said at submission, not at the
    job's end."""
    if any(t.channel is Channel.EMAIL for t in targets):
        settings = settings or notify_settings.load()
        if not settings.smtp_host:
            raise BadTarget(
                "email: no SMTP server to send it: set c.AirNotify.smtp_host in "
                "jupyter_air_config.py, or $AIR_SMTP_HOST"
            )
    return targets


class WorkloadFile(Submission):
    experiment_name: str = Field(min_length=1)
    command: str = Field(min_length=1, description="what each rank runs")
    mlflow_run_name: str | None = None
    mlflow_artifact_location: str | None = None
    working_dir: str = "."

    @field_validator("command")
    @classmethod
    def _splits(cls, value: str) -> str:
        try:
            if not shlex.split(value):
                raise ValueError("is empty")
        except ValueError as err:
            raise ValueError(f"cannot be split into arguments: {err}") from None
        return value

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    @property
    def run_name(self) -> str:
        return self.mlflow_run_name or self.experiment_name


def read_mapping(path: Path, example: str) -> tuple[yaml.Node | None, dict[str, Any]]:
    """A YAML file's mapping and its node tree (for line numbers in errors); ``example``
    is a field shown when the file holds something else."""
    try:
        text = path.read_text()
    except OSError as err:
        raise WorkloadError(f"{path}: {err.strerror}") from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise WorkloadError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: expected a mapping of fields, like '{example}'")
    return node, data


def load(path: Path, overrides: list[str] = ()) -> WorkloadFile:  # type: ignore[assignment]
    """Read, override (``compute.nproc_per_node=4``) and validate a workload file."""
    node, data = read_mapping(path, "command: python train.py")
    for override in overrides:
        _apply(data, override)
    try:
        spec = WorkloadFile.model_validate(data)
    except ValidationError as err:
        raise WorkloadError(_describe(path, err, node)) from None
    return spec


def _apply(data: dict[str, Any], override: str) -> None:
    dotted, sep, raw = override.partition("=")
    if not sep or not dotted:
        raise WorkloadError(f"--override {override!r}: expected PATH=VALUE")
    keys = dotted.split(".")
    target = data
    for key in keys[:-1]:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            raise WorkloadError(f"--override {override!r}: {key} is not a mapping")
    target[keys[-1]] = yaml.safe_load(raw) if raw else raw  # "4" -> 4, "x" -> "x"


def _describe(path: Path, err: ValidationError, node: yaml.Node | None) -> str:
    return f"{path}: " + describe(err, lambda loc: _where(loc, node))


def describe(err: ValidationError, where: Callable[[tuple[Any, ...]], str]) -> str:
    """One line of every problem, each field named by ``where(loc)``."""
    problems = []
    for e in err.errors():
        message = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a rule across fields: its message names them
            problems.append(message)
        else:
            problems.append(f"{where(e['loc'])}: {message}")
    return "; ".join(problems)


def _where(loc: tuple[Any, ...], node: yaml.Node | None) -> str:
    line = _line(node, loc)
    return ".".join(str(p) for p in loc) + (f" (line {line})" if line else "")


def _line(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the field at ``loc``, or of its nearest existing parent."""
    line = None
    for key in loc:
        if isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            if key >= len(node.value):
                break
            node = node.value[key]  # an item of a list (``guard:``): its own line
            line = node.start_mark.line + 1
            continue
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == key:
                line = key_node.start_mark.line + 1
                node = value_node
                break
        else:
            break
    return line
