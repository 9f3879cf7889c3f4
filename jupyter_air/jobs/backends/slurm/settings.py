"""A Slurm job's own settings, as ``backend: {name: slurm, ...}`` (or ``slurm:``) in a
workload or schedule file, ``--backend-opt KEY=VALUE`` (or ``--slurm KEY=VALUE``) on
the magics and ``air run``, and ``backend_settings={...}`` (or ``slurm={...}``) on
``@distributed``: Slurm's words for what a job asks of the cluster, turned into the
options of the ``srun`` that runs it."""

from __future__ import annotations

import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..base import Alias

#: What a value may hold: Slurm's own syntax for each field is checked by Slurm itself
#: (``srun --test-only``); here, nothing that could end an option early.
_PLAIN = re.compile(r"^[^\s=]+$")
#: Options of ours or of the job's shape, which ``args`` may not override.
_OURS = (
    "-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node", "-J", "--job-name", "--jobid",
    "-o", "--output", "-e", "--error", "-i", "--input", "-D", "--chdir", "--export",
    "--overlap", "-c", "--cpus-per-task",
)  # fmt: skip


class SlurmSettings(BaseModel):
    """Each field is the ``srun``/``sbatch`` option of the same name."""

    model_config = ConfigDict(extra="forbid", strict=True)

    partition: str | None = Field(
        None, pattern=_PLAIN.pattern, description="the partition (srun -p)"
    )
    time: str | None = Field(
        None, pattern=_PLAIN.pattern, description="the time limit (srun -t): 30, 2:00:00, 1-0"
    )
    account: str | None = Field(
        None, pattern=_PLAIN.pattern, description="the account charged (srun -A)"
    )
    qos: str | None = Field(
        None, pattern=_PLAIN.pattern, description="the quality of service (srun -q)"
    )
    gpus_per_node: str | None = Field(
        None,
        pattern=_PLAIN.pattern,
        description="GPUs on each node (srun --gpus-per-node): 4, or a100:4",
    )
    cpus_per_task: int | None = Field(
        None, ge=1, description="CPUs for each rank (the node's task gets this times -n)"
    )
    mem: str | None = Field(
        None, pattern=_PLAIN.pattern, description="memory on each node (srun --mem): 64G"
    )
    constraint: str | None = Field(
        None, min_length=1, description="node features (srun -C): a100&ib"
    )
    args: list[str] = Field(
        default_factory=list, description="more srun options, one string or a list: --exclusive"
    )
    new_allocation: bool = Field(
        False,
        description="in an allocation already (salloc, batchspawner): ask for a new one "
        "rather than run in it",
    )

    @field_validator("time", "mem", "gpus_per_node", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        """``time: 30`` and ``gpus_per_node: 4`` in YAML are numbers: Slurm's words."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("args", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("args")
    @classmethod
    def _not_ours(cls, value: list[str]) -> list[str]:
        for arg in value:
            if not arg.startswith("-"):
                raise ValueError(f"{arg!r} is not an option: give each as --name=value")
            name = arg.split("=", 1)[0]
            if not name.startswith("--"):  # -N3, -J name: the letter is the option
                name = name[:2]
            # srun takes a long option's unambiguous abbreviation: --expo is --export.
            ours = [o for o in _OURS if o == name or (name[:2] == "--" and o.startswith(name))]
            if ours:
                said = name if ours[0] == name else f"{name} ({ours[0]})"
                raise ValueError(f"{said} is set by jupyter_air from the job's shape")
        return value

    def srun_args(self, nproc_per_node: int) -> list[str]:
        """The options these settings give the job's ``srun``."""
        args = []
        for name in ("partition", "time", "account", "qos", "gpus_per_node", "mem", "constraint"):
            value = getattr(self, name)
            if value is not None:
                args.append(f"--{name.replace('_', '-')}={value}")
        args.append(f"--cpus-per-task={(self.cpus_per_task or 1) * nproc_per_node}")
        return [*args, *self.args]


ALIASES = (
    Alias(
        "slurm",
        "--slurm",
        "A Slurm setting for --backend slurm (repeatable): partition, time, account, "
        "qos, gpus_per_node, cpus_per_task (per rank), mem (per node), constraint, "
        "args (more srun options, e.g. args='--exclusive'), new_allocation=true.",
    ),
)
