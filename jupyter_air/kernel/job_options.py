"""The options of a whole job, defined once for ``%%air_distributed`` and
``%air_session start`` (IPython ``magic_arguments``), and read back as ``Options``.

A session is one job: its ranks, environment, experiment and grants are chosen when it
starts, so the session's magic takes these same options, by the same flags and help.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.magic_arguments import argument

from ..jobs.backends import get, names
from ..jobs.backends.base import Alias, Backend
from ..jobs.backends.settings import FLAG, BadPair, aliases, from_pairs
from .options import OptionError, Options, parse_env

F = TypeVar("F", bound=Callable[..., Any])

#: Each whole-job option by its ``Options`` field, in the order help lists them.
WHOLE_JOB: dict[str, Callable[[Any], Any]] = {
    "nproc_per_node": argument(
        "-n",
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help=(
            "Ranks per node (default: one per visible GPU, or 1 without GPUs; "
            "1 with --backend ray)."
        ),
    ),
    "nnodes": argument(
        "--nnodes",
        type=int,
        default=1,
        help="Machines (more than 1 needs --backend "
        + " or ".join(name for name in names() if get(name).multi_node)
        + ").",
    ),
    "backend": argument(
        "--backend",
        default="local",
        help="; ".join(f"{name}: {get(name).summary}" for name in names()) + ".",
    ),
    "backend_opt": argument(
        FLAG,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A setting of the --backend (repeatable): "
        + "; ".join(
            f"{name}: {', '.join(model.model_fields)}"
            for name in names()
            if (model := get(name).settings_model) is not None
        )
        + " (docs/backends.md says what each means).",
    ),
    **{
        alias.field: argument(
            alias.flag,
            dest=alias.field,
            action="store" if alias.setting is not None else "append",
            default=None,
            metavar=None if alias.setting is not None else "KEY=VALUE",
            help=alias.help,
        )
        for _, alias in aliases()
    },
    "experiment": argument(
        "--experiment", help="MLflow experiment name (wins over mlflow.set_experiment())."
    ),
    "run_name": argument(
        "--run-name",
        help="MLflow run name (a cell's default: its notebook and execution count, "
        "e.g. 'quickstart cell 3').",
    ),
    "max_retries": argument(
        "--max-retries", type=int, default=0, help="Attempts after a failed one (default 0)."
    ),
    "env": argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Environment variable for every rank (repeatable).",
    ),
    "oversubscribe": argument(
        "--oversubscribe",
        action="store_true",
        help=(
            "Start the ranks even when they are more than this machine's GPUs, or more "
            "than 4 per core without GPUs (refused otherwise)."
        ),
    ),
    "mig": argument(
        "--mig",
        default=None,
        metavar="PROFILE",
        help=(
            "Run each rank on a free MIG slice of this profile (1g.10gb), or of any "
            "profile (any), never on a whole GPU (default: a GPU in MIG mode gives its "
            "free slices, one per rank; refused, saying which are free, when too few are)."
        ),
    ),
    "tracking": argument(
        "--tracking",
        default="required",
        metavar="MODE",
        help=(
            "When the MLflow tracking server does not answer: required (the default) "
            "refuses in one line, starting nothing; deferred runs at once, and makes and "
            "fills its run once the server answers."
        ),
    ),
    "notify": argument(
        "--notify",
        action="append",
        default=None,
        metavar="TARGET",
        help=(
            "Tell the owner of the job's events (repeatable; with --background it replaces "
            "c.AirNotify.defaults; none: no notification): jupyterlab, email:ADDRESS or "
            "webhook:URL, each with "
            "on:EVENT,... (start, success, failure, cancelled, retry, hint, duration:2h; "
            "default: its end), e.g. 'email:me@example.com on:failure'."
        ),
    ),
    "checkpoint_dir": argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help=(
            "Where the job's checkpoints go: $AIR_CHECKPOINT_DIR in every rank, the same "
            "for each attempt, so a retry resumes (default: under the job's directory, "
            "or $AIR_CHECKPOINT_ROOT/<job id>)."
        ),
    ),
    "resume": argument(
        "--resume",
        default=None,
        metavar="JOB",
        help="Start from the latest complete checkpoint of job JOB (a cell run again after a fix).",
    ),
    "guards": argument(
        "--guard",
        dest="guards",
        action="append",
        default=[],
        metavar="GUARD",
        help=(
            "A condition on a logged metric and what to do when it holds (repeatable), "
            "e.g. 'loss: nan', 'loss: > 10 -> stop', 'val_loss: no better for 500 steps "
            "-> checkpoint' (docs/guards.md)."
        ),
    ),
    "share": argument(
        "--share",
        action="append",
        default=[],
        metavar="[group:]NAME:LEVEL",
        help=(
            "Grant a Hub user or group a permission on the job (repeatable): CAN_VIEW, "
            "CAN_MANAGE_RUN or CAN_MANAGE, e.g. bob:CAN_VIEW, group:ml-team:CAN_MANAGE_RUN."
        ),
    ),
}


def whole_job_options(*chosen_names: str) -> Callable[[F], F]:
    """The named whole-job options (every one when none is named) on a magic, as if each
    ``@argument`` were written where this decorator is; ``backend_opt`` brings the
    backends' older spellings with it."""
    wanted = set(chosen_names or WHOLE_JOB)
    if "backend_opt" in wanted:
        wanted |= {alias.field for _, alias in aliases()}
    chosen = [option for name, option in WHOLE_JOB.items() if name in wanted]

    def add(magic: F) -> F:
        for option in reversed(chosen):  # decorators apply from the bottom up
            magic = option(magic)
        return magic

    return add


def options_from(args: argparse.Namespace) -> Options:
    """The ``Options`` of a magic's parsed arguments (those it does not take keep their
    defaults); a bad ``--env`` raises ``OptionError``."""
    fields = Options.__dataclass_fields__
    given = {name: value for name, value in vars(args).items() if name in fields}
    if "env" in given:
        given["env"] = parse_env(given["env"])
    model = get(args.backend).settings_model if args.backend in names() else None
    try:
        given["backend_settings"] = from_pairs(FLAG, getattr(args, "backend_opt", []), model)
        given["aliased"] = {
            alias.field: _alias_value(alias, value, owner)
            for owner, alias in aliases()
            if (value := getattr(args, alias.field, None)) is not None
        }
    except BadPair as err:
        raise OptionError(str(err)) from None
    return Options(**given)


def _alias_value(alias: Alias, value: Any, owner: Backend) -> Any:
    """An alias flag's value as the submission takes it: a section's ``KEY=VALUE``
    flags as its settings."""
    if alias.setting is not None:
        return value
    return from_pairs(alias.flag, value, owner.settings_model)
