"""The supervisor: one process per job, in its own session, owning the job's attempts.

``python -m jupyter_air.jobs.supervision.supervisor JOB_ID [--watch-pid PID]``. It
starts the ranks of each attempt, writes every node's system metrics into the attempt's
metrics journal (``system_feed``; a warm session's for its running cell's run too),
stops every rank when one fails, retries up to ``max_retries`` times (a new MLflow run
per attempt), and takes the job down when it is cancelled or the kernel that follows it
dies. It imports no MLflow: the user's tail process (``run_tails``), which keeps MLflow
loaded, makes the runs the kernel did not (here only if no tail process answers), ships
the journal to the run while the attempt runs, and does each run's tail (its last
metrics, its end, its logs) after it, keeping what the server does not take and trying
it again. The job's end is recorded before anything on the MLflow side, so nothing
there changes or delays a job's outcome.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from ...job_dir import AttemptDir, JobDir, replace_json
from ...notify.courier import ensure_courier
from ...perf.marks import PERF_DIR_ENV
from ...procs import alive
from ...status import JobStatus, Outcome
from ...tracking import journal, probe
from ...tracking.energy import jobs_grid_intensity
from ...tracking.run_tails import (
    SHIP_INTERVAL,
    Answer,
    Live,
    NewRun,
    NoAnswer,
    Tail,
    ensure_running,
    follow,
    hand_over,
    is_followed,
    make_run,
    resume_pending,
    unfollow,
)
from ...tracking.targets import bound_requests, quiet_retries
from .. import backends, checkpoints, debugger, guard_hook
from ..attempt_progress import of_session
from ..backends.base import AttemptContext, Nodes
from ..hangs import NAMED, stuck
from ..node import stacks
from ..node.hints import HANG_HINT, SILENT_HINT, Hint, HintRecorder
from ..node.outcome import AttemptEnd
from ..node.reaper import Reaper
from ..sharing import as_changes, mirror
from ..spec import JobKind, JobSpec
from ..store import JobStore
from .guard_feed import GuardFeed
from .notifier import JobNotifier
from .perf_feed import PerfFeed
from .system_feed import SystemMetricsFeed

log = logging.getLogger("jupyter_air.supervisor")

#: Seconds between two system-metrics samples of a run (MLflow's own default).
METRICS_INTERVAL = float(os.environ.get("AIR_SYSTEM_METRICS_INTERVAL", "10"))
#: Seconds the supervisor waits, at its end, for its reaper to sweep what the job left.
REAPER_WAIT = 15.0
#: Seconds the attempt's end waits for a deferred run's making under way.
RUN_STOP_WAIT = 5.0
#: Seconds the supervisor's end waits for its notifications' first try (the courier
#: tries again what is left).
NOTIFY_WAIT = 30.0
#: Seconds a cancel after a likely hang waits for the ranks' stacks before it stops them.
STACKS_BEFORE_CANCEL = 5.0
#: Seconds between two asks of a tracking server for a deferred attempt's run.
DEFERRED_RETRY = float(os.environ.get("AIR_DEFERRED_RUN_RETRY", "10"))


class Tracking:
    """The supervisor's MLflow side: a run to make when no tail process answers.

    ``import mlflow`` costs about 2 s of CPU and 200 MB, taken from the ranks. So the
    user's tail process, which keeps MLflow loaded, makes each attempt's run, ships its
    journal while it runs (``run_tails.Live``) and does its tail: MLflow is imported
    here only when no tail process answers for a new run.
    """

    def __init__(
        self,
        spec: JobSpec,
        experiment_id: str | None,
        home: Path,
        on_experiment: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._spec = spec.tracking
        #: The experiment's id: the spec's, or the one made here for a named experiment.
        self.experiment_id = experiment_id
        self._home = home
        self._on_experiment = on_experiment
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None  # (client, tracking.runs) once imported

    def _mlflow(self) -> tuple[Any, Any]:
        with self._lock:
            if self._loaded is None:
                from mlflow import MlflowClient

                from ...tracking import runs

                # MlflowClient opens (and, for a new sqlite store, migrates) the store at
                # once: under the store's lock, or a kernel creating it too fails that.
                with runs.quiet_store_setup(self._spec.tracking_uri):
                    self._loaded = (MlflowClient(self._spec.tracking_uri), runs)
            return self._loaded

    def new_run(self, job_id: str, attempt: int, tags: dict[str, str]) -> str:
        """The attempt's run: made by the tail process unless MLflow is loaded here
        already, and here when the tail process cannot answer."""
        tags = {"air.job_id": job_id, **tags, "air.attempt": str(attempt)}
        if self._loaded is None:
            made = self._made_by_tail_process(job_id, attempt, tags)
            if made is not None:
                return made
        client, runs = self._mlflow()
        return str(
            runs.start_run(
                client,
                self._experiment_id(client, runs),
                tags,
                self._spec.run_name,
                self._spec.parent_run_id,
            )
        )

    def recipe(self, job_id: str, attempt: int, tags: dict[str, str]) -> NewRun:
        """What the tail process needs to make the attempt's run."""
        w = self._spec
        tags = {"air.job_id": job_id, **tags, "air.attempt": str(attempt)}
        return NewRun(
            job_id,
            attempt,
            w.tracking_uri or "",
            self.experiment_id,
            w.experiment_name,
            w.artifact_location,
            tags,
            w.run_name,
            w.parent_run_id,
        )

    def _made_by_tail_process(self, job_id: str, attempt: int, tags: dict[str, str]) -> str | None:
        """The run's id, or None when the tail process did not answer (MLflow's own
        refusal is raised: it would refuse here too)."""
        request = self.recipe(job_id, attempt, tags)
        try:
            made = make_run(self._home, request)
        except NoAnswer as err:
            log.warning("%s: attempt %d's run is made here", err, attempt)
            return None
        if self.experiment_id is None:
            self.experiment_id = made.experiment_id
            self._on_experiment(made.experiment_id)
        return made.run_id

    def _experiment_id(self, client: Any, runs: Any) -> str:
        """The workload's experiment. One only named (``air run`` imports no MLflow) is
        made here, before the first run, and its id given to ``on_experiment``."""
        w = self._spec
        if self.experiment_id is None:
            assert w.experiment_name is not None
            assert w.tracking_uri is not None
            with runs.quiet_store_setup(w.tracking_uri):  # a new store: migrated once
                self.experiment_id = runs.ensure_experiment(
                    client, w.experiment_name, w.artifact_location
                )
            self._on_experiment(self.experiment_id)
        return self.experiment_id


class Followed:
    """The attempt as the user's tail process follows it while its ranks run (its
    journal shipped, its run kept running: ``run_tails.Live``), until ``end``. A tail
    process that died meanwhile is started again within ``SHIP_INTERVAL * 10`` s."""

    def __init__(self, home: Path, live: Live) -> None:
        self._home = home
        self._live = live
        self._over = threading.Event()
        if live.tracking_uri:
            follow(home, live)
            threading.Thread(target=self._keep, name="air-followed", daemon=True).start()

    def run_made(self, run_id: str) -> None:
        """A deferred attempt's run, made while it runs: shipped to from now on."""
        self._live = replace(self._live, run_id=run_id)
        if not self._over.is_set():
            follow(self._home, self._live)

    def _keep(self) -> None:
        while not self._over.wait(SHIP_INTERVAL * 10) and is_followed(self._home, self._live):
            ensure_running(self._home)

    def end(self) -> None:
        """Called when the attempt's ranks have all exited, before anyone is told (the
        kernel ends the run then): the run is never put back to running after this."""
        self._over.set()
        unfollow(self._home, self._live.job_id, self._live.attempt)


@dataclass
class RunRef:
    """An attempt's run: None until it is made (``tracking: deferred``, its server down)."""

    id: str | None


class DeferredRun:
    """Makes the run of an attempt that started without one, once its tracking server
    answers (asked every ``DEFERRED_RETRY`` seconds while the attempt runs; its tail
    makes it after that): recorded with the attempt, and its journal's lines, written
    for "the attempt's run", are shipped to it from then on."""

    def __init__(self, make: Callable[[], str | None], run: RunRef) -> None:
        self._make = make
        self._run = run
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="air-deferred-run", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        failing: str | None = None
        while self._run.id is None and not self._stop.wait(DEFERRED_RETRY):
            try:
                self._run.id = self._make()
            except Exception as err:
                if repr(err) != failing:  # once an outage, not at each ask
                    log.warning("the attempt's run is not made yet, will ask again: %r", err)
                failing = repr(err)

    def stop(self) -> None:
        """No more asks; one under way is waited for ``RUN_STOP_WAIT`` seconds, so that
        the tail does not make a second run beside it (the run it makes is written
        beside the attempt, where the tail looks first)."""
        self._stop.set()
        self._thread.join(RUN_STOP_WAIT)


@dataclass
class Attempt:
    """One attempt as the supervisor holds it between its start and its finish."""

    number: int
    run: RunRef
    files: AttemptDir
    followed: Followed
    metrics: SystemMetricsFeed
    hints: HintRecorder
    deferred: DeferredRun | None
    #: How its run is made (by its tail, if it is not made while it runs).
    recipe: NewRun
    #: The checkpoint it resumes from, if any.
    resume: checkpoints.Found | None = None


class Supervisor:
    """A job's attempts: each is started, run and finished; ``run`` guards them all, so
    the job's end is recorded, with its real cause, whatever fails."""

    def __init__(self, store: JobStore, job_id: str, watch_pid: int | None) -> None:
        self.store = store
        self.job = store.get(job_id)
        self.spec = self.job.spec
        self.backend = backends.get(self.spec.backend.name)
        self.watch_pid = watch_pid
        self._cancelled = threading.Event()
        self._over = threading.Event()
        self._follower_gone = False
        self._started = time.time()
        self._ranks: Nodes | None = None
        self._open: int | None = None  # the attempt recorded as started, not yet as ended
        self._tracking = Tracking(
            self.spec, self.job.experiment_id, store.home, self._experiment_made
        )
        self.notifier = JobNotifier(store, job_id)
        self._stacks_asked = threading.Event()
        #: The open attempt's likely-hang hint, once one fired: a cancel takes stacks first.
        self._hang: str | None = None
        threading.Thread(target=self._answer_stacks, name="air-stacks", daemon=True).start()

    def cancel(self, *_: Any) -> None:
        if self._hang is not None and not self._cancelled.is_set() and self._ranks is not None:
            # Where the hung ranks are, before they go: bounded, so the cancel still acts
            # within seconds (on a thread: this may run in a signal handler).
            taking = threading.Thread(
                target=self._take_stacks, args=(f"cancelled after {self._hang}",), daemon=True
            )
            taking.start()
            taking.join(STACKS_BEFORE_CANCEL)
        self._cancelled.set()
        if self._ranks is not None:
            self._ranks.cancel()

    def ask_stacks(self, *_: Any) -> None:
        """SIGUSR2: ``air stacks`` or the server left a request in the attempt's directory."""
        self._stacks_asked.set()

    def _answer_stacks(self) -> None:
        """Each request of any attempt's directory gets a set: the open attempt's running
        ranks', or an empty one saying that attempt does not run."""
        while True:
            self._stacks_asked.wait()
            self._stacks_asked.clear()
            try:
                for files in JobDir(self.store.job_dir(self.job.id)).attempts():
                    names = stacks.requests(files.path)
                    if not names:
                        continue
                    number, ranks = self._open, self._ranks
                    if number == files.number and ranks is not None:
                        reason, taken = "asked for", ranks.stacks()
                    else:
                        reason, taken = f"attempt {files.number} does not run", []
                    for name in names:
                        stacks.save(files.path, name, reason, taken)
                        stacks.answered(files.path, name)
            except Exception:
                log.exception("the ranks' stacks were not taken")

    def _take_stacks(self, reason: str) -> stacks.StackSet | None:
        """A set of the open attempt's stacks and recorders, saved with it (a hang, a
        cancel after one)."""
        try:
            number, ranks = self._open, self._ranks
            if number is None or ranks is None:
                return None
            where = stacks.save(
                self.store.attempt_dir(self.job.id, number),
                stacks.new_name(),
                reason,
                ranks.stacks(),
            )
            log.info("the ranks' stacks (%s): %s", reason, where)
            return stacks.read(where.parent.parent, where.name)
        except Exception:
            log.exception("the ranks' stacks were not taken")
            return None

    def _name_hang(self, number: int, key: str, hint: str, hints: HintRecorder) -> None:
        """A likely hang: the collective the ranks wait in, named from their recorders in
        the attempt's hints, and one notification that says it (``jobs.hangs``)."""
        taken = self._take_stacks(hint)
        hang = taken.hang if taken is not None else None
        if hang is None or hang.kind not in NAMED:
            self.notifier.hint(number, key, hint)
            return
        try:
            hints.hang(Hint(HANG_HINT, hang.line, float(hang.seq or 0)))
        except Exception:  # the notification still says it
            log.exception("the named hang is not in the hints")
        self.notifier.hint(number, key, hang.line, (hint, hang.line, *hang.details))

    def _name_stall(self, number: int, silent: float, hints: HintRecorder) -> None:
        """Every rank silent a while (GPUs or none): a likely hang when their recorders
        show them stuck in a collective (``hangs.stuck``), said as the silent-rank hint's
        is, with its stacks kept; nothing is kept or said otherwise."""
        ranks = self._ranks
        if self._hang is not None or ranks is None or self._open != number:
            return
        try:
            taken = ranks.stacks()
            hang = stacks.hang_of(taken, time.time())
            if hang is None or not stuck(hang, {s.rank: s.text for s in taken}):
                return
            reason = f"every rank silent for {silent:.0f} s"
            self._hang = reason
            stacks.save(
                self.store.attempt_dir(self.job.id, number), stacks.new_name(), reason, taken
            )
            hints.hang(Hint(HANG_HINT, hang.line, float(hang.seq or 0)))
        except Exception:
            log.exception("the silent ranks' recorders were not read")
            return
        key = Hint(SILENT_HINT, reason, silent).tag  # one notification, as the silent rank's
        self.notifier.hint(
            number, key, hang.line, (f"likely hang: {reason}", hang.line, *hang.details)
        )

    def _with_grants(self, recipe: NewRun) -> NewRun:
        """The recipe of a run the tail process makes late, with the job's grants as they
        are now: that process mirrors them on the run's experiment."""
        try:
            grants = self.store.access(self.job.id).grants
        except Exception as err:  # the run's tail matters more than its grants
            log.warning("the job's grants not given to its late run: %r", err)
            return recipe
        return replace(recipe, grants=as_changes(grants))

    def _experiment_made(self, experiment_id: str) -> None:
        """The experiment the submitter named, now made: recorded with the job (its links
        need the id) and given the job's grants, as a kernel's submission does."""
        self.store.set_experiment(self.job.id, experiment_id)
        job = self.store.get(self.job.id)
        try:
            report = mirror(self.store, job, self.store.access(job.id).grants)
        except Exception as err:  # the job runs all the same; its owner can retry the grants
            log.warning("the job's grants not set on experiment %s: %r", experiment_id, err)
            return
        for line in report.lines() if report else []:
            log.info("MLflow permissions: %s", line)

    def _watch_kernel(self) -> None:
        """A kernel that dies takes its (non-background) job with it. It can no longer end
        its run nor read the result: ``run`` does what it would have done."""
        assert self.watch_pid is not None
        while not self._cancelled.wait(1.0) and not self._over.is_set():
            # A process started after this one holds a reused pid: the kernel is gone.
            if not alive(self.watch_pid, started_by=self._started):
                log.warning("kernel %d is gone: cancelling job %s", self.watch_pid, self.job.id)
                self._follower_gone = True
                self.cancel()
                return

    def run(self) -> int:
        """Every attempt, then the job's end; whatever the job started, and its pickled
        payload, go when this process does, however it ends (see ``reaper``)."""
        from ..retention import prune_in_background, retention_days

        prune_in_background(self.store, retention_days())
        reaper = Reaper({"AIR_JOB_ID": self.job.id})
        if self.spec.kind is JobKind.PYTHON:
            reaper.remove(JobDir(self.store.job_dir(self.job.id)).payload)
        try:
            return self._guarded(reaper)
        finally:
            reaper.close(wait=REAPER_WAIT)
            self.notifier.close(wait=NOTIFY_WAIT)

    def _guarded(self, reaper: Reaper) -> int:
        """The attempts under one guard: an error anywhere (MLflow or SQLite while a
        retry's run is made, a bug) ends the open attempt and the job with that cause,
        never with "supervisor ended without recording the end"."""
        end = AttemptEnd(Outcome.CANCELLED, message="cancelled before it started")
        try:
            self.store.update(
                self.job.id,
                status=JobStatus.RUNNING,
                started=time.time(),
                supervisor_pid=os.getpid(),
            )
            self.notifier.started(time.time())
            if self.watch_pid is not None:
                threading.Thread(
                    target=self._watch_kernel, name="air-kernel-watch", daemon=True
                ).start()
            last = self.spec.policy.max_retries + 1
            for number in range(1, last + 1):
                if self._cancelled.is_set():
                    break
                attempt = self._start(number, reaper)
                end = self._run_attempt(attempt, reaper)
                over = (
                    end.status is not Outcome.FAILED
                    or end.final
                    or number == last
                    or self._cancelled.is_set()
                )
                self._finish(attempt, end, over, reaper)
                if over:
                    return 0 if end.status is Outcome.SUCCEEDED else 1
                self.notifier.retry(number)
        except Exception as err:
            log.exception("the supervisor failed")
            end = AttemptEnd(Outcome.FAILED, message=f"the supervisor failed: {err!r}")
            if self._open is not None:
                self._record_attempt_end(self._open, end)
        if not self._over.is_set():
            self._end_job(end)
        self._end_unstarted_run(end)
        return 1

    def _start(self, number: int, reaper: Reaper) -> Attempt:
        """The attempt's run (the kernel's for the first, else a new one; none yet for a
        deferred job whose server does not answer) and its record, its hints and system
        metrics."""
        job, spec, tracking = self.job, self.spec, self._tracking
        first_run = spec.tracking.first_run_id
        tags = dict(spec.tracking.tags)
        resume = self._resume_point(number)
        if resume is not None:
            tags.update(self._resume_tags(resume))
        if number == 1 and first_run:
            run = RunRef(first_run)
        elif spec.tracking.deferred and not self._answers():
            run = RunRef(None)
        else:
            run = RunRef(tracking.new_run(job.id, number, tags))
        self.store.start_attempt(job.id, number, run.id)
        self._open = number
        files = AttemptDir(self.store.attempt_dir(job.id, number)).make()
        if resume is not None:
            files.write_resumed(str(resume.path), resume.step)
            if number == 1 and first_run:  # the kernel made the run: where it starts
                journal.append_tags(files, first_run, self._resume_tags(resume))
        if spec.policy.background:
            reaper.remove(files.result)  # nobody reads a background job's value

        def tag(key: str, value: str) -> None:
            if key.endswith(SILENT_HINT):  # where the ranks are stuck, while they are
                self._hang = value
                threading.Thread(  # notified once the collective they wait in is named
                    target=self._name_hang,
                    args=(number, key, value, hints),
                    name="air-stacks-hang",
                    daemon=True,
                ).start()
            elif not key.endswith(HANG_HINT):  # the hang's is in the likely hang's
                self.notifier.hint(number, key, value)
            # journaled, shipped with the points: a server that is down loses no hint
            journal.append_tags(files, run.id or journal.ATTEMPT_RUN, {key: value})

        session = JobDir(self.store.job_dir(job.id)) if spec.kind is JobKind.SESSION else None

        def stalled(silent: float) -> None:
            """Every rank silent: read where they are (a session between cells waits for
            its next cell, as it should)."""
            if session is None or ((cell := of_session(session)) is not None and cell[1]):
                threading.Thread(
                    target=self._name_stall,
                    args=(number, silent, hints),
                    name="air-stall",
                    daemon=True,
                ).start()

        hints = HintRecorder(  # a warm session's step marks are its latest cell's
            files.path,
            tag,
            nnodes=spec.compute.nnodes,
            marks=lambda: (cell[0] if session and (cell := of_session(session)) else files).perf,
            on_stall=stalled,
        )
        metrics = SystemMetricsFeed(
            run.id or journal.ATTEMPT_RUN,
            files,
            spec.compute.nnodes,
            session,
            jobs_grid_intensity(self.store.home),  # for its grams of CO2
        )
        uri = spec.tracking.tracking_uri or ""
        live = Live(job.id, number, run.id or "", uri, str(files.path), os.getpid(), time.time())
        followed = Followed(self.store.home, live)  # last: nothing after it fails
        deferred = None
        if run.id is None:

            def make() -> str | None:
                if not self._answers():
                    return None
                made = tracking.new_run(job.id, number, tags)
                self.store.set_attempt_run(job.id, number, made)
                files.write_late_run(made, tracking.experiment_id or "")
                followed.run_made(made)
                return made

            deferred = DeferredRun(make, run)
        recipe = tracking.recipe(job.id, number, tags)
        return Attempt(number, run, files, followed, metrics, hints, deferred, recipe, resume)

    @property
    def _checkpoint_place(self) -> Path:
        return checkpoints.place_of(
            self.store.job_dir(self.job.id), self.spec.program.checkpoint_dir
        )

    def _resume_point(self, number: int) -> checkpoints.Found | None:
        """Where attempt ``number`` starts from: a retry, from the latest complete
        checkpoint this job saved; otherwise, or before any, from the one its submission
        named (``--resume JOB``), or that job's latest if that one went meanwhile. One
        that cannot be trusted (see ``checkpoints.untrusted``) is said, never loaded."""
        try:
            found = None
            problem = checkpoints.untrusted(self._checkpoint_place) if number > 1 else None
            if problem is not None:
                log.error("attempt %d resumes from none of its checkpoints: %s", number, problem)
            elif number > 1:
                found = checkpoints.latest(self._checkpoint_place, since=self.job.created)
            if found is None:
                found = self._named_resume_point()
        except Exception as err:  # the attempt starts afresh; it never fails for this
            log.error("no checkpoint to resume attempt %d from: %r", number, err)
            return None
        if found is not None and not checkpoints.owned(found):
            log.error("attempt %d starts afresh: a file in %s is not yours", number, found.path)
            return None
        return found

    def _named_resume_point(self) -> checkpoints.Found | None:
        given, other = self.spec.program.resume_from, self.spec.program.resume_job
        found = checkpoints.at(Path(given)) if given else None
        if given and found is None and other:
            log.warning("checkpoint %s went: job %s's latest now", given, other)
            recorded = self.store.get(other).spec.program.checkpoint_dir
            place = checkpoints.place_of(self.store.job_dir(other), recorded)
            found = None if checkpoints.untrusted(place) else checkpoints.latest(place)
        return found

    def _resume_tags(self, found: checkpoints.Found) -> dict[str, str]:
        """The run's account of where it started: the checkpoint, its step, and the run
        (of this job's attempts) or the job that saved it."""
        tags = {"air.resumed_from": str(found.path), "air.resumed_layout": str(found.layout)}
        if found.step is not None:
            tags["air.resumed_step"] = str(found.step)
        other = self.spec.program.resume_job
        if other and not found.path.is_relative_to(self._checkpoint_place):
            tags["air.resumed_from_job"] = other
            return tags
        writers = [a for a in self.store.attempts(self.job.id) if a.started <= found.written]
        if writers:
            tags["air.resumed_from_attempt"] = str(writers[-1].attempt)
            if writers[-1].run_id:
                tags["air.resumed_from_run"] = writers[-1].run_id
        return tags

    def _answers(self) -> bool:
        """Whether the job's tracking server answers now (a store that is a file does)."""
        try:
            probe.check(self.spec.tracking.tracking_uri or "")
        except probe.Unreachable as err:
            log.warning("%s: the attempt runs, its run is made once it answers", err)
            return False
        return True

    def _run_attempt(self, attempt: Attempt, reaper: Reaper) -> AttemptEnd:
        """The attempt's ranks, on its backend, until every one has exited."""
        self._ranks = None  # a failure to make this attempt's must not close the last's
        perf = PerfFeed(attempt.files, attempt.run.id or journal.ATTEMPT_RUN, METRICS_INTERVAL)
        guards: GuardFeed | None = None
        try:
            self._ranks = ranks = self._nodes(attempt, reaper)
            attempt.metrics.ask_sample = self._ranks.sample_now
            if self._cancelled.is_set():
                self._ranks.cancel()
            guards = GuardFeed(  # the job's guards, on the points its ranks journal
                attempt.files,
                self.spec.policy.guards,
                ranks.cancel,
                lambda fired: self.notifier.guard(attempt.number, str(fired.guard), fired.reason),
            )
            end = self._ranks.run(timeout=self.spec.policy.timeout)
            guards.finish()
            return guards.outcome(end)  # a guard that stopped the ranks says why
        except Exception as err:  # a bug or a lost cluster: the job still gets an end
            log.exception("attempt %d", attempt.number)
            return AttemptEnd(Outcome.FAILED, message=f"the supervisor failed: {err!r}")
        finally:
            if guards is not None:
                guards.finish()
            perf.finish()  # the ranks' last step marks, into the run
            attempt.hints.close()  # their step marks are read for stragglers no more

    def _finish(self, attempt: Attempt, end: AttemptEnd, over: bool, reaper: Reaper) -> None:
        """Record the attempt's end (and the job's, when it is over) before anything on
        the MLflow side, which may fail or take long and changes no outcome; then hand the
        run's tail over (see ``run_tails``)."""
        attempt.followed.end()
        self._record_attempt_end(attempt.number, end)
        self._list_checkpoints(attempt)
        # A kernel following the job learns at once (and ends the run itself too); the
        # outcome of any job is known when its ranks have ended, not after its run's tail.
        if over:
            self._end_job(end)
        try:
            if self._ranks is not None:
                self._ranks.close()
        except Exception as err:
            log.error("could not release attempt %d's ranks: %s", attempt.number, err)
        if not over or self._follower_gone:
            reaper.remove(attempt.files.result)  # a retry follows, or nobody reads it
        if over:  # what the job started is swept now: none of it waits for MLflow
            reaper.close(wait=REAPER_WAIT)
        self._end_run(attempt, end, over)

    def _list_checkpoints(self, attempt: Attempt) -> None:
        """The complete checkpoints the attempt saved, kept with it (its run lists them)
        and said by its end's tags (the latest)."""
        started = next(
            (a.started for a in self.store.attempts(self.job.id) if a.attempt == attempt.number),
            self.job.created,
        )
        try:
            saved = checkpoints.complete(self._checkpoint_place, since=started)
            if saved:
                replace_json(attempt.files.checkpoints, checkpoints.listing(saved))
        except OSError as err:
            log.error("could not list the checkpoints of attempt %d: %s", attempt.number, err)

    def _record_attempt_end(self, number: int, end: AttemptEnd) -> None:
        self._open = None
        self.store.end_attempt(
            self.job.id,
            number,
            end.status.attempt_status,
            end.exit_codes,
            end.failed_rank,
            end.message,
        )

    def _end_job(self, end: AttemptEnd) -> None:
        self._over.set()  # the kernel may go now: what is left is this process's own work
        self.store.update(
            self.job.id, status=end.status.job_status, ended=time.time(), message=end.message
        )
        self.notifier.ended(end.status)

    def _end_run(self, attempt: Attempt, end: AttemptEnd, over: bool) -> None:
        """The run's last metrics, its end and its logs, whoever follows the job; a
        failure is logged here (and the logs' in the run's tags)."""
        attempt.metrics.finish()
        if attempt.deferred is not None:
            attempt.deferred.stop()  # its tail makes the run if it is not made yet
        # A local job ended before its first sample: the tail process samples this
        # machine. A remote node samples at its end.
        sampled = attempt.metrics.sampled or self.backend.samples_at_close
        tail = Tail(
            self.job.id,
            attempt.number,
            attempt.run.id or journal.ATTEMPT_RUN,
            str(end.status),
            self.spec.tracking.tracking_uri or "",
            str(attempt.files.path),
            sample=not sampled,
            new_run=None if attempt.run.id else asdict(self._with_grants(attempt.recipe)),
            end_tags=end_tags(end),
        )
        try:
            answer = hand_over(self.store.home, tail)
        except Exception as err:  # the spool cannot be written: the outcome stands
            answer = Answer(repr(err), repr(err))
        self.notifier.tracking_refused(attempt.number, attempt.files)
        if answer.metrics_error:
            log.error(
                "rank 0's metrics of attempt %d wait in %s: %s",
                attempt.number,
                attempt.files.metrics_journal,
                answer.metrics_error,
            )
        if answer.end_error:
            log.error("could not end MLflow run %s: %s", attempt.run.id, answer.end_error)
        if answer.logs_error:
            log.error(
                "could not attach logs of attempt %d to run %s: %s",
                attempt.number,
                attempt.run.id,
                answer.logs_error,
            )

    def _end_unstarted_run(self, end: AttemptEnd) -> None:
        """The kernel's run of a job that ended before its first attempt started."""
        first_run = self.spec.tracking.first_run_id
        try:
            if first_run and not self.store.attempts(self.job.id):
                files = AttemptDir(self.store.attempt_dir(self.job.id, 1))
                tail = Tail(
                    self.job.id,
                    1,
                    first_run,
                    str(end.status),
                    self.spec.tracking.tracking_uri or "",
                    str(files.path),
                    sample=False,
                )
                hand_over(self.store.home, tail)
        except Exception as err:
            log.error("could not end MLflow run %s: %s", first_run, err)

    def _nodes(self, attempt: Attempt, reaper: Reaper) -> Nodes:
        tracking = self.spec.tracking
        mlflow_env = {
            "MLFLOW_TRACKING_URI": tracking.tracking_uri or "",
            "MLFLOW_EXPERIMENT_ID": self._tracking.experiment_id or "",
            "MLFLOW_RUN_ID": attempt.run.id or "",  # "": made once its server answers
            journal.JOURNAL_ENV: str(attempt.files.metrics_journal),
            PERF_DIR_ENV: str(attempt.files.perf),  # every rank's step marks
        }
        place = self._checkpoint_place
        try:
            checkpoints.make_place(place)
        except OSError as err:  # said here; the ranks' own saving says it to the user
            log.error("cannot make the checkpoint place %s: %s", place, err)
        resume = checkpoints.resume_env(attempt.resume) if attempt.resume else {}
        place_env = {
            **guard_hook.rank_env(self.spec.policy.guards, attempt.files.path),
            checkpoints.CHECKPOINT_DIR_ENV: str(place),
            checkpoints.JOB_STARTED_ENV: repr(self.job.created),
            **resume,
        }
        context = AttemptContext(
            job_id=self.job.id,
            attempt=attempt.number,
            spec=self.spec,
            files=JobDir(self.store.job_dir(self.job.id)),
            env={
                **self.spec.program.env,
                **mlflow_env,
                **place_env,
                **debugger.rank_env(self.spec.program.debug_ticket),
            },
            hints=attempt.hints,
            reaper=reaper,
            on_metrics=attempt.metrics.add,
            metrics_interval=METRICS_INTERVAL,
            on_queued=self._queued,
        )
        return self.backend.start(context)

    def _queued(self, line: str | None) -> None:
        """The job is PENDING again while the cluster's queue holds its attempt, with
        the queue's word as its message (``PENDING (Resources), Slurm job 4242``)."""
        if self._over.is_set():
            return
        status = JobStatus.PENDING if line is not None else JobStatus.RUNNING
        self.store.update(self.job.id, status=status, message=line)


def end_tags(end: AttemptEnd) -> dict[str, str]:
    """What the run says of a failed attempt: the cause (a rank's death explained, an
    exit code, a timeout) and the rank, where MLflow's UI and a search show them."""
    if end.status is not Outcome.FAILED or not end.message:
        return {}
    tags = {"air.failure": end.message[:MAX_TAG]}
    if end.failed_rank is not None:
        tags["air.failed_rank"] = str(end.failed_rank)
    return tags


#: Characters of a tag's value: MLflow's own limit is 8000.
MAX_TAG = 5000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Supervise one jupyter_air job.")
    parser.add_argument("job_id")
    parser.add_argument("--watch-pid", type=int, help="cancel the job when this process exits")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    bound_requests()  # before MLflow is imported, and for the ranks too
    quiet_retries()
    store = JobStore()
    resume_pending(store.home)  # what an earlier job still owes its server is tried again
    if store.outbox.next_due() is not None:  # and the notifications a courier left
        ensure_courier(store.home)
    supervisor = Supervisor(store, args.job_id, args.watch_pid)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        supervisor.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGUSR2, supervisor.ask_stacks)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
