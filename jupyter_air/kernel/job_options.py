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

from ..jobs.backends.slurm.settings import parse_pairs
from .launch import OptionError, Options, parse_env

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
        "--nnodes", type=int, default=1, help="Machines (more than 1 needs --backend ray or slurm)."
    ),
    "backend": argument(
        "--backend",
        default="local",
        help=(
            "local: ranks on this machine; ray: one node agent per node of a Ray cluster; "
            "slurm: one per node of a Slurm allocation (its own, or the one this kernel "
            "runs in)."
        ),
    ),
    "ray_address": argument(
        "--ray-address",
        default=None,
        help="Ray cluster for --backend ray (default: c.AirMagics.ray_address, $RAY_ADDRESS).",
    ),
    "slurm": argument(
        "--slurm",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help=(
            "A Slurm setting for --backend slurm (repeatable): partition, time, account, "
            "qos, gpus_per_node, cpus_per_task (per rank), mem (per node), constraint, "
            "args (more srun options, e.g. args='--exclusive'), new_allocation=true."
        ),
    ),
    "experiment": argument(
        "--experiment", help="MLflow experiment name (wins over mlflow.set_experiment())."
    ),
    "run_name": argument("--run-name", help="MLflow run name (default: MLflow's generated name)."),
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


def whole_job_options(*names: str) -> Callable[[F], F]:
    """The named whole-job options (every one when none is named) on a magic, as if each
    ``@argument`` were written where this decorator is."""
    chosen = [WHOLE_JOB[name] for name in names or WHOLE_JOB]

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
    if given.get("slurm") is not None:
        try:
            given["slurm"] = parse_pairs(given["slurm"])
        except ValueError as err:
            raise OptionError(str(err)) from None
    return Options(**given)
