"""What an entry point hands the jobs service's ``start``: one request, typed.

The magic, the decorator, a warm session, ``air run`` and the scheduler only translate
their input into a ``JobRequest``: what to run (``Program``), the rules it obeys
(``Submission``), where its runs go (``Destination``) and the caller's own defaults.
Everything after it is the service's: placement, the tracking rule, the experiment,
the checkpoint place, the spec, the submission; so each rule is written once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .permissions import Grant
from .spec import JobKind, OutputRanks
from .workload_file import Submission

if TYPE_CHECKING:
    from ..tracking.targets import ExperimentRef, RunTarget


@dataclass(frozen=True)
class Program:
    """What each rank runs, and how its caller follows it."""

    kind: JobKind
    #: A command's argv (``JobKind.COMMAND``, a session's rank loop).
    command: Sequence[str] = ()
    #: The pickled cell or function and the notebook's names (``JobKind.PYTHON``).
    payload: bytes | None = None
    #: The cell's code, kept with its run when the run is made here (a kernel's).
    source: str | None = None
    working_dir: str | None = None
    output_ranks: str = OutputRanks.ALL
    #: Names rank 0 sends back into the notebook (``--out``).
    outputs: Sequence[str] = ()
    timeout: float | None = None
    #: Nobody's kernel waits for it: it outlives its caller, and notifies by default.
    background: bool = False
    run_name: str | None = None
    #: The ticket of the watcher that serves its ranks' pdb prompt while it follows the
    #: job (``jobs.debugger``); None: nobody watches, breakpoints are skipped.
    debug: Path | None = None


@dataclass(frozen=True)
class Defaults:
    """What the caller decides when the submission says nothing, and how its interface
    names the option that lifts the machine's limit."""

    #: None: the backend's default (one rank per GPU here).
    nproc_per_node: int | None = None
    oversubscribe: bool = False
    override: str = "--oversubscribe"
    #: The backend's settings as the caller's configuration gives them (a kernel's Ray
    #: address), under the submission's own.
    settings: Mapping[str, Any] = field(default_factory=dict)


class Destination(Protocol):
    """Where a kernel's call sends its runs: resolved in the kernel, which can ask MLflow
    for an active run to nest under or a run to resume. An entry point that imports no
    MLflow names an ``ExperimentRef`` instead."""

    @property
    def tracking_uri(self) -> str:
        """The tracking store the runs go to."""

    def resolve(self) -> RunTarget | ExperimentRef:
        """The experiment and first run, asked of a server that answers; or the
        experiment by name, where nothing in the kernel can have chosen another (its
        notebook never loaded MLflow), made with the first run by the tail process."""

    def unanswered(self) -> ExperimentRef:
        """The experiment by name, when the server does not answer and the submission
        runs anyway (``tracking: deferred``); raises when that cannot be named offline."""


@dataclass(frozen=True)
class JobRequest:
    """One job, as an entry point asks for it."""

    submission: Submission
    program: Program
    destination: ExperimentRef | Destination
    #: MLflow's run user.
    user: str
    defaults: Defaults = Defaults()
    #: None: the submission's own (a schedule adds its own to a workload's).
    grants: tuple[Grant, ...] | None = None
    notebook: str | None = None
    #: Tags on every attempt's run.
    tags: Mapping[str, str] = field(default_factory=dict)
    #: A kernel that waits for the job: the job ends with it.
    watch_pid: int | None = None
