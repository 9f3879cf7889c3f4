"""The jobs service: the one API every entry point calls.

The magic, the decorator, a warm session, ``air``, the server's routes and the
scheduler only translate: their input into a ``JobRequest`` (``start``), the service's
answer into their output. Each call is made as one caller (an ``Identity``) and
checked against the job's grants here, so no entry point can forget a check another
makes. Nothing here knows of tornado, IPython or argparse.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..identity import Identity
from ..job_dir import AttemptDir, JobDir
from ..notify.targets import BadTarget, Target
from ..perf import profiles
from ..perf.profiles import Profile
from ..tracking.targets import ExperimentRef, RunTarget
from . import backends, cancel, capacity, checkpoints, running
from .backends.base import Backend, BackendRefused, Placement
from .capacity import DEVICES, held_by
from .checkpoint_settings import checkpoint_root
from .documents import RunLink, job_document, job_documents
from .env import submitting_job
from .guards import resolved as resolved_guards
from .node import stacks
from .node.stacks import StackSet
from .permissions import (
    BadGrant,
    Forbidden,
    Grant,
    JobAccess,
    Level,
    Principal,
    check_change,
)
from .request import JobRequest, Program
from .sharing import mirror
from .spec import JobKind, JobSpec, job_spec
from .store import JOB_ID, Job, JobEnded, JobStore, UnknownJob
from .submit import Submitted, submit
from .workload_file import Submission, TrackingMode, check_targets

if TYPE_CHECKING:
    from ..tracking.permissions import MirrorReport
    from ..tracking.probe import Unreachable


class Refused(ValueError):
    """A submission that cannot start; ``field`` is the workload-file field at fault (None
    for the backend as a whole), the message says why and what to do. Nothing exists yet
    when one is raised: no job, no run, no process."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field


class Conflict(RuntimeError):
    """The job is not in a state that allows this (it ended; it runs elsewhere)."""


class NoLogs(LookupError):
    """The job has no logs to read: no attempt yet, or they expired."""


@dataclass(frozen=True)
class Placed:
    """A submission checked against its backend: what ``spec`` builds the job from."""

    submission: Submission
    backend: Backend
    nproc_per_node: int
    settings: Mapping[str, Any]

    def spec(self, program: Program) -> JobSpec:
        """The job's spec: the program given here, the rest from the submission. A
        checkpoint place the user cannot use is refused here, before anything exists."""
        s = self.submission
        place = None
        if s.checkpoint_dir is not None:
            where = Path(program.working_dir or os.getcwd()) / os.path.expanduser(s.checkpoint_dir)
            place = os.path.abspath(where)
            problem = checkpoints.unusable(Path(place))
            if problem is not None:
                raise Refused("checkpoint_dir", problem)
        elif root := checkpoint_root():
            problem = checkpoints.unusable(Path(root))
            if problem is not None:
                raise Refused("checkpoint_dir", f"c.AirCheckpoints.root: {problem}")
        kind = program.kind
        targets = s.targets(unwatched=program.background)
        return job_spec(
            kind,
            command=program.command,
            working_dir=program.working_dir,
            env=command_env(s.env) if kind is JobKind.COMMAND else s.env,
            output_ranks=program.output_ranks,
            outputs=program.outputs,
            nproc_per_node=self.nproc_per_node,
            nnodes=s.compute.nnodes,
            max_retries=s.max_retries,
            timeout=program.timeout,
            background=program.background,
            backend=self.backend.name,
            backend_settings=self.settings,
            run_name=program.run_name,
            deferred=s.tracking is TrackingMode.DEFERRED,
            notify=targets,
            checkpoint_dir=place,
            resume_job=s.resume,
            debug_ticket=None if program.debug is None else str(program.debug),
            guards=resolved_guards(s.guard, has_targets=bool(targets)),
            tags=self.backend.tags(self.settings),
        )

    @property
    def kernel_host(self) -> str | None:
        """Where this backend's nodes reach the kernel (a warm session's ranks)."""
        try:
            return self.backend.kernel_host(self.settings)
        except BackendRefused as err:
            raise Refused(err.field, str(err)) from None


def place(
    submission: Submission,
    owner: str,
    *,
    nproc_per_node: int | None = None,
    oversubscribe: bool = False,
    override: str = "--oversubscribe",
    settings: Mapping[str, Any] | None = None,
    reach: bool = True,
    held: Mapping[str, str] | None = None,
) -> Placed:
    """Refuse what ``owner`` cannot start: grants they may not give (never to themself),
    more ranks than the backend holds, a cluster that does not answer (``reach=False``
    leaves it alone: a dry run). ``nproc_per_node`` None is the backend's default (one
    per GPU here); ``settings`` are the backend's as the caller resolved them (a
    kernel's configured Ray address), under the submission's own; ``held``: the devices
    live jobs hold (``capacity.held_by``), not given to this one."""
    check_grants(owner, submission)
    backend = backends.get(submission.backend)
    mig = submission.compute.mig
    nproc = nproc_per_node or backend.default_nproc(mig, held)
    placement = Placement(
        nproc_per_node=nproc,
        nnodes=submission.compute.nnodes,
        settings={**(settings or {}), **submission.backend_settings},
        oversubscribe=oversubscribe or submission.compute.oversubscribe,
        override=override,
        reach=reach,
        mig=mig,
        held=held or {},
    )
    try:
        resolved = backend.prepare(placement)
    except BackendRefused as err:
        raise Refused(err.field, str(err)) from None
    return Placed(submission, backend, nproc, resolved)


def check_grants(owner: str, submission: Submission) -> None:
    """The grants of a submission are ones ``owner`` may give (never to themself)."""
    try:
        check_change(owner, submission.grants, ())
    except BadGrant as err:
        raise Refused("permissions", str(err)) from None


def tracking_down(
    tracking_uri: str, submission: Submission, deferrable: bool = True
) -> Unreachable | None:
    """The rule every entry point obeys: a tracking server that does not answer refuses
    the submission in one line, in seconds (``probe.Unreachable``), unless it defers
    (``tracking: deferred``, where ``deferrable``): then why it does not answer, and
    the job runs anyway."""
    from ..tracking import probe

    try:
        probe.check(tracking_uri, deferrable=deferrable)
    except probe.Unreachable as err:
        if deferrable and submission.tracking is TrackingMode.DEFERRED:
            return err
        raise
    return None


@dataclass(frozen=True)
class AttemptPlace:
    """Which attempt, and where its files (logs, GPU samples) are."""

    attempt: int
    #: How many attempts the job has (0 before its first).
    attempts: int
    directory: Path


@dataclass(frozen=True)
class Started:
    """A job ``start`` started, and where its runs go."""

    job: Job
    #: The first attempt's run when it was made at submission (a kernel's call: by the
    #: kernel, or by the tail process for it); None when the supervisor makes it.
    run_id: str | None
    run_name: str | None
    target: RunTarget | ExperimentRef
    #: Why the tracking server did not answer, for a job that runs anyway (deferred).
    down: Unreachable | None
    #: Where a session's nodes reach the kernel; None: on this machine (or not a session).
    kernel_host: str | None


def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """A command's env, with this interpreter's directory first on PATH unless it sets
    PATH: ``python train.py`` then runs where jupyter_air is, as a cell's ranks do."""
    if "PATH" in env:
        return dict(env)
    here = str(Path(sys.executable).parent)  # a venv's bin, never resolved out of it
    return {**env, "PATH": os.pathsep.join([here, os.environ.get("PATH", os.defpath)])}


class JobService:
    """Jobs as one caller sees them. ``run_link`` makes a run's MLflow page from
    (tracking URI, experiment id, run id), as the caller's UI reaches it."""

    def __init__(self, store: JobStore, caller: Identity, run_link: RunLink | None = None) -> None:
        self.store = store
        self.caller = caller
        self.run_link = run_link

    # -- submitting --------------------------------------------------------------------

    def start(self, request: JobRequest) -> Started:
        """Start the job a request asks for, as the caller, or refuse it with nothing
        started: ``Refused`` (its grants, its backend's world, its checkpoint place, the
        job it resumes), ``probe.Unreachable`` (its tracking server does not answer and
        it does not defer). The experiment is resolved last, so that a refusal makes none.
        """
        if not backends.get(request.submission.backend).places_here:
            return self._start(request, release=lambda: None)
        try:
            with capacity.placing(self.store.home) as release:
                return self._start(request, release)
        except capacity.PlacingBusy as err:
            raise Refused("compute", f"{err}: try again") from None

    def _start(self, request: JobRequest, release: Callable[[], None]) -> Started:
        """``start``, holding the placing lock (of a backend that places here) until the
        job is recorded when it was given MIG slices (``DEVICES``); else only to place it."""
        submission, program, defaults = request.submission, request.program, request.defaults
        placed = self.place(
            submission,
            nproc_per_node=defaults.nproc_per_node,
            oversubscribe=defaults.oversubscribe,
            override=defaults.override,
            settings=defaults.settings,
        )
        if DEVICES not in placed.settings:
            release()
        spec = self._resuming(placed.spec(program))
        kernel_host = placed.kernel_host if program.kind is JobKind.SESSION else None
        destination = request.destination
        # A session's own run is made in the kernel as it starts: deferred is for its cells.
        deferrable = program.kind is not JobKind.SESSION
        down = tracking_down(destination.tracking_uri, submission, deferrable)
        target: RunTarget | ExperimentRef
        if isinstance(destination, ExperimentRef):
            target = destination
        else:
            target = destination.resolve() if down is None else destination.unanswered()
        # A kernel's call shows its run's links at once: its first run is made now.
        run_now = not isinstance(destination, ExperimentRef) and down is None
        submitted = self.submit(
            spec,
            target,
            grants=submission.grants if request.grants is None else request.grants,
            payload=program.payload,
            source=program.source if run_now else None,
            notebook=request.notebook,
            user=request.user,
            extra_tags=request.tags,
            watch_pid=request.watch_pid,
            run_now=run_now,
        )
        return Started(
            submitted.job,
            submitted.run_id,
            submitted.run_name,
            submitted.target,
            down,
            kernel_host,
        )

    def place(self, submission: Submission, **options: Any) -> Placed:
        """``place`` as this service's caller (``start`` does it; a dry run stops here),
        given no device a live job of this store holds."""
        held = held_by(self.store.jobs(active_only=True), self.caller.name)
        return place(submission, self.caller.name, held=held, **options)

    def submit(
        self,
        spec: JobSpec,
        target: RunTarget | ExperimentRef,
        *,
        grants: tuple[Grant, ...] = (),
        payload: bytes | None = None,
        source: str | None = None,
        notebook: str | None = None,
        user: str,
        extra_tags: Mapping[str, str] | None = None,
        watch_pid: int | None = None,
        run_now: bool = False,
    ) -> Submitted:
        """Record the job, owned by the caller, and start it (see ``submit.submit``)."""
        spec = self._resuming(spec)
        return submit(
            self.store,
            spec,
            target,
            owner=self.caller.name,
            grants=grants,
            payload=payload,
            source=source,
            notebook=notebook,
            user=user,
            extra_tags=extra_tags,
            watch_pid=watch_pid,
            parent_id=submitting_job(),
            run_now=run_now,
        )

    def _resuming(self, spec: JobSpec) -> JobSpec:
        """The spec with the checkpoint its ``--resume JOB`` starts from, found now: that
        job's latest complete one (CAN_MANAGE_RUN on it: its weights are its owner's
        work). None there is refused, before anything starts."""
        other = spec.program.resume_job
        if other is None or spec.program.resume_from is not None:
            return spec
        try:
            job = self.get(other, Level.CAN_MANAGE_RUN)
        except (UnknownJob, Forbidden) as err:
            raise Refused("resume", f"cannot resume from job {other}: {err}") from None
        where = checkpoints.place_of(self.store.job_dir(job.id), job.spec.program.checkpoint_dir)
        problem = checkpoints.untrusted(where)
        if problem is not None:
            raise Refused("resume", f"cannot resume from job {job.id}: {problem}")
        found = checkpoints.latest(where)
        if found is None:
            raise Refused(
                "resume", f"job {job.id} has no complete checkpoint in {where} to resume from"
            )
        if not checkpoints.owned(found):
            raise Refused("resume", f"cannot resume from {found.path}: a file in it is not yours")
        return replace(spec, program=replace(spec.program, resume_from=str(found.path)))

    # -- reading -----------------------------------------------------------------------

    def get(self, job_id: str, needed: Level = Level.CAN_VIEW) -> Job:
        """The job, if the caller holds ``needed`` on it (``Forbidden`` otherwise)."""
        if not JOB_ID.fullmatch(job_id):
            raise UnknownJob(job_id)
        self.store.access(job_id).require(self.caller, needed)
        return self.store.get(job_id)

    def jobs(self, *, active_only: bool = False, limit: int | None = None) -> list[Job]:
        """The jobs the caller may view, newest first."""
        return self.store.jobs(active_only=active_only, limit=limit, visible_to=self.caller)

    def count(self) -> int:
        """How many jobs the caller may view, ended ones included."""
        return self.store.count(visible_to=self.caller)

    def document(self, job: Job) -> dict[str, Any]:
        """What the caller sees of a job they may view (docs/api.md)."""
        return job_document(self.store, job, self.caller, self.run_link)

    def documents(self, jobs: list[Job]) -> list[dict[str, Any]]:
        return job_documents(self.store, jobs, self.caller, self.run_link)

    def visible(self, job_ids: set[str]) -> set[str]:
        """Which of these jobs the caller may view (unknown ids are not)."""
        return self.store.visible_ids(self.caller, job_ids)

    def running_nodes(self) -> list[dict[str, Any]]:
        """The nodes of the running multi-node jobs the caller may view."""
        return running.job_nodes(self.store, self.jobs(active_only=True))

    def running_details(self, job_ids: set[str]) -> dict[str, dict[str, Any]]:
        """Hints and a session's activity of each of these running jobs the caller may
        view (``running.job_details``); nothing of the others."""
        return running.job_details(self.store, sorted(self.visible(job_ids)))

    def log_attempt(
        self, job: Job, attempt: int | None = None, *, empty: bool = False
    ) -> AttemptPlace:
        """Which attempt's logs to read (the latest by default) and where. ``empty``: a
        job with no attempt yet, or whose logs expired, reads as an empty place (a view
        that polls shows nothing yet, or nothing more) rather than ``NoLogs``."""
        attempts = len(self.store.attempts(job.id))
        if not attempts and not empty:
            raise NoLogs(f"job {job.id} has no attempt yet")
        number = attempt or max(attempts, 1)
        if not 1 <= number <= max(attempts, 1):
            raise NoLogs(f"attempt {number} of job {job.id}: it has 1 to {max(attempts, 1)}")
        if attempts and not empty and not self.store.job_dir(job.id).exists():
            raise NoLogs(f"the logs of job {job.id} have expired")
        return AttemptPlace(number, attempts, self.store.attempt_dir(job.id, number))

    # -- changing ----------------------------------------------------------------------

    def cancel(self, job_id: str) -> Job:
        """Ask every rank of the job to stop (CAN_MANAGE_RUN); the job as it was asked."""
        job = self.get(job_id, Level.CAN_MANAGE_RUN)
        try:
            cancelled = cancel.cancel(self.store, job.id)
        except cancel.Elsewhere as err:
            raise Conflict(str(err)) from None
        if not cancelled:
            raise Conflict(f"job {job.id} already ended ({job.status.lower()})")
        return job

    def add_notify(self, job_id: str, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        """Tell the owner of a job that runs, from now on (the owner only: ``OwnerOnly``);
        all of its targets after it."""
        job = self.get(job_id)
        try:
            check_targets(targets)
        except BadTarget as err:
            raise Refused("notify", str(err)) from None
        try:
            self.store.add_targets(job.id, self.caller, targets)
        except JobEnded as err:
            raise Conflict(str(err)) from None
        return self.store.targets(job.id)

    def take_stacks(self, job_id: str) -> StackSet:
        """Every running rank's Python stacks, now (CAN_MANAGE_RUN: taking them pauses each
        rank for a moment), saved with the attempt."""
        job = self.get(job_id, Level.CAN_MANAGE_RUN)
        attempts = self.store.attempts(job.id)
        if job.done or not attempts:
            raise Conflict(
                f"job {job.id} runs no rank now ({job.status.lower()}): "
                f"its saved stacks are at air stacks {job.id} --saved"
            )
        if not job.supervised_here or job.supervisor_pid is None:
            raise Conflict(f"job {job.id} is supervised on {job.supervisor_host}: ask there")
        try:
            return stacks.request(
                self.store.attempt_dir(job.id, attempts[-1].attempt), job.supervisor_pid
            )
        except stacks.StacksError as err:
            raise Conflict(f"job {job.id}: {err}") from None

    def saved_stacks(self, job_id: str) -> list[tuple[int, StackSet]]:
        """The stacks taken of the job's ranks (asked for, at a likely hang, at a cancel
        after one), by attempt, oldest first (CAN_VIEW)."""
        job = self.get(job_id)
        found = []
        for a in self.store.attempts(job.id):
            where = self.store.attempt_dir(job.id, a.attempt)
            for name in stacks.sets(where):
                taken = stacks.read(where, name)
                if taken is not None:
                    found.append((a.attempt, taken))
        return found

    def profile(
        self,
        job_id: str,
        steps: int = profiles.DEFAULT_STEPS,
        timeout: float = profiles.DEFAULT_TIMEOUT,
    ) -> Profile:
        """Ask every rank of the running job to profile its next ``steps`` steps
        (CAN_MANAGE_RUN, as for its stacks: it slows them); the profile, to wait on and
        finish (``perf.profiles``). A session profiles the cell it runs, onto its run."""
        job = self.get(job_id, Level.CAN_MANAGE_RUN)
        attempts = self.store.attempts(job.id)
        if job.done or not attempts:
            raise Conflict(f"job {job.id} runs no rank now ({job.status.lower()}): no profile")
        attempt = attempts[-1]
        where = AttemptDir(self.store.attempt_dir(job.id, attempt.attempt))
        run_id = attempt.run_id
        if job.spec.kind is JobKind.SESSION:
            from .sessions.cells import latest

            cell = latest(JobDir(self.store.job_dir(job.id)))
            if cell is None or cell.ended is not None:
                raise Conflict(f"session {job.id} runs no cell now: profile one while it runs")
            where, run_id = where.late_cell(cell.cell), cell.run_id or None
        try:
            return profiles.request(
                where.perf,
                steps=steps,
                ranks=job.spec.compute.world_size,
                by=self.caller.name,
                job_id=job.id,
                attempt=attempt.attempt,
                run_id=run_id,
                tracking_uri=job.spec.tracking.tracking_uri,
                timeout=timeout,
            )
        except profiles.BadRequest as err:
            raise Refused("steps", str(err)) from None
        except profiles.Busy as err:
            raise Conflict(str(err)) from None
        except OSError as err:  # another user's files: ask where the job's owner can
            raise Conflict(f"cannot ask the ranks of job {job.id}: {err}") from None

    def profiles(self, job_id: str) -> tuple[Job, list[Profile]]:
        """The job (CAN_VIEW) and the profiles asked of it, oldest first."""
        job = self.get(job_id)
        return job, profiles.of_job(self.store.job_dir(job.id))

    def wait(self, job: Job, timeout: float) -> Job:
        """The job (already read by the caller) once it ended, or as it is after
        ``timeout`` seconds."""
        return cancel.wait(self.store, job.id, timeout)

    def access(self, job_id: str) -> JobAccess:
        """The job's owner and grants (CAN_VIEW)."""
        self.get(job_id)
        return self.store.access(job_id)

    def change_access(
        self, job_id: str, grants: tuple[Grant, ...] = (), revoke: tuple[Principal, ...] = ()
    ) -> tuple[JobAccess, MirrorReport | None]:
        """Grant and revoke (CAN_MANAGE, checked in the change's own transaction), then
        the same on the job's MLflow experiment (its report; the job grant holds
        whatever MLflow says)."""
        job = self.get(job_id)
        access = self.store.change_access(job.id, self.caller, grants, revoke)
        return access, mirror(self.store, job, grants, revoke)
