"""A sweep's 12 trials, 2 at a time, against the same 12 jobs run by a hand-written loop
of 2 at a time (issue 40; see docs/benchmarks.md).

Each trial is a 1-rank job running ``python trial.py`` that sleeps ``--hold`` seconds
and logs its loss once: the same program, the same job kind, the same store and MLflow
tracking store in both arms.

1. ``sweep``: ``SweepService.create`` (what ``air sweep -f`` calls) with ``trials: 12,
   parallel: 2, sampler: random``; its detached driver submits the trials.
2. ``loop``: two threads of this process, each submitting a job through the jobs
   service (the request ``air run`` makes) and waiting for its outcome
   (``jobs.follow.outcome``, looked at every 0.1 s, as a cell's follower does) before
   the next: the best a user's loop of two concurrent calls does.

Per arm: the wall time from the first submission to the last trial's outcome (the sweep
also closes its run and logs the best and the importances after it: said apart), and
each gap between a trial's end (its attempt's recorded end) and the next trial's job
being submitted in the slot it freed. Arms alternate, ``--rounds`` each.

Targets: sweep wall <= 1.05x the loop's; the gap's p50 <= 2 s.

Run: ``.venv/bin/python bench/bench_sweeps.py [--rounds 2] [--hold 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.identity import os_identity  # noqa: E402
from jupyter_air.jobs.follow import outcome  # noqa: E402
from jupyter_air.jobs.request import Defaults, JobRequest, Program  # noqa: E402
from jupyter_air.jobs.service import JobService  # noqa: E402
from jupyter_air.jobs.spec import JobKind  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.jobs.workload_file import WorkloadFile  # noqa: E402
from jupyter_air.sweeps.service import SweepService  # noqa: E402
from jupyter_air.sweeps.store import SweepStore  # noqa: E402
from jupyter_air.sweeps.sweep_file import SweepFile  # noqa: E402

TRIAL = """\
import sys, time
from jupyter_air import log_metrics, params

time.sleep(float(sys.argv[1]))
log_metrics({"loss": (params().get("x", 0.0) - 2) ** 2}, step=1)
"""
TRIALS, PARALLEL = 12, 2


def workload(folder: Path, hold: float) -> dict[str, Any]:
    return {
        "experiment_name": "bench-sweeps",
        "command": f"{sys.executable} trial.py {hold}",
        "working_dir": str(folder),
    }


def sweep_arm(jobs: JobStore, folder: Path, hold: float) -> dict[str, Any]:
    from jupyter_air.tracking.targets import current_tracking_uri

    spec = SweepFile.model_validate(
        {
            **workload(folder, hold),
            "space": {"x": {"type": "float", "low": -4, "high": 4}},
            "objective": {"minimize": "loss"},
            "trials": TRIALS,
            "parallel": PARALLEL,
            "sampler": "random",
        }
    )
    service = SweepService(jobs, os_identity())
    t0 = time.time()
    sweep, _ = service.create(spec, folder, current_tracking_uri(), "bench")
    store = SweepStore(jobs.home)
    while store.get(sweep.id).status.active:
        time.sleep(0.2)
    ended = time.time()
    job_ids = [t.job_id for t in store.trials(sweep.id) if t.job_id]
    return {**_timing(jobs, job_ids, t0), "sweep_end_s": round(ended - t0, 2)}


def request(folder: Path, hold: float) -> JobRequest:
    """The job ``air run`` would ask for, telling nobody of its end."""
    from jupyter_air.tracking.targets import ExperimentRef, current_tracking_uri

    spec = WorkloadFile.model_validate({**workload(folder, hold), "notify": []})
    return JobRequest(
        spec,
        Program(JobKind.COMMAND, command=spec.argv, background=True, working_dir=str(folder)),
        ExperimentRef(current_tracking_uri(), spec.experiment_name),
        "bench",
        defaults=Defaults(nproc_per_node=1),
    )


def loop_arm(jobs: JobStore, folder: Path, hold: float) -> dict[str, Any]:
    service = JobService(jobs, os_identity())
    job_ids: list[str] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        for _ in range(count):
            job = service.start(request(folder, hold)).job
            with lock:
                job_ids.append(job.id)
            while outcome(jobs, job.id) is None:
                time.sleep(0.1)

    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(TRIALS // PARALLEL,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _timing(jobs, job_ids, t0)


def _timing(jobs: JobStore, job_ids: list[str], t0: float) -> dict[str, Any]:
    """Wall time to the last outcome, and the gaps: the k-th trial to end frees a slot
    that the (k + PARALLEL)-th submitted fills."""
    created = sorted(jobs.get(j).created for j in job_ids)
    attempts = [a for j in job_ids for a in jobs.attempts(j)[-1:] if a.ended]
    ends = sorted(a.ended for a in attempts if a.ended)
    gaps = [created[k + PARALLEL] - ends[k] for k in range(len(created) - PARALLEL)]
    starts = [a.started - jobs.get(a.job_id).created for a in attempts]
    return {
        "trials": len(job_ids),
        "wall_s": round(max(ends) - t0, 2),
        "first_s": round(created[0] - t0, 2),  # to the first job's submission
        "gap_p50_s": round(statistics.median(gaps), 2),
        "gap_max_s": round(max(gaps), 2),
        # From a job's submission to its attempt's start, and the attempt's own time.
        "start_p50_s": round(statistics.median(starts), 2),
        "attempt_p50_s": round(statistics.median((a.ended or 0) - a.started for a in attempts), 2),
    }


def quiet(jobs: JobStore) -> None:
    """Until every job's supervisor is gone: the next arm runs alone."""
    from jupyter_air.procs import alive

    while any(j.supervisor_pid and alive(j.supervisor_pid) for j in jobs.jobs()):
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hold", type=float, default=2.0, help="seconds each trial sleeps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sweeps-") as tmp:
        folder = Path(tmp)
        os.environ["AIR_HOME"] = str(folder / "air")
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder}/mlflow.db"
        (folder / "trial.py").write_text(TRIAL)
        jobs = JobStore()
        # The store's migrations and the first imports, paid before either arm.
        first = JobService(jobs, os_identity()).start(request(folder, 0))
        while outcome(jobs, first.job.id) is None:
            time.sleep(0.2)
        quiet(jobs)
        results: dict[str, list[dict[str, Any]]] = {"sweep": [], "loop": []}
        for r in range(args.rounds):
            order = ["sweep", "loop"] if r % 2 == 0 else ["loop", "sweep"]
            for arm in order:
                run = sweep_arm if arm == "sweep" else loop_arm
                result = run(jobs, folder, args.hold)
                print(arm, json.dumps(result), flush=True)
                results[arm].append(result)
                quiet(jobs)
        ratio = [
            s["wall_s"] / loop["wall_s"]
            for s, loop in zip(results["sweep"], results["loop"], strict=True)
        ]
        summary = {
            "hold_s": args.hold,
            "wall_ratio_median": round(statistics.median(ratio), 3),
            "sweep_gap_p50_s": statistics.median(s["gap_p50_s"] for s in results["sweep"]),
            "loop_gap_p50_s": statistics.median(s["gap_p50_s"] for s in results["loop"]),
        }
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
