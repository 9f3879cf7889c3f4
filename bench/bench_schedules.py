"""Scheduled runs (issue 15; docs/benchmarks.md, "Scheduled runs").

1. Fire latency: a schedule's due time to its first task's job RUNNING (the time its
   supervisor records), over ``--fires`` fires of a real scheduler process, beside the
   same job submitted directly through ``jobs.submit.submit`` (call -> RUNNING): the
   scheduler's own share is the difference. Target p50 <= 1 s. Also, each way, to the
   job's first attempt recorded, which is once its MLflow run is made (the ranks start
   then): the part a warm MLflow changes, RUNNING comes before it.
2. One tick with 1,000 schedules, 10 of them due (their first task recorded as a job,
   no process started), beside a tick with none due, and beside the same tick with an
   fsync per commit (``synchronous=FULL``, the store before WAL commits skipped it).
   Target <= 50 ms.
3. The idle scheduler: its RSS and the CPU it takes between fires (a daily schedule,
   ``--idle`` seconds), beside a bare ``python -c 'import time; ...'`` and one that
   imports MLflow. Targets: RSS <= 60 MB (no MLflow, no torch), 0 CPU between fires.
4. The job store alone in a process (as the scheduler between ticks, a supervisor, the
   CLI): 10 x (create, update, get), with the store's idle connection held, beside the
   same with it closed (each call's connection then the last: SQLite checkpoints and
   deletes the WAL at every close, and re-creates it at the next open).

Run: ``.venv/bin/python bench/bench_schedules.py [--fires 20] [--idle 30] [--tick-rounds 3]
[--parts tick,store,idle,latency]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from jupyter_air.identity import os_identity  # noqa: E402
from jupyter_air.jobs.spec import JobKind, job_spec  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.schedules.model import Schedule, ScheduleRun, TaskSpec  # noqa: E402
from jupyter_air.schedules.scheduler import ensure_scheduler, running, stop  # noqa: E402
from jupyter_air.schedules.service import Schedules  # noqa: E402
from jupyter_air.schedules.tick import tick  # noqa: E402

ME = os_identity()


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"


def schedule_doc(name: str, cron: str, command: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "schedule": {"quartz_cron_expression": cron},
        "tasks": [{"task_key": "t", "workload": {"command": command}}],
        **extra,
    }


def wait_started(jobs: JobStore, job_id: str, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = jobs.get(job_id)
        if job.started is not None:
            return job.started
        if job.done:
            raise RuntimeError(f"job {job_id} {job.status} before it started: {job.message}")
        time.sleep(0.02)
    raise RuntimeError(f"job {job_id} did not start")


def wait_attempt(jobs: JobStore, job_id: str, timeout: float = 120) -> float:
    """When the job's first attempt was recorded (its MLflow run made)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attempts = jobs.attempts(job_id)
        if attempts:
            return attempts[0].started
        time.sleep(0.02)
    raise RuntimeError(f"job {job_id} recorded no attempt")


def fire_latency(home: Path, fires: int) -> None:
    from jupyter_air.jobs.submit import submit
    from jupyter_air.tracking.targets import ExperimentRef

    jobs = JobStore(home)
    s = Schedules(jobs)
    uri = f"sqlite:///{home}/mlflow.db"
    doc = schedule_doc("latency", "*/4 * * * * ?", "true", max_concurrent_runs=100)
    schedule = s.create(ME, s.parse(doc, home), tracking_uri=uri)
    ensure_scheduler(jobs)
    scheduled: list[float] = []
    recorded: list[float] = []  # due time -> job recorded: the scheduler's own share
    direct: list[float] = []
    scheduled_run: list[float] = []  # due time -> attempt 1 recorded (its run made)
    direct_run: list[float] = []
    seen: set[int] = set()
    while len(scheduled) < fires:
        for run in s.runs(ME, schedule.id, limit=5):
            job_id = run.tasks[0].job_id if run.tasks else None
            if run.id in seen or job_id is None:
                continue
            seen.add(run.id)
            scheduled.append(wait_started(jobs, job_id) - run.scheduled_time)
            recorded.append(jobs.get(job_id).created - run.scheduled_time)
            scheduled_run.append(wait_attempt(jobs, job_id) - run.scheduled_time)
            # the same job submitted directly, between two fires
            called = time.time()
            job = submit(
                jobs,
                job_spec(JobKind.COMMAND, command=["true"], background=True),
                ExperimentRef(uri, "direct"),
                owner=ME.name,
                user=ME.name,
            ).job
            direct.append(wait_started(jobs, job.id) - called)
            direct_run.append(wait_attempt(jobs, job.id) - called)
        time.sleep(0.1)
    s.pause(ME, schedule.id)
    print(f"fire latency, due time -> first job RUNNING ({fires} fires): {quantiles(scheduled)}")
    print(f"  of which due time -> job recorded (the scheduler's part): {quantiles(recorded)}")
    print(f"  baseline, submit() call -> job RUNNING (same jobs, direct): {quantiles(direct)}")
    ratio = statistics.median(scheduled) / statistics.median(direct)
    print(f"  ratio of medians: {ratio:.2f}x")
    print(f"due time -> first attempt recorded, its MLflow run made: {quantiles(scheduled_run)}")
    print(f"  baseline, submit() call -> the same, direct: {quantiles(direct_run)}")


class RecordOnly:
    """A launcher that records the job (no supervisor started)."""

    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self.seconds = 0.0  # spent recording jobs (the job store's work, not the tick's)

    def __call__(self, schedule: Schedule, run: ScheduleRun, task: TaskSpec) -> str:
        started = time.perf_counter()
        job_id = self.jobs.create(job_spec(JobKind.COMMAND), owner=schedule.owner).id
        self.seconds += time.perf_counter() - started
        return job_id


def big_tick(home: Path, fsync_each_commit: bool = False) -> float:
    """The tick's time with 10 due; ``fsync_each_commit``: as the store committed before."""
    jobs = JobStore(home)
    if fsync_each_commit:
        jobs.wal = False  # its connections keep SQLite's default, synchronous=FULL
    s = Schedules(jobs, clock=lambda: 1_800_000_000.0)  # 2027-01-15 08:00:00 UTC
    for i in range(990):
        s.create(ME, s.parse(schedule_doc(f"daily-{i}", "0 30 2 * * ?", "true"), home), "x")
    for i in range(10):
        s.create(ME, s.parse(schedule_doc(f"due-{i}", "0 0 9 * * ?", "true"), home), "x")
    launch = RecordOnly(jobs)
    idle = []
    for k in range(5):
        started = time.perf_counter()
        tick(s.store, launch, 1_800_000_000.0 + k)
        idle.append(time.perf_counter() - started)
    started = time.perf_counter()
    result = tick(s.store, launch, 1_800_003_600.0)  # 09:00: ten due
    busy = time.perf_counter() - started
    assert len(result.started) == 10, result
    sync = "FULL, an fsync per commit" if fsync_each_commit else "NORMAL in WAL mode"
    print(f"tick, 1,000 schedules, 10 due (10 runs + 10 jobs recorded), {sync}: ", end="")
    print(f"{busy * 1000:.1f} ms")
    own = busy - launch.seconds
    print(
        f"  of which the 10 JobStore.create calls: {launch.seconds * 1000:.1f} ms; the tick's own: "
        f"{own * 1000:.1f} ms"
    )
    print(f"  baseline, the same tick with none due: {statistics.median(idle) * 1000:.1f} ms")
    return busy


def lone_store_calls(rounds: int) -> None:
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for held in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                jobs = JobStore(Path(tmp))
                if not held:
                    jobs.close()
                started = time.perf_counter()
                for _ in range(10):
                    job = jobs.create(job_spec(JobKind.COMMAND))
                    jobs.update(job.id, status="RUNNING")
                    jobs.get(job.id)
                times[held].append(time.perf_counter() - started)
                jobs.close()
    held, alone = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"job store alone in a process, 10 x (create, update, get), median of {rounds}: "
        f"{held * 1000:.1f} ms with its idle connection, {alone * 1000:.1f} ms without "
        f"({held / alone:.2f}x)"
    )


def idle_scheduler(home: Path, seconds: float) -> None:
    jobs = JobStore(home)
    s = Schedules(jobs)
    s.create(ME, s.parse(schedule_doc("daily", "0 30 2 * * ?", "true"), home), "x")
    info = ensure_scheduler(jobs)
    assert info is not None
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    heavy = subprocess.Popen([sys.executable, "-c", "import mlflow, time; time.sleep(600)"])
    time.sleep(min(10.0, seconds))  # imports done
    procs = {
        "scheduler": psutil.Process(info.pid),
        "python, bare": psutil.Process(bare.pid),
        "python + import mlflow": psutil.Process(heavy.pid),
    }
    before = {k: p.cpu_times() for k, p in procs.items()}
    time.sleep(seconds)
    for name, p in procs.items():
        cpu = sum(p.cpu_times()[:2]) - sum(before[name][:2])
        print(
            f"  {name:24} RSS {p.memory_info().rss / 2**20:6.1f} MB, CPU over {seconds:.0f} s: "
            f"{cpu * 1000:.0f} ms"
        )
    modules = subprocess.run(
        ["grep", "-c", "site-packages/numpy", f"/proc/{info.pid}/maps"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"  the scheduler maps numpy's libraries: {modules != '0'} (MLflow would bring them)")
    bare.kill()
    heavy.kill()
    stop(home)
    assert running(home) is None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fires", type=int, default=20)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--tick-rounds", type=int, default=3)
    parser.add_argument("--parts", default="tick,store,idle,latency", help="which measures")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "tick" in parts:
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.tick_rounds):  # alternating, so that both see the same load
            for fsync_each_commit in (True, False):
                with tempfile.TemporaryDirectory() as tmp:
                    os.environ["AIR_HOME"] = str(Path(tmp) / "a")
                    times[fsync_each_commit].append(big_tick(Path(tmp) / "a", fsync_each_commit))
        normal, full = statistics.median(times[False]), statistics.median(times[True])
        print(
            f"tick medians over {args.tick_rounds} rounds: {normal * 1000:.1f} ms "
            f"(synchronous=NORMAL) vs {full * 1000:.1f} ms (FULL): {normal / full:.2f}x"
        )
    if "store" in parts:
        lone_store_calls(args.tick_rounds)
    if "idle" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["AIR_HOME"] = str(Path(tmp) / "b")
            print("idle scheduler, beside two plain interpreters:")
            idle_scheduler(Path(tmp) / "b", args.idle)
    if "latency" not in parts:
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AIR_HOME"] = str(Path(tmp) / "c")
        try:
            fire_latency(Path(tmp) / "c", args.fires)
        finally:
            stop(Path(tmp) / "c")
            jobs = JobStore(Path(tmp) / "c")
            while jobs.jobs(active_only=True):
                time.sleep(0.5)


if __name__ == "__main__":
    main()
