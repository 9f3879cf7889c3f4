"""The local backend: one attempt's ranks as subprocesses of the supervisor, run by the
node side's ``LocalRanks`` (``node.ranks``) in the supervisor's process."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...job_dir import JobDir
from ...tracking.sampling import Sample, SampleLoop
from ..capacity import DEVICES, TooManyRanks, check_here, default_ranks
from ..env import free_port
from ..node.hints import HintRecorder, rank_gpus
from ..node.launch import NodeLaunch, node_specs
from ..node.outcome import AttemptEnd
from ..node.ranks import LocalRanks
from ..node.reaper import Reaper
from ..node.stacks import RankStacks, dump_ranks
from ..spec import JobKind
from .base import AttemptContext, Backend, BackendRefused, Nodes, Placement

#: The setting that names each rank's slice as people read it (``GPU 0 slice 2 (1g.10gb)``).
SLICES = "slices"


class LocalNode:
    """The local backend's node agent, in-process: the one node of a local attempt, its
    ranks made from the same ``NodeLaunch`` by the same ``node_specs`` as each Ray node
    agent's, stopped by the same rule, its system metrics sampled by the same loop
    (``on_metrics``), whose GPU samples feed the same hints. It has ``RayNodes``'s
    interface: ``cancel``, ``run``, ``sample_now``, ``close``."""

    def __init__(
        self,
        launch: NodeLaunch,
        files: JobDir,
        cwd: str | None,
        hints: HintRecorder | None,
        reaper: Reaper | None = None,
        on_metrics: Callable[[int, list[Sample]], None] | None = None,
        metrics_interval: float = 10.0,
    ) -> None:
        specs = node_specs(launch, files, cwd=cwd)
        self._ranks = LocalRanks(specs, reaper)
        gpus = rank_gpus({spec.rank: spec.env.get("CUDA_VISIBLE_DEVICES") for spec in specs})
        if hints is not None:
            hints.start(gpus, self._ranks.last_output)
        self._metrics = (
            SampleLoop(
                metrics_interval,
                lambda sample: on_metrics(0, [sample]),
                hints.on_nvml if hints is not None else None,
                set(gpus.values()),  # the energy of the job's GPUs
            )
            if on_metrics is not None
            else None
        )

    def cancel(self) -> None:
        self._ranks.cancel()

    def run(self, timeout: float | None = None) -> AttemptEnd:
        if self._metrics is not None:
            self._metrics.start()
        return self._ranks.run(timeout)

    def sample_now(self) -> None:
        if self._metrics is not None:
            self._metrics.sample_now()

    def stacks(self) -> list[RankStacks]:
        return dump_ranks(self._ranks.running())

    def close(self) -> None:
        """The last metrics sample, where an earlier one was taken: a job that ended
        sooner leaves its sample to the run's tail, which has MLflow loaded to ship it
        (``run_tails``; here it would be loaded for that alone). ``run`` returned once
        every rank had exited."""
        if self._metrics is not None:
            self._metrics.finish(last=self._metrics.loaded)


class LocalBackend(Backend):
    """This machine: one node, its ranks subprocesses of the supervisor (``LocalNode``)."""

    name = "local"
    summary = "ranks on this machine"
    multi_node = False
    places_here = True

    def default_nproc(self, mig: str | None = None, held: Mapping[str, str] | None = None) -> int:
        """One rank per visible GPU (per free MIG slice on a GPU in MIG mode), or 1
        without GPUs."""
        return default_ranks(mig, held)

    def prepare(self, placement: Placement) -> dict[str, Any]:
        """This machine's capacity checked; on MIG slices, the slice of each rank."""
        try:
            chosen = check_here(
                placement.nproc_per_node,
                placement.override,
                mig=placement.mig,
                oversubscribe=placement.oversubscribe,
                held=placement.held,
            )
        except TooManyRanks as err:
            field = "compute.mig" if placement.mig is not None else "compute.nproc_per_node"
            raise BackendRefused(field, str(err)) from None
        if chosen is None:
            return {}
        return {DEVICES: [unit.device for unit in chosen], SLICES: [str(unit) for unit in chosen]}

    def tags(self, settings: Mapping[str, Any]) -> dict[str, str]:
        """Each rank's MIG slice, in rank order: its ``CUDA_VISIBLE_DEVICES`` and its name."""
        if DEVICES not in settings:
            return {}
        return {
            "air.cuda_visible_devices": ",".join(settings[DEVICES]),
            "air.mig_slices": ", ".join(settings.get(SLICES) or ()),
        }

    def start(self, attempt: AttemptContext) -> Nodes:
        spec = attempt.spec
        launch = NodeLaunch(
            job_id=attempt.job_id,
            attempt=attempt.attempt,
            node_rank=0,
            nnodes=1,
            nproc_per_node=spec.compute.nproc_per_node,
            master_addr="127.0.0.1",
            master_port=free_port(),
            max_restarts=spec.policy.max_retries,
            env=dict(attempt.env),
            command=list(spec.program.command) if spec.kind is not JobKind.PYTHON else [],
            working_dir=spec.program.working_dir,
            gpus=list(devices) if (devices := spec.backend.settings.get(DEVICES)) else None,
        )
        return LocalNode(
            launch,
            attempt.files,
            spec.program.working_dir,
            attempt.hints,
            attempt.reaper,
            on_metrics=attempt.on_metrics,
            metrics_interval=attempt.metrics_interval,
        )
