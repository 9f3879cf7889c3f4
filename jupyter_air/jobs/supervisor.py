"""The supervisor: one process per job, in its own session, owning the job's attempts.

``python -m jupyter_air.jobs.supervisor JOB_ID [--watch-pid PID]``. It starts the ranks
of each attempt at once, while MLflow is imported on a background thread (about 2 s
that need not delay the ranks), records system metrics into the attempt's run, stops
every rank when one fails, retries up to ``max_retries`` times (a new MLflow run per
attempt), and takes the job down when it is cancelled or the kernel that follows it
dies. The first attempt's run was created by the kernel, so links show at once; a job
submitted without MLflow (``air run``) gets its experiment and first run made here.
The job's end is recorded before anything on the MLflow side that may fail or take
memory, so nothing there changes a job's outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from ..job_dir import AttemptDir, JobDir
from ..logs.capture import plain_lines
from ..procs import alive
from ..tracking.guard import RunGuard
from .env import free_port, gpu_count, inherited_env, visible_gpus
from .hints import HintRecorder, rank_gpus
from .local import LocalRanks, Outcome, node_specs
from .reaper import Reaper
from .sharing import mirror
from .spec import Workload
from .store import JobStore

log = logging.getLogger("jupyter_air.supervisor")

#: Seconds between two system-metrics samples of a run (MLflow's own default).
METRICS_INTERVAL = float(os.environ.get("AIR_SYSTEM_METRICS_INTERVAL", "10"))
#: Seconds the supervisor waits, at its end, for its reaper to sweep what the job left.
REAPER_WAIT = 15.0


class Tracking:
    """The supervisor's MLflow side.

    ``import mlflow`` costs about 2 s of CPU, taken from the ranks while they start. So
    it happens in the background, at the lowest priority, once the first system-metrics
    sample is due, or at once when something needs MLflow (a retry's new run, the end
    of the job). A job shorter than the metrics interval never competes with it.
    """

    def __init__(
        self, workload: Workload, on_experiment: Callable[[str], None] = lambda _: None
    ) -> None:
        self._workload = workload
        self._on_experiment = on_experiment
        self._ready: Future[Any] = Future()
        self._needed = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="air-node-metrics")
        self._node_metrics: list[Future[None]] = []
        threading.Thread(target=self._load, name="air-mlflow-import", daemon=True).start()

    def _mlflow(self) -> Any:
        self._needed.set()
        return self._ready.result()

    def _load(self) -> None:
        self._needed.wait(METRICS_INTERVAL)
        with contextlib.suppress(OSError):  # this thread only
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        try:
            from mlflow import MlflowClient

            from ..tracking import runs, system_metrics

            client = MlflowClient(self._workload.tracking_uri)
            self._ready.set_result((client, runs, system_metrics))
        except BaseException as err:
            self._ready.set_exception(err)

    def new_run(self, job_id: str, attempt: int, tags: dict[str, str]) -> str:
        client, runs, _ = self._mlflow()
        tags = {**tags, "air.attempt": str(attempt)}
        return str(
            runs.start_run(
                client,
                self._experiment_id(client, runs),
                tags,
                self._workload.run_name,
                self._workload.parent_run_id,
            )
        )

    def _experiment_id(self, client: Any, runs: Any) -> str:
        """The workload's experiment. One only named (``air run`` imports no MLflow) is
        made here, before the first run, and its id given to ``on_experiment``."""
        workload = self._workload
        if workload.experiment_id is None:
            assert workload.experiment_name is not None
            assert workload.tracking_uri is not None
            with runs.quiet_store_setup(workload.tracking_uri):  # a new store: migrated once
                workload.experiment_id = runs.ensure_experiment(
                    client, workload.experiment_name, workload.artifact_location
                )
            self._on_experiment(workload.experiment_id)
        return workload.experiment_id

    def start_metrics(
        self, run_id: str, guard: RunGuard, hints: HintRecorder | None = None
    ) -> Future[Any]:
        """System metrics for the run, started once MLflow is loaded; never blocks. Their
        GPU samples feed the attempt's hints."""
        started: Future[Any] = Future()

        def start() -> None:
            try:
                _, _, system_metrics = self._ready.result()
                metrics = system_metrics.RunMetrics(
                    run_id,
                    self._workload.tracking_uri,
                    METRICS_INTERVAL,
                    None,
                    guard,
                    hints.on_nvml if hints is not None else None,
                )
                metrics.start()
                started.set_result(metrics)
            except BaseException as err:
                log.warning("system metrics not recorded: %s", err)
                started.set_result(None)

        threading.Thread(target=start, name="air-system-metrics", daemon=True).start()
        return started

    def log_node_metrics(self, run_id: str, node: int, samples: list[Any]) -> None:
        """A node agent's system metrics, logged on a thread of their own so that the
        watch over the nodes never waits for MLflow."""

        def log() -> None:
            client, _, _ = self._mlflow()
            from ..tracking.node_metrics import log_node_metrics

            log_node_metrics(client, run_id, node, samples)

        self._node_metrics.append(self._executor.submit(log))

    def end_run(self, run_id: str, status: str, metrics: Future[Any]) -> None:
        client, runs, _ = self._mlflow()
        monitor = metrics.result()
        if monitor is not None:
            monitor.finish()
        for pending in self._node_metrics:
            try:
                pending.result()
            except Exception as err:
                log.warning("node system metrics not logged: %s", err)
        self._node_metrics.clear()
        runs.end_run(client, run_id, status)

    def tag(self, run_id: str, key: str, value: str) -> None:
        """A note on the run, if MLflow can still take one."""
        try:
            client, _, _ = self._mlflow()
            client.set_tag(run_id, key, value)
        except Exception as err:
            log.warning("could not tag MLflow run %s: %s", run_id, err)

    def attach_logs(self, run_id: str, attempt_dir: Path) -> None:
        """Each rank's output as plain text artifacts ``logs/node_N/rank_R.log``, so
        MLflow's own UI shows them; line by line, so a log of any size costs no memory."""
        client, _, _ = self._mlflow()
        files = AttemptDir(attempt_dir)
        with tempfile.TemporaryDirectory() as tmp:
            for log_file in files.rank_logs():
                record_file = log_file.path
                target = Path(tmp) / record_file.relative_to(files.logs)
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("w", encoding="utf-8") as out:
                    for text in plain_lines(record_file):
                        out.write(f"{text}\n")
            if any(Path(tmp).iterdir()):
                client.log_artifacts(run_id, tmp, artifact_path=files.logs.name)


class Ranks(Protocol):
    """An attempt's ranks on some backend: ``LocalRanks`` or ``RayNodes``."""

    def cancel(self) -> None: ...

    def run(self, timeout: float | None = None) -> Outcome: ...

    def close(self) -> None: ...


class Supervisor:
    def __init__(self, store: JobStore, job_id: str, watch_pid: int | None) -> None:
        self.store = store
        self.job = store.get(job_id)
        self.watch_pid = watch_pid
        self._cancelled = threading.Event()
        self._over = threading.Event()
        self._follower_gone = False
        self._started = time.time()
        self._ranks: Ranks | None = None
        self._hints: HintRecorder | None = None
        self._tracking = Tracking(self.job.workload, self._experiment_made)

    def cancel(self, *_: Any) -> None:
        self._cancelled.set()
        if self._ranks is not None:
            self._ranks.cancel()

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
        from ..logs.retention import prune_in_background, retention_days

        prune_in_background(self.store, retention_days())
        reaper = Reaper({"AIR_JOB_ID": self.job.id})
        if self.job.workload.kind == "python":
            reaper.remove(JobDir(self.store.job_dir(self.job.id)).payload)
        try:
            return self._run(reaper)
        finally:
            reaper.close(wait=REAPER_WAIT)

    def _run(self, reaper: Reaper) -> int:
        job, workload = self.job, self.job.workload
        self.store.update(job.id, status="RUNNING", started=time.time(), supervisor_pid=os.getpid())
        if self.watch_pid is not None:
            threading.Thread(
                target=self._watch_kernel, name="air-kernel-watch", daemon=True
            ).start()
        tracking = self._tracking
        first_run = workload.tags.get("air.first_run_id")
        outcome = Outcome("CANCELLED", [], message="cancelled before it started")
        last_attempt = workload.max_retries + 1
        for attempt in range(1, last_attempt + 1):
            if self._cancelled.is_set():
                break
            run_id = (
                first_run
                if attempt == 1 and first_run
                else tracking.new_run(job.id, attempt, _run_tags(workload))
            )
            self.store.start_attempt(job.id, attempt, run_id)
            result = AttemptDir(self.store.attempt_dir(job.id, attempt)).result
            if workload.background:
                reaper.remove(result)  # nobody reads a background job's value
            guard = RunGuard()
            self._hints = HintRecorder(
                self.store.attempt_dir(job.id, attempt),
                functools.partial(tracking.tag, run_id),
            )
            # On a cluster each node agent measures its own machine, not this one.
            metrics = (
                tracking.start_metrics(run_id, guard, self._hints)
                if workload.backend == "local"
                else _none()
            )
            try:
                outcome = self._attempt(attempt, workload, run_id)
            except Exception as err:  # a bug or a lost cluster: the job still gets an end
                log.exception("attempt %d", attempt)
                outcome = Outcome("FAILED", [], message=f"the supervisor failed: {err!r}")
            guard.end()
            self.store.end_attempt(
                job.id,
                attempt,
                outcome.status,
                outcome.exit_codes,
                outcome.failed_rank,
                outcome.message,
            )
            over = (
                outcome.status != "FAILED"
                or outcome.final
                or attempt == last_attempt
                or self._cancelled.is_set()
            )
            # A kernel following the job learns at once (and ends the run itself too);
            # nothing the MLflow side does below can change the recorded outcome.
            if over and not workload.background:
                self._end_job(outcome)
            try:
                if self._ranks is not None:
                    self._ranks.close()
            except Exception as err:
                log.error("could not release attempt %d's ranks: %s", attempt, err)
            self._end_run(run_id, outcome.status, metrics)
            if over and workload.background:
                self._end_job(outcome)  # nobody follows: "done" means its run is finished too
            self._attach_logs(run_id, attempt)
            if not over:
                reaper.remove(result)  # a retry follows: only the last value is read
                continue
            if self._follower_gone:
                reaper.remove(result)
            return 0 if outcome.status == "SUCCEEDED" else 1
        self._end_job(outcome)
        if first_run and not self.store.attempts(job.id):  # the kernel's run, never started
            self._end_run(first_run, outcome.status, _none())
        return 1

    def _end_job(self, outcome: Outcome) -> None:
        self._over.set()  # the kernel may go now: what is left is this process's own work
        self.store.update(
            self.job.id, status=outcome.status, ended=time.time(), message=outcome.message
        )

    def _end_run(self, run_id: str, status: str, metrics: Future[Any]) -> None:
        """End the attempt's run, whoever follows the job; a failure is only logged."""
        try:
            self._tracking.end_run(run_id, status, metrics)
        except Exception as err:
            log.error("could not end MLflow run %s: %s", run_id, err)

    def _attach_logs(self, run_id: str, attempt: int) -> None:
        """After the job's and the run's ends: the logs may be large, the artifact store
        may fail. A failure is logged here and said in the run's tags."""
        try:
            self._tracking.attach_logs(run_id, self.store.attempt_dir(self.job.id, attempt))
        except Exception as err:
            log.error("could not attach logs of attempt %d to run %s: %r", attempt, run_id, err)
            self._tracking.tag(run_id, "air.logs", f"not attached: {err!r}"[:500])

    def _attempt(self, attempt: int, workload: Workload, run_id: str) -> Outcome:
        job = self.job
        attempt_dir = self.store.attempt_dir(job.id, attempt)
        attempt_dir.mkdir(parents=True, exist_ok=True)
        extra = {**workload.env, **_mlflow_env(workload, run_id)}
        if workload.backend == "ray":
            from .ray_nodes import RayNodes

            self._ranks = RayNodes(
                workload,
                job.id,
                attempt,
                attempt_dir,
                payload=_payload(workload, self.store.job_dir(job.id)),
                extra_env=extra,
                on_metrics=lambda node, samples: self._tracking.log_node_metrics(
                    run_id, node, samples
                ),
            )
        else:
            specs = node_specs(
                argv=_argv(workload, self.store.job_dir(job.id), attempt_dir),
                base_env=inherited_env(),
                node_rank=0,
                nproc_per_node=workload.nproc_per_node,
                nnodes=1,
                master_addr="127.0.0.1",
                master_port=free_port(),
                job_id=job.id,
                attempt=attempt,
                max_restarts=workload.max_retries,
                gpus=visible_gpus(os.environ, gpu_count()),
                extra=extra,
                log_dir=AttemptDir(attempt_dir).node_logs(0),
                cwd=workload.working_dir,
            )
            ranks = self._ranks = LocalRanks(specs)
            gpus = rank_gpus([spec.env.get("CUDA_VISIBLE_DEVICES") for spec in specs])
            if self._hints is not None:
                self._hints.start(gpus, ranks.last_output)
        if self._cancelled.is_set():
            self._ranks.cancel()
        return self._ranks.run(timeout=workload.timeout)


def _none() -> Future[Any]:
    done: Future[Any] = Future()
    done.set_result(None)
    return done


def _mlflow_env(workload: Workload, run_id: str) -> dict[str, str]:
    return {
        "MLFLOW_TRACKING_URI": workload.tracking_uri or "",
        "MLFLOW_EXPERIMENT_ID": workload.experiment_id or "",
        "MLFLOW_RUN_ID": run_id,
    }


def _payload(workload: Workload, job_dir: Path) -> bytes | None:
    """The pickled cell or function, sent to the nodes (they may not see this disk)."""
    return JobDir(job_dir).payload.read_bytes() if workload.kind == "python" else None


def _argv(workload: Workload, job_dir: Path, attempt_dir: Path) -> list[str]:
    if workload.kind == "command":
        return list(workload.command)
    payload = JobDir(job_dir).payload
    return [
        sys.executable,
        "-u",
        "-m",
        "jupyter_air.jobs.rank_main",
        str(payload),
        str(attempt_dir),
    ]


def _run_tags(workload: Workload) -> dict[str, str]:
    return {k: v for k, v in workload.tags.items() if not k.startswith("air.first_")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Supervise one jupyter_air job.")
    parser.add_argument("job_id")
    parser.add_argument("--watch-pid", type=int, help="cancel the job when this process exits")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    supervisor = Supervisor(JobStore(), args.job_id, args.watch_pid)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        supervisor.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
