"""What a backend is: an engine that runs one attempt's nodes.

A backend checks a submission against its world before anything starts (this machine's
capacity, a cluster that answers), owns its settings (Ray's address; a Slurm
partition), and starts an attempt's nodes for the supervisor. Those ``Nodes`` follow
one contract, whatever runs them: every rank gets the torchrun environment, its output
lands in ``logs/node_N/rank_R.log``, a failing rank stops the others (``StopRule``),
cancel and timeout stop them all, system samples come per node, nothing outlives
``close``. ``tests/jobs/test_backend_contract.py`` holds every registered backend to it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from ...job_dir import JobDir
from ...tracking.sampling import Sample
from ..node.hints import HintRecorder
from ..node.outcome import AttemptEnd
from ..node.reaper import Reaper
from ..node.stacks import RankStacks
from ..spec import JobSpec


class BackendRefused(ValueError):
    """A submission this backend cannot start; ``field`` is the workload-file field at
    fault (None for the backend as a whole: a cluster that does not answer)."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field


@dataclass(frozen=True)
class Placement:
    """What a submission asks of a backend, as its checks see it."""

    nproc_per_node: int
    nnodes: int
    #: The backend's own settings as the submitter gave them (``Backend.settings_model``).
    settings: Mapping[str, Any]
    #: Start more ranks than the machine holds (the local backend's limit lifted).
    oversubscribe: bool = False
    #: The option that lifts that limit, as the submitter's interface names it.
    override: str = "--oversubscribe"
    #: False: a dry run, which reaches no cluster.
    reach: bool = True
    #: The MIG slices it asks for: a profile (``1g.10gb``), ``any``, or None (``compute.mig``).
    mig: str | None = None
    #: The devices live jobs hold (a MIG slice's UUID), each with whose job (``capacity.held_by``).
    held: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptContext:
    """What the supervisor gives a backend to start one attempt's nodes."""

    job_id: str
    attempt: int
    spec: JobSpec
    files: JobDir
    #: The spec's environment and the attempt's (its MLflow run).
    env: Mapping[str, str]
    hints: HintRecorder
    reaper: Reaper
    #: ``(node, samples)``: each node's system-metrics samples, as they come.
    on_metrics: Callable[[int, list[Sample]], None]
    metrics_interval: float
    #: While the cluster's queue holds the attempt: its word (``PENDING (Resources),
    #: Slurm job 4242``); None once its nodes run.
    on_queued: Callable[[str | None], None] = lambda line: None


class Nodes(Protocol):
    """One attempt's nodes on a backend, as the supervisor drives them."""

    def run(self, timeout: float | None = None) -> AttemptEnd:
        """Start every rank and return once every one has exited."""

    def cancel(self) -> None:
        """Ask every rank to stop (thread- and signal-safe)."""

    def sample_now(self) -> None:
        """Take a system-metrics sample of every node now."""

    def stacks(self) -> list[RankStacks]:
        """Every running rank's Python stacks, taken now on its node (``stacks``)."""

    def close(self) -> None:
        """Release what the attempt held; nothing of it is left after."""


@dataclass(frozen=True)
class Alias:
    """An older spelling of a backend's settings, kept working beside the generic one
    (``backend: {name: ..., KEY: VALUE}``, ``--backend-opt KEY=VALUE``)."""

    #: The workload file's field and ``@distributed``'s keyword: ``ray_address``.
    field: str
    #: The magics' flag: ``--ray-address``.
    flag: str
    help: str
    #: The one setting it gives (``ray_address`` is ``address``); None: a section of
    #: settings (``slurm: {partition: gpu}``, ``--slurm partition=gpu``).
    setting: str | None = None


class Backend(abc.ABC):
    """One engine, registered under the ``jupyter_air.backends`` entry points."""

    #: Its name in ``--backend``, ``backend:`` and the job's spec.
    name: ClassVar[str]
    #: What it runs on, in a few words (``--backend``'s help).
    summary: ClassVar[str]
    #: Whether a job may span several nodes (the local backend has one: this machine).
    multi_node: ClassVar[bool]
    #: Its own settings (None: it takes none): a pydantic model whose fields, with their
    #: ``description``, are the workload file's ``backend:`` section, the magics' and
    #: ``air run``'s ``--backend-opt KEY=VALUE`` and the docs' table. Unknown keys are
    #: refused (``extra="forbid"``).
    settings_model: ClassVar[type[BaseModel] | None] = None
    #: Older spellings of those settings, still taken.
    aliases: ClassVar[tuple[Alias, ...]] = ()
    #: Whether its nodes report their last system sample themselves as they close; a
    #: local attempt's last sample is left to its run's tail when none was taken.
    samples_at_close: ClassVar[bool] = False
    #: Whether ``prepare`` places ranks on this machine's devices, given what live jobs
    #: hold (``Placement.held``): its submissions take turns from that read to the record.
    places_here: ClassVar[bool] = False

    def default_nproc(self, mig: str | None = None, held: Mapping[str, str] | None = None) -> int:
        """Ranks per node when the submitter says nothing: one per GPU (or free MIG slice,
        ``Placement``'s ``mig`` and ``held``) where the GPUs are known from here, else one."""
        return 1

    @abc.abstractmethod
    def prepare(self, placement: Placement) -> dict[str, Any]:
        """Check the placement against this backend's world (``BackendRefused`` says
        why not) and return the settings the job's spec keeps."""

    def tags(self, settings: Mapping[str, Any]) -> dict[str, str]:
        """The tags every run of a job with these settings (``prepare``'s) carries: where
        its ranks were placed, where that is the backend's to say."""
        return {}

    def kernel_host(self, settings: Mapping[str, Any]) -> str | None:
        """The address at which this backend's nodes reach the kernel (a warm session's
        ranks): None when they run on this machine."""
        return None

    def describe(self, nnodes: int, hosts: list[str]) -> str:
        """How a session's nodes are named: ``on 2 Ray nodes (host-a, host-b)``."""
        return f"on {nnodes} {self.name.title()} nodes ({', '.join(hosts)})"

    @abc.abstractmethod
    def start(self, attempt: AttemptContext) -> Nodes:
        """The attempt's nodes, ready to ``run``."""
