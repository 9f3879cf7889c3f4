"""Sweeps measured (issue 40; see docs/benchmarks.md): a sweep against a hand loop, a
pruned sweep against the same unpruned, and a kernel killed mid-sweep.

``--only loop``: a sweep's 12 trials, 2 at a time, against the same 12 jobs run by a
hand-written loop of 2 at a time.

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

``--only prune``: the same sweep of a toy loss curve with a known best (x = 3 of x in
0..7, every trial logging ``--steps`` points), with the median pruner and without; per
arm the steps its trials ran (the points in their journals, a pruned trial's steps
after its pruning point included), the trials pruned, the best trial and the wall time.
Each round gives both arms the same seed (the grid's order), rounds change it.

``--only kill``: ``%%air_sweep`` (6 trials, 2 at a time) run in a real kernel that is
killed outright (SIGKILL to its process group) at one moment of the sweep per round (as
the sweep is made, once a trial's job runs, once 3 trials completed), then the same
cell run in a new kernel to the sweep's end; counted: the sweeps the cell made, the
trials lost (planned but never completed) and the trials run twice (a trial number with
more than one job), and the cell's result.

Run: ``.venv/bin/python bench/bench_sweeps.py [--only loop|prune|kill] [--rounds 2]
[--hold 2] [--steps 20]`` (every part without ``--only``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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
from jupyter_air.sweeps.store import SweepStore, best_of  # noqa: E402
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


def against_loop(args: argparse.Namespace, jobs: JobStore, folder: Path) -> None:
    """The sweep and the loop, in turns; with ``--driver-from DIR``, also the sweep whose
    driver (and what it starts) imports the ``jupyter_air`` in DIR: another version of
    the driver, measured beside this one under the same load."""
    arms = ["sweep", "loop", *(["other"] if args.driver_from else [])]
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for r in range(args.rounds):
        for arm in arms[r % len(arms) :] + arms[: r % len(arms)]:
            if arm == "loop":
                result = loop_arm(jobs, folder, args.hold)
            else:
                os.environ.pop("PYTHONPATH", None)
                if arm == "other":  # the driver's: it inherits this
                    os.environ["PYTHONPATH"] = str(args.driver_from)
                result = sweep_arm(jobs, folder, args.hold)
            print(arm, json.dumps(result), flush=True)
            results[arm].append(result)
            quiet(jobs)
    summary: dict[str, Any] = {"hold_s": args.hold}
    for arm in arms:
        pairs = zip(results[arm], results["loop"], strict=True)
        ratio = [s["wall_s"] / loop["wall_s"] for s, loop in pairs]
        summary[arm] = {
            "wall_ratio_median": round(statistics.median(ratio), 3),
            "gap_p50_s": statistics.median(s["gap_p50_s"] for s in results[arm]),
            "first_s_median": statistics.median(s["first_s"] for s in results[arm]),
        }
    print(json.dumps(summary, indent=2), flush=True)


#: A loss curve falling to (x - 3)^2 / 4 + 1 over the steps: x = 3 is the best, and a
#: trial's rank among the others is the same at every step (what a median pruner assumes).
CURVE = """\
import sys, time
from jupyter_air import log_metrics, params

x, steps, hold = params()["x"], int(sys.argv[1]), float(sys.argv[2])
for step in range(1, steps + 1):
    time.sleep(hold)
    log_metrics({"loss": (x - 3) ** 2 / 4 + 1 + 4 / step}, step=step)
"""
#: The curve's trials: x in 0..7, each once (a grid), 2 at a time.
CURVE_TRIALS = 8


def pruned_arm(
    jobs: JobStore, folder: Path, steps: int, hold: float, seed: int, pruner: str
) -> dict[str, Any]:
    """The curve's sweep with ``pruner`` (``none`` or ``median``): its steps and best."""
    from jupyter_air.sweeps.trials import MetricReader
    from jupyter_air.tracking.targets import current_tracking_uri

    spec = SweepFile.model_validate(
        {
            "experiment_name": "bench-sweeps-pruned",
            "command": f"{sys.executable} curve.py {steps} {hold}",
            "working_dir": str(folder),
            "space": {"x": {"type": "int", "low": 0, "high": CURVE_TRIALS - 1}},
            "objective": {"minimize": "loss"},
            "trials": CURVE_TRIALS,
            "parallel": PARALLEL,
            "sampler": "grid",
            "seed": seed,
            # Judged from the third trial on, each from its third step.
            "pruner": {"name": pruner, "n_startup_trials": 2, "n_warmup_steps": 2},
        }
    )
    t0 = time.time()
    sweep, _ = SweepService(jobs, os_identity()).create(
        spec, folder, current_tracking_uri(), "bench"
    )
    store = SweepStore(jobs.home)
    while store.get(sweep.id).status.active:
        time.sleep(0.2)
    wall = time.time() - t0
    quiet(jobs)
    trials = store.trials(sweep.id)
    ran = {t.number: len(MetricReader(jobs, t.job_id, "loss").read()) for t in trials if t.job_id}
    best = best_of(store.get(sweep.id), trials)
    return {
        "pruner": pruner,
        "seed": seed,
        "order": [t.params["x"] for t in trials],
        "steps_run": sum(ran.values()),
        "steps_if_none_pruned": len(trials) * steps,
        "pruned": sorted(
            (t.params["x"], t.pruned_step, ran.get(t.number)) for t in trials if t.state == "PRUNED"
        ),
        "best_x": best.params["x"] if best else None,
        "best_loss": round(best.value or 0.0, 4) if best else None,
        "states": sorted(t.state for t in trials),
        "wall_s": round(wall, 1),
    }


def pruned_against_unpruned(args: argparse.Namespace, jobs: JobStore, folder: Path) -> None:
    (folder / "curve.py").write_text(CURVE)
    for r in range(args.rounds):
        order = ["median", "none"] if r % 2 == 0 else ["none", "median"]
        for pruner in order:
            result = pruned_arm(jobs, folder, args.steps, args.step_hold, r, pruner)
            print("prune", json.dumps(result), flush=True)


#: The kernel's cell: 6 trials of x in 0..5, 2 at a time; loss (x - 2)^2 + 0.5.
CELL = """\
%%air_sweep --trials 6 --parallel 2 --sampler grid --minimize loss --space 'x: int(0, 5)'
# round {round}
import time
from jupyter_air import log_metrics, params

x = params()["x"]
time.sleep({hold})
log_metrics({{"loss": (x - 2) ** 2 + 0.5}}, step=1)
"""
#: When the kernel is killed, one moment a round: what the sweep's store shows then.
MOMENTS = ("the sweep made", "a trial's job running", "3 trials completed")


class Kernel:
    """A real IPython kernel, as a notebook's (``%load_ext jupyter_air`` run)."""

    def __init__(self, cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd), env=dict(os.environ))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self.run("%load_ext jupyter_air")

    def run(self, code: str, timeout: float = 600) -> dict[str, Any]:
        """Run ``code`` to its end: its reply, and its result's text (``result``)."""
        said: dict[str, Any] = {}

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "execute_result":
                said["result"] = msg["content"]["data"].get("text/plain")
            elif msg["msg_type"] == "error":
                said["error"] = msg["content"]["evalue"]

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        return {**said, "status": reply["content"]["status"]}

    def kill(self) -> None:
        """SIGKILL to the kernel's process group: no shutdown, no cleanup."""
        self.client.stop_channels()
        self.manager.signal_kernel(signal.SIGKILL)
        self.manager.cleanup_resources()

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def killed_at(store: SweepStore, before: set[str], moment: str) -> bool:
    """Whether the new sweep has reached ``moment``."""
    new = [s for s in store.sweeps() if s.id not in before]
    if moment == MOMENTS[0] or not new:
        return bool(new)
    trials = store.trials(new[0].id)
    if moment == MOMENTS[1]:
        return any(t.job_id for t in trials)
    return sum(t.state == "COMPLETE" for t in trials) >= 3


def kill_round(jobs: JobStore, folder: Path, r: int, moment: str, hold: float) -> dict[str, Any]:
    from jupyter_air.sweeps.trials import SWEEP_TAG, TRIAL_TAG

    store = SweepStore(jobs.home)
    before = {s.id for s in store.sweeps()}
    cell = CELL.format(round=r, hold=hold)
    first = Kernel(folder)
    first.client.execute(cell)
    t0 = time.monotonic()
    while not killed_at(store, before, moment):
        if time.monotonic() - t0 > 300:
            raise TimeoutError(f"the sweep never reached {moment!r}")
        time.sleep(0.05)
    first.kill()
    killed_after = time.monotonic() - t0
    new = [s for s in store.sweeps() if s.id not in before]
    states_at_kill = sorted(t.state for t in store.trials(new[0].id))
    second = Kernel(folder)
    try:
        again = second.run(cell)
    finally:
        second.shutdown()
    made = [s for s in store.sweeps() if s.id not in before]
    trials = [t for s in made for t in store.trials(s.id)]
    ids = {s.id for s in made}
    of_trial: dict[str, int] = {}
    for job in jobs.jobs():
        tags = job.spec.tracking.tags
        if tags.get(SWEEP_TAG) in ids:
            key = f"{tags[SWEEP_TAG]}/{tags[TRIAL_TAG]}"
            of_trial[key] = of_trial.get(key, 0) + 1
    completed = {t.params["x"] for t in trials if t.state == "COMPLETE"}
    quiet(jobs)
    return {
        "killed_at": moment,
        "killed_after_s": round(killed_after, 1),
        "trials_at_kill": states_at_kill,
        "sweeps_made": len(made),
        "status": [s.status.value for s in made],
        "trials": len(trials),
        "lost": len(set(range(6)) - completed),
        "run_twice": sum(n - 1 for n in of_trial.values()),
        "jobs": sum(of_trial.values()),
        "rerun_result": again.get("result", again.get("error")),
    }


def kernel_killed(args: argparse.Namespace, jobs: JobStore, folder: Path) -> None:
    notebooks = folder / "notebooks"
    notebooks.mkdir(exist_ok=True)
    os.environ["JPY_SESSION_NAME"] = str(notebooks / "sweep.ipynb")
    for r, moment in enumerate(MOMENTS):
        result = kill_round(jobs, notebooks, r, moment, args.hold)
        print("kill", json.dumps(result), flush=True)


PARTS = {"loop": against_loop, "prune": pruned_against_unpruned, "kill": kernel_killed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(PARTS), help="one part (default: each)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hold", type=float, default=2.0, help="seconds each trial sleeps")
    parser.add_argument("--steps", type=int, default=20, help="points each curve logs")
    parser.add_argument(
        "--step-hold", type=float, default=0.4, help="seconds between a curve's points"
    )
    parser.add_argument(
        "--driver-from",
        type=Path,
        help="loop part: also a sweep driven by the jupyter_air package in this folder",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sweeps-") as tmp:
        folder = Path(tmp)
        os.chdir(folder)  # what a driver runs first is on PYTHONPATH, not in the checkout
        os.environ["AIR_HOME"] = str(folder / "air")
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder}/mlflow.db"
        (folder / "trial.py").write_text(TRIAL)
        jobs = JobStore()
        # The store's migrations and the first imports, paid before any arm.
        first = JobService(jobs, os_identity()).start(request(folder, 0))
        while outcome(jobs, first.job.id) is None:
            time.sleep(0.2)
        quiet(jobs)
        for name, part in PARTS.items():
            if args.only in (None, name):
                part(args, jobs, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
