"""A sweep's driver: ``python -m jupyter_air.sweeps.driver ID``, one process per sweep.

Detached like a job's supervisor and the scheduler (a session of its own, no terminal),
so a closed shell or a dead kernel does not stop the sweep. One per sweep: it holds
``sweeps/ID.lock`` (flock) while it lives and writes its pid and start time to
``sweeps/ID.driver.json``. Once the job store changed (a trial's job may have ended),
at least every second (every ``POLL`` seconds with a pruner), or at once when woken
(SIGUSR1), it looks at each running trial's job: the objective's new points from its journal go to
the pruner (a trial to prune is cancelled through the jobs service and recorded PRUNED
at its step), an ended job is told to Optuna (its last point, or FAIL); then it starts
trials until ``parallel`` run or ``trials`` were asked. Everything it decides is in the
study first, so a driver killed at any point and started again (``air sweep resume``)
adopts the trials whose jobs run, submits a trial asked but never submitted, and runs no
trial twice. SIGTERM ends the driver alone (its trials run on, to be adopted); a sweep
asked to stop (STOPPING) has its trials cancelled, then ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import optuna
from optuna.trial import TrialState

from ..identity import Identity
from ..jobs import backends
from ..jobs.env import gpu_count, job_free_env, visible_gpus
from ..jobs.follow import LOOK_EVERY, StoreChanges, outcome
from ..jobs.service import Conflict, JobService, Refused
from ..jobs.store import JobStore, UnknownJob
from ..paths import private_opener, write_private
from ..procs import alive
from ..status import JobStatus
from ..wakeup import Wakeup
from . import notices, space, store, trials
from .store import Sweep, SweepStatus, SweepStore
from .sweep_file import PrunerName

log = logging.getLogger("jupyter_air.sweeps.driver")

#: Seconds between two looks at the running trials' journals, for a pruner.
POLL = 0.5
#: Seconds between two asks whether the job store changed (a few microseconds each).
QUICK = 0.1
#: What a trial's job is submitted with: the GPUs its ranks take theirs among.
CUDA = "CUDA_VISIBLE_DEVICES"
#: Seconds before a look that failed is tried again.
RETRY = 5.0
#: How long a new driver waits for the lock of one that is exiting.
LOCK_WAIT = 10.0


@dataclass(frozen=True)
class DriverInfo:
    """A running driver: its pid, its start time (Unix seconds) and its log."""

    pid: int
    started: float
    log: Path

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "started": self.started, "log": str(self.log)}


def _files(home: Path, sweep_id: str) -> tuple[Path, Path, Path]:
    """The driver's record, lock and log."""
    folder = home / store.DIR
    return (
        folder / f"{sweep_id}.driver.json",
        folder / f"{sweep_id}.lock",
        folder / f"{sweep_id}.log",
    )


def running(home: Path, sweep_id: str) -> DriverInfo | None:
    """The sweep's driver, if one runs."""
    record, _, log_file = _files(home, sweep_id)
    try:
        doc = json.loads(record.read_text())
        pid, started = int(doc["pid"]), float(doc["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not alive(pid, started_by=started):
        return None
    return DriverInfo(pid, started, log_file)


def last_words(home: Path, sweep_id: str) -> str:
    """The last line its drivers logged (why the last one exited), and where the log is."""
    _, _, log_file = _files(home, sweep_id)
    try:
        with open(log_file, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            lines = log.read().decode(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return f"{lines[-1].strip() if lines else 'it logged nothing'} (log: {log_file})"


def ensure_driver(home: Path, sweep_id: str, wait: float = 30.0) -> DriverInfo:
    """Start the sweep's driver unless one runs (then wake it: it looks now)."""
    info = running(home, sweep_id)
    if info is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGUSR1)
        return info
    _, _, log_file = _files(home, sweep_id)
    with open(log_file, "ab", opener=private_opener) as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.sweeps.driver", sweep_id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**job_free_env(os.environ), "AIR_HOME": str(home)},
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        info = running(home, sweep_id)
        if info is not None:
            return info
        if process.poll() is not None and running(home, sweep_id) is None:
            break  # it ended at once: another driver held the lock, or it failed
        time.sleep(0.05)
    info = running(home, sweep_id)
    if info is None:
        raise RuntimeError(f"the sweep's driver did not start: see {log_file}")
    return info


def stop_driver(home: Path, sweep_id: str, wait: float = 10.0) -> DriverInfo | None:
    """End the sweep's driver (its trials run on); the one ended, or None."""
    info = running(home, sweep_id)
    if info is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while alive(info.pid, started_by=info.started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return info


class Driver:
    """The loop of one sweep."""

    def __init__(self, sweeps: SweepStore, jobs: JobStore, sweep_id: str) -> None:
        self.sweeps = sweeps
        self.jobs = jobs
        self.sweep = sweeps.get(sweep_id)
        self.service = JobService(jobs, Identity(self.sweep.owner))
        self.study = sweeps.study(self.sweep)
        self.distributions = space.distributions(self.sweep.spec)
        self.planned = space.planned(self.sweep.spec)
        self.payload = sweeps.payload(self.sweep)
        self.readers: dict[int, trials.MetricReader] = {}
        self.cancelled: set[str] = set()
        self.gpus = self._gpus()
        self.changes = StoreChanges(jobs.path)
        self.woken = False
        self.stopping = False
        #: The sweep's run, once made (a driver started again knows it): the trials' runs'
        #: parent.
        self.parent: str | None = self.sweep.run_id
        #: Trials' runs not yet nested under the sweep's: their jobs were submitted
        #: before it existed (``nested``: those done; ``own_parent``: each job's answer).
        self.nested: set[str] = set()
        self.own_parent: dict[str, bool] = {}
        #: Tags for the trials' runs, set once this look's trials have started.
        self.due_tags: list[tuple[int, dict[str, Any]]] = []
        self.client: Any = None

    def _gpus(self) -> list[str]:
        """The GPUs this machine's trials share out, none to two at once: those the
        driver may use (its CUDA_VISIBLE_DEVICES, else all NVML sees); none on a
        cluster's backend (its own placement), or where the sweep asks to share them
        (``compute.oversubscribe``)."""
        spec = self.sweep.spec
        if backends.get(spec.backend).multi_node or spec.compute.oversubscribe:
            return []
        return visible_gpus(os.environ, gpu_count())

    def run(self, wakeup: Wakeup) -> None:
        while not self.stopping:
            try:
                if self._look():
                    return
            except Exception:  # a locked store, a tracking server gone: again soon, stay up
                log.exception("look failed")
                wakeup.sleep(RETRY)
                continue
            self._wait(wakeup)

    def _wait(self, wakeup: Wakeup) -> None:
        """Until the job store changed (a trial's job may have ended: the next starts at
        once), ``POLL`` seconds passed (a pruner reads the trials' journals, which the
        store does not see), or a signal came (``air sweep stop``)."""
        limit = POLL if self.sweep.spec.pruner.name is not PrunerName.NONE else LOOK_EVERY
        deadline = time.monotonic() + limit
        self.woken = False
        while not (self.stopping or self.woken) and time.monotonic() < deadline:
            wakeup.sleep(QUICK)
            if self.changes.since_last_look():
                return

    def _look(self) -> bool:
        """Follow the running trials, start the next ones; True once the sweep ended.
        The sweep's run is made after its first trials were submitted (MLflow's start in
        this process takes seconds they need not wait), and trials are followed once it
        exists (their runs nest under it); tags go to MLflow after the starts."""
        sweep = self.sweeps.get(self.sweep.id)
        if not sweep.status.active:
            return True  # ended by a driver that held the lock before
        if self.parent is not None:
            active = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            for frozen in active:
                self._follow(frozen, cancel=sweep.status is SweepStatus.STOPPING)
        running = len(self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        asked = len(self.study.get_trials(deepcopy=False))
        if sweep.status is SweepStatus.RUNNING:
            while running < sweep.spec.parallel and asked < self.planned:
                if not self._start():
                    break
                running, asked = running + 1, asked + 1
        if self.parent is None:
            self.parent = self._sweep_run()
            return False
        while self.due_tags:
            self._tag_run(*self.due_tags.pop(0))
        sweep = self.sweeps.get(self.sweep.id)
        if running == 0 and (asked >= self.planned or sweep.status is not SweepStatus.RUNNING):
            self._finish(sweep)
            return True
        return False

    # -- trials ------------------------------------------------------------------------

    def _start(self) -> bool:
        """Ask Optuna for the next trial and submit its job; False if none started: no
        GPUs free for it yet, or the sweep failed."""
        gpus = self._free_gpus()
        if self.gpus and gpus is None:
            return False
        trial = self.study.ask(self.distributions)
        log.info("trial %d: %s", trial.number, trial.params)
        if gpus is not None:  # recorded first: a next driver shares out the others
            self._attrs(trial.number, {store.GPUS: gpus})
        return self._submit(trial.number, dict(trial.params))

    def _free_gpus(self) -> list[str] | None:
        """GPUs for the next trial that no running trial holds; None where there are
        none to share out, or too few free now."""
        need = self.sweep.spec.compute.nproc_per_node
        held = {
            g
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            for g in t.user_attrs.get(store.GPUS, [])
        }
        free = [g for g in self.gpus if g not in held]
        return free[:need] if self.gpus and len(free) >= need else None

    def _submit(self, number: int, params: dict[str, Any]) -> bool:
        from ..tracking.probe import Unreachable

        request = trials.request(self.sweep, number, params, self.parent, self.payload)
        gpus = self.sweeps.trial_attrs(self.sweep.id, number).get(store.GPUS)
        try:
            with _visible(gpus):
                started = self.service.start(request)
        except (Refused, Unreachable) as err:
            field = getattr(err, "field", None)
            message = f"trial {number} could not start: {field + ': ' if field else ''}{err}"
            log.error("%s", message)
            self._tell(number, TrialState.FAIL, None, message)
            # The sweep fails: its running trials are cancelled, it ends with the reason.
            self.sweeps.set(
                self.sweep.id, **{store.STATUS: SweepStatus.STOPPING.value, store.MESSAGE: message}
            )
            return False
        log.info("trial %d: job %s", number, started.job.id)
        self._attrs(number, {store.JOB_ID: started.job.id})
        return True

    def _nest(self, job_id: str) -> None:
        """The runs of a trial submitted before the sweep's run existed, nested under it:
        every attempt's (a retry makes another run)."""
        own = self.own_parent.get(job_id)
        if own is None:
            try:
                tags = self.jobs.get(job_id).spec.tracking.tags
            except UnknownJob:  # its record was removed: the trial fails (``_follow``)
                return
            own = self.own_parent[job_id] = trials.PARENT_TAG in tags
        if own:
            return
        for attempt in self.jobs.attempts(job_id):
            if attempt.run_id and attempt.run_id not in self.nested:
                self._client().set_tag(attempt.run_id, trials.PARENT_TAG, self.parent)
                self.nested.add(attempt.run_id)

    def _run_found(self, number: int, job_id: str, params: dict[str, Any]) -> None:
        """The trial's run, once its job's supervisor made it: the trial's params on it,
        then the run in the study (a driver killed in between logs the same again)."""
        attempts = self.jobs.attempts(job_id)
        run_id = attempts[0].run_id if attempts else None
        if run_id:
            self._log_params(run_id, params)
            self._attrs(number, {store.TRIAL_RUN_ID: run_id})

    def _follow(self, frozen: optuna.trial.FrozenTrial, cancel: bool) -> None:
        number = frozen.number
        job_id = frozen.user_attrs.get(store.JOB_ID)
        if job_id is None:
            job_id = trials.tagged(self.jobs, self.sweep, number)
            if job_id is None:  # asked, never submitted: submitted now, once
                log.info("trial %d was never submitted: submitting it", number)
                self._submit(number, dict(frozen.params))
                return
            self._attrs(number, {store.JOB_ID: job_id})
        self._nest(job_id)
        if store.TRIAL_RUN_ID not in frozen.user_attrs:
            self._run_found(number, job_id, dict(frozen.params))
        reader = self.readers.get(number)
        if reader is None:
            reader = self.readers[number] = trials.MetricReader(
                self.jobs, job_id, self.sweep.spec.objective.metric
            )
        try:
            ended = outcome(self.jobs, job_id)
        except UnknownJob:  # its record was removed: nothing will ever end it
            self._tell(number, TrialState.FAIL, None, f"job {job_id} is gone")
            return
        reported = self._report(frozen, reader.read())
        if ended is None:
            if cancel:
                self._cancel(job_id)
            elif reported is not None and reported[0].should_prune():
                self._pruned(number, job_id, reported[1])
            return
        status, message = ended
        if status == JobStatus.SUCCEEDED and reader.last is not None:
            self._tell(number, TrialState.COMPLETE, reader.last[1], None)
        elif status == JobStatus.SUCCEEDED:
            metric = self.sweep.spec.objective.metric
            self._tell(number, TrialState.FAIL, None, f"the trial logged no {metric}")
        else:
            self._tell(number, TrialState.FAIL, None, f"job {status.lower()}: {message or ''}")

    def _report(
        self, frozen: optuna.trial.FrozenTrial, points: list[tuple[int, float]]
    ) -> tuple[optuna.trial.Trial, int] | None:
        """The objective's new points, for the pruner: the trial and its last step, if
        it has a pruner and a point. A job that just ended reports its last ones too: the
        next trials are judged by them."""
        steps = [*frozen.intermediate_values, *(step for step, _ in points)]
        if self.sweep.spec.pruner.name is PrunerName.NONE or not steps:
            return None
        trial = optuna.trial.Trial(self.study, self.sweeps.trial_id(self.sweep.id, frozen.number))
        for step, value in points:
            if step not in frozen.intermediate_values:
                trial.report(value, step)
        return trial, max(steps)

    def _pruned(self, number: int, job_id: str, step: int) -> None:
        """A trial the pruner stops: its job cancelled, PRUNED at ``step``."""
        log.info("trial %d: pruned at step %d", number, step)
        self._cancel(job_id)
        self._attrs(number, {store.PRUNED_STEP: step})
        self.study.tell(number, state=TrialState.PRUNED)
        self.due_tags.append((number, {"air.sweep.state": "PRUNED", "air.sweep.pruned_step": step}))

    def _cancel(self, job_id: str) -> None:
        """Cancel the job once (a second SIGTERM is not a second request)."""
        if job_id in self.cancelled:
            return
        self.cancelled.add(job_id)
        with contextlib.suppress(Conflict):  # it ended meanwhile
            self.service.cancel(job_id)

    def _tell(
        self, number: int, state: TrialState, value: float | None, message: str | None
    ) -> None:
        if message is not None:
            self._attrs(number, {store.TRIAL_MESSAGE: message})
        if state is TrialState.COMPLETE:
            self.study.tell(number, value)
        else:
            self.study.tell(number, state=state)
        log.info("trial %d: %s %s", number, state.name, value if message is None else message)
        tags: dict[str, Any] = {"air.sweep.state": state.name}
        if value is not None:
            tags["air.sweep.objective"] = value
        self.due_tags.append((number, tags))

    def _attrs(self, number: int, attrs: dict[str, Any]) -> None:
        self.sweeps.set_trial_attrs(self.sweep.id, number, attrs)

    # -- MLflow ------------------------------------------------------------------------

    def _client(self) -> Any:
        """The sweep's tracking client, made once: under the store's lock, since it
        migrates a new sqlite store at once and the first trials' supervisors may be
        making their runs there meanwhile."""
        if self.client is None:
            from mlflow import MlflowClient

            from ..tracking.runs import quiet_store_setup

            with quiet_store_setup(self.sweep.tracking_uri):
                self.client = MlflowClient(self.sweep.tracking_uri)
        return self.client

    def _sweep_run(self) -> str:
        """The sweep's own run, made once: the trials' runs nest under it."""
        from ..tracking.runs import ensure_experiment

        client = self._client()
        spec = self.sweep.spec
        experiment_id = self.sweep.experiment_id or ensure_experiment(
            client, spec.experiment_name, spec.mlflow_artifact_location
        )
        run_id = self.sweep.run_id or self._find_sweep_run(client, experiment_id)
        if run_id is None:
            run = client.create_run(
                experiment_id,
                run_name=f"{spec.run_name}-sweep",
                tags={
                    **self.sweep.tags,
                    trials.SWEEP_TAG: self.sweep.id,
                    "mlflow.user": self.sweep.user,
                    "air.sweep.objective": f"{spec.direction.value} {spec.objective.metric}",
                },
            )
            run_id = str(run.info.run_id)
            self._log_params(
                run_id,
                {
                    "sweep.trials": spec.trials,
                    "sweep.parallel": spec.parallel,
                    "sweep.sampler": spec.sampler.value,
                    "sweep.pruner": spec.pruner.name.value,
                },
            )
        self.sweeps.set(self.sweep.id, **{store.RUN_ID: run_id, store.EXPERIMENT_ID: experiment_id})
        self.sweep = self.sweeps.get(self.sweep.id)
        return run_id

    def _find_sweep_run(self, client: Any, experiment_id: str) -> str | None:
        """The sweep's run made by a driver killed before it recorded it."""
        found = client.search_runs(
            [experiment_id], f"tags.`{trials.SWEEP_TAG}` = '{self.sweep.id}'", max_results=50
        )
        for run in found:  # a trial's run has its number, if not yet its parent
            if not {trials.PARENT_TAG, trials.TRIAL_TAG} & set(run.data.tags):
                return str(run.info.run_id)
        return None

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)) for k, v in params.items()]
        self._client().log_batch(run_id, params=items)

    def _tag_run(self, number: int, tags: dict[str, Any]) -> None:
        """Tags on the trial's run; a tracking store that does not answer, or a driver
        stopped before it set them, loses only these (the trial's state is in the study)."""
        from mlflow.exceptions import MlflowException

        run_id = self.sweeps.trial_attrs(self.sweep.id, number).get(store.TRIAL_RUN_ID)
        if not run_id:
            return
        try:
            client = self._client()
            for key, value in tags.items():
                client.set_tag(run_id, key, str(value))
        except MlflowException as err:
            log.warning("trial %d: its run's tags were not set: %s", number, err)

    def _finish(self, sweep: Sweep) -> None:
        """The best trial on the sweep's run, and the sweep's end."""
        if sweep.status is SweepStatus.STOPPING and sweep.message is not None:
            status = SweepStatus.FAILED
        elif sweep.status is SweepStatus.STOPPING:
            status = SweepStatus.STOPPED
        else:
            status = SweepStatus.COMPLETED
        assert sweep.run_id is not None
        client = self._client()
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if done:
            best = self.study.best_trial
            metric = sweep.spec.objective.metric
            self._log_params(sweep.run_id, {f"best.{k}": v for k, v in best.params.items()})
            client.log_metric(sweep.run_id, f"best_{metric}", float(best.value or 0.0))
            client.set_tag(sweep.run_id, "air.sweep.best_trial", str(best.number))
            if best_run := best.user_attrs.get(store.TRIAL_RUN_ID):
                client.set_tag(sweep.run_id, "air.sweep.best_run_id", best_run)
            for name, weight in self._importances(len(done)).items():
                client.log_metric(sweep.run_id, f"importance.{name}", weight)
        client.set_tag(sweep.run_id, "air.sweep.state", status.value)
        client.set_terminated(
            sweep.run_id, "FINISHED" if status is SweepStatus.COMPLETED else "KILLED"
        )
        self.sweeps.end(sweep.id, status, sweep.message)
        log.info("sweep %s %s", sweep.id, status.value.lower())
        notices.post_end(self.jobs, self.sweeps.get(sweep.id), self.sweeps.trials(sweep.id))

    def _importances(self, completed: int) -> dict[str, float]:
        """Optuna's importance of each parameter, once two trials or more completed."""
        if completed < 2 or len(self.distributions) < 2:
            return {}
        try:
            return dict(optuna.importance.get_param_importances(self.study))
        except (RuntimeError, ValueError) as err:  # e.g. every trial had the same value
            log.info("no importances: %s", err)
            return {}

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Only a flag: the signal itself ends the sleep (``Wakeup``)."""
        if signum == signal.SIGUSR1:
            self.woken = True
        else:
            self.stopping = True


@contextlib.contextmanager
def _visible(gpus: list[str] | None) -> Iterator[None]:
    """A job submitted inside sees only ``gpus``: a job's ranks take their GPUs among its
    submitter's CUDA_VISIBLE_DEVICES (``jobs.env.visible_gpus``)."""
    if gpus is None:
        yield
        return
    before = os.environ.get(CUDA)
    os.environ[CUDA] = ",".join(gpus)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CUDA, None)
        else:
            os.environ[CUDA] = before


def _lock(path: Path, home: Path, sweep_id: str) -> IO[str] | None:
    """The sweep's lock, held; None if another driver keeps it."""
    handle = open(path, "a", opener=private_opener)  # noqa: SIM115 - held for life
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if running(home, sweep_id) is not None or time.monotonic() > deadline:
                handle.close()
                return None
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import psutil

    from ..tracking.targets import bound_requests

    bound_requests()
    sweep_id = argv[0]
    jobs = JobStore()
    record, lock_file, _ = _files(jobs.home, sweep_id)
    sweeps = SweepStore(jobs.home)
    lock = _lock(lock_file, jobs.home, sweep_id)
    if lock is None:
        log.info("another driver runs sweep %s", sweep_id)
        return 0
    driver = Driver(sweeps, jobs, sweep_id)
    wakeup = Wakeup()
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, driver.on_signal)
    tmp = record.with_suffix(f".{os.getpid()}.tmp")
    write_private(tmp, json.dumps({"pid": os.getpid(), "started": psutil.Process().create_time()}))
    os.replace(tmp, record)
    log.info("driver %s started for sweep %s", os.getpid(), sweep_id)
    try:
        driver.run(wakeup)
    finally:
        if (info := running(jobs.home, sweep_id)) is not None and info.pid == os.getpid():
            record.unlink(missing_ok=True)
        lock.close()
        wakeup.close()
    log.info("driver %s stopped", os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
