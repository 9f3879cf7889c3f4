"""The options of a distributed call (``%%air_distributed``, ``@distributed``, a warm
session's start), checked into the job's ``Submission`` before anything exists.

The rules a workload file obeys are ``Submission``'s; here they are named as the magic's
flags. The magic's parsing of them is ``job_options``.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..identity import server_owner
from ..jobs.request import Defaults
from ..jobs.service import Refused, check_grants
from ..jobs.workload_file import Submission, TrackingMode, describe

#: The magic's flags, as the rules of ``Submission`` name what they speak of.
FLAGS = {
    "compute.nproc_per_node": "--nproc-per-node",
    "compute.nnodes": "--nnodes",
    "compute.oversubscribe": "--oversubscribe",
    "compute.mig": "--mig",
    "backend": "--backend",
    "backend named": "--backend {}",
    "a backend": "the {} backend",
    "backend setting": "--backend-opt {key}",
    "alias": "{flag}",
    "alias setting": "{flag} {key}",
    "tracking": "--tracking",
    "max_retries": "--max-retries",
    "env": "--env",
    "permissions": "--share",
    "notify": "--notify",
    "checkpoint_dir": "--checkpoint-dir",
    "resume": "--resume",
    "guard": "--guard",
}


def _targets(notify: Any) -> list[Any] | None:
    """``--notify``'s strings, or ``notify=``'s target, or its list of them (``none``
    alone: no notification)."""
    if notify is None:
        return None
    if isinstance(notify, str | Mapping):
        notify = [notify]
    return [n for n in notify if n != "none"]


def _guards(guards: Any) -> list[Any]:
    """``--guard``'s strings, or ``guards=``'s one guard (text or mapping) or list."""
    return [guards] if isinstance(guards, str | Mapping) else list(guards)


class OptionError(ValueError):
    """An option of a distributed call is invalid; nothing was started."""


@dataclass
class Options:
    """The options of ``%%air_distributed`` and ``@distributed``."""

    nproc_per_node: int | None = None
    nnodes: int = 1
    backend: str = "local"
    #: The backend's own settings (``Backend.settings_model``): ``--backend-opt``'s.
    backend_settings: Mapping[str, Any] = field(default_factory=dict)
    #: Older spellings of the backend's settings, by field (``Backend.aliases``):
    #: ``slurm={...}``, ``--ray-address``.
    aliased: Mapping[str, Any] = field(default_factory=dict)
    experiment: str | None = None
    run_name: str | None = None
    max_retries: int = 0
    env: dict[str, str] = field(default_factory=dict)
    output_ranks: str = "all"
    timeout: float | None = None
    background: bool = False
    out: list[str] = field(default_factory=list)
    #: Start more ranks than this machine holds (see ``jobs.capacity``).
    oversubscribe: bool = False
    #: MIG slices for the ranks: a profile (``1g.10gb``) or ``any`` (see ``gpu.placement``).
    mig: str | None = None
    #: Grants at submission: ``bob:CAN_VIEW``, ``group:ml-team:CAN_MANAGE_RUN``.
    share: list[str] = field(default_factory=list)
    #: ``deferred``: run even when the tracking server does not answer.
    tracking: str = TrackingMode.REQUIRED
    #: Whom the job tells (``notify.targets``): None for the user's defaults, [] for none.
    notify: list[Any] | None = None
    #: The job's checkpoint place (``jobs.checkpoints``); None: the default.
    checkpoint_dir: str | None = None
    #: A job whose latest complete checkpoint the first attempt starts from.
    resume: str | None = None
    #: Conditions on logged metrics and their actions (``jobs.guards``): ``loss: nan``,
    #: or ``none`` (not even the default guard).
    guards: list[Any] | str | Mapping[str, Any] = field(default_factory=list)
    #: The rank whose ``breakpoint()`` opens a prompt in the cell; the others' are ignored.
    debug_rank: int = 0

    def validate(self) -> Submission:
        """Refuse what cannot run; the submission the options make. The rules a workload
        file obeys are ``Submission``'s, named here as the flags, and the grants are
        checked as the jobs service's ``place`` does; the rest are the kernel's own."""
        submission = self._submission()
        if self.timeout is not None and not self.timeout > 0:
            raise OptionError(f"--timeout must be a number of seconds > 0, got {self.timeout}")
        if self.output_ranks not in ("all", "0", "none"):
            raise OptionError(f"--output-ranks must be all, 0 or none, got {self.output_ranks!r}")
        for name in self.out:
            if not name.isidentifier() or keyword.iskeyword(name):
                raise OptionError(f"--out {name!r}: not a Python name")
        if self.background and self.out:
            raise OptionError("--out cannot bring values back from a --background job")
        try:
            check_grants(server_owner(), submission)
        except Refused as err:
            raise option_error(err) from None
        return submission

    def defaults(self) -> Defaults:
        """This kernel's defaults for the job: one rank per GPU here, the backend's
        settings from ``c.AirMagics`` (the Ray address)."""
        return Defaults(
            nproc_per_node=self.nproc_per_node,
            oversubscribe=self.oversubscribe,
            override="--oversubscribe (oversubscribe=True for @distributed)",
            settings=kernel_settings(self.backend),
        )

    def _submission(self) -> Submission:
        fields = {
            "compute": {
                "nproc_per_node": 1 if self.nproc_per_node is None else self.nproc_per_node,
                "nnodes": self.nnodes,
                "oversubscribe": self.oversubscribe,
                "mig": self.mig,
            },
            "backend": self.backend,
            "backend_settings": dict(self.backend_settings),
            **self.aliased,
            "max_retries": self.max_retries,
            "env": self.env,
            "permissions": list(self.share),
            "tracking": self.tracking,
            "notify": _targets(self.notify),
            "checkpoint_dir": None if self.checkpoint_dir is None else str(self.checkpoint_dir),
            "resume": self.resume,
            "guard": _guards(self.guards),
        }
        try:
            return Submission.model_validate(fields, context={"names": FLAGS})
        except ValidationError as err:
            raise OptionError(describe(err, _flag)) from None


def _flag(loc: tuple[Any, ...]) -> str:
    dotted = ".".join(str(part) for part in loc[:2])
    return FLAGS.get(dotted) or FLAGS.get(str(loc[0])) or dotted


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise OptionError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def option_error(err: Refused) -> OptionError:
    """A refusal, said with the magic's flag where it names the workload-file field."""
    if err.field in ("permissions", "resume", "checkpoint_dir"):
        return OptionError(f"{FLAGS[err.field]}: {err}")
    return OptionError(str(err))


def kernel_settings(backend: str) -> dict[str, Any]:
    """The backend's settings this kernel's IPython configuration gives, for a call that
    names none: ``c.AirMagics.<alias>`` of the backend's one-setting aliases (the Ray
    cluster's ``c.AirMagics.ray_address``)."""
    from IPython import get_ipython

    from ..jobs.backends.settings import aliases

    shell = get_ipython()
    magics = shell.magics_manager.registry.get("AirMagics") if shell is not None else None
    found: dict[str, Any] = {}
    for owner, alias in aliases():
        value = getattr(magics, alias.field, None)
        if owner.name == backend and alias.setting is not None and value:
            found[alias.setting] = value
    return found
