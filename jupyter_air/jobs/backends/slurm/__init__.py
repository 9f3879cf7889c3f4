"""The slurm backend: one node agent per node of a Slurm allocation (``nodes``,
``agent``), asked for with Slurm's own commands (``commands``) and settings
(``settings``). Nothing to install beyond jupyter_air on the nodes: the cluster's
``srun``, ``squeue`` and ``scancel`` do the rest."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..base import AttemptContext, Backend, BackendRefused, Nodes, Placement
from .settings import ALIASES, SlurmSettings


class SlurmBackend(Backend):
    name = "slurm"
    summary = (
        "one node agent per node of a Slurm allocation (its own, or the one this kernel runs in)"
    )
    multi_node = True
    settings_model = SlurmSettings
    aliases = ALIASES
    samples_at_close = True

    def prepare(self, placement: Placement) -> dict[str, Any]:
        """The settings, checked by Slurm itself (``srun --test-only``) outside an
        allocation, or against the allocation the notebook runs in; and where the nodes
        reach this machine."""
        from . import commands

        try:
            settings = SlurmSettings.model_validate(dict(placement.settings))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise BackendRefused("slurm", f"slurm.{where}: {first['msg']}") from None
        within = None if settings.new_allocation else commands.allocation(os.environ)
        placed: dict[str, Any] = {**settings.model_dump(exclude_defaults=True), "within": within}
        if not placement.reach:
            return placed
        env = commands.clean_env(os.environ, keep_allocation=within is not None)
        try:
            commands.require()
            if within is not None:
                has = commands.allocation_nodes(os.environ)
                if placement.nnodes > has:
                    raise commands.SlurmError(
                        f"{placement.nnodes} nodes asked in Slurm job {within}, which has "
                        f"{has}: ask for fewer, or for a new allocation "
                        "(slurm: new_allocation: true)"
                    )
            else:
                options = [f"--nodes={placement.nnodes}", "--ntasks-per-node=1"]
                commands.test_only(options + settings.srun_args(placement.nproc_per_node), env)
            placed["host"] = self._facing(env)
        except commands.SlurmError as err:
            raise BackendRefused(None, f"Slurm: {err}") from None
        return placed

    @staticmethod
    def _facing(env: Mapping[str, str]) -> str:
        """This machine's address on the route to slurmctld: the nodes' network."""
        from ...sessions.wire import facing
        from . import commands

        try:
            return facing(commands.controller(env))
        except OSError as err:
            raise commands.SlurmError(f"no route to the Slurm controller here: {err}") from None

    def kernel_host(self, settings: Mapping[str, Any]) -> str | None:
        return str(settings.get("host") or "127.0.0.1")

    def start(self, attempt: AttemptContext) -> Nodes:
        from .nodes import SlurmNodes

        return SlurmNodes.for_attempt(attempt, on_queued=attempt.on_queued)
