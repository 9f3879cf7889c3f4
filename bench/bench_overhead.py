"""What our own processes cost while a job's ranks compute (issue 37, item 7).

On a 2-core machine every CPU second the supervisor, its reaper, the user's tail
process, the courier or the kernel's live view spend while ranks run is taken from the
ranks. Two parts:

1. ``overhead``: a 2-rank job of the local backend whose ranks each run a CPU-bound
   Python loop for ``--seconds`` (60 by default), started two ways: ``air run -f
   --watch`` and a ``%%air_distributed -n 2`` cell in a kernel started with
   jupyter_client (the extension loaded, on the fake NVML driver with one GPU, as the
   kernel tests do). While both ranks run, every second, psutil reads the CPU time
   (user + system, the process's own, not its children's) of each of our processes that
   is not a rank: the supervisor, its reaper, the user's tail process
   (``tracking.run_tails``), the courier if one runs, the ``air run --watch`` process,
   and the kernel itself while its live view polls. The figure is CPU seconds per
   minute of the ranks running, per role, from the first sample with both ranks up to
   the last one before either ends (start-up and the job's end are left out), and over
   the window's second half alone (after the supervisor's one-off MLflow import, due at
   the first system sample, 10 s in: what each further minute of a long job costs).
   These are CPU times, not wall times, so they compare across runs even on a loaded
   machine (the loop is timed by the wall clock, so a busy machine gives the ranks less
   CPU, not our processes more). The ranks' own figure is given beside them.
2. ``accelerate``: Accelerate's own ``test_script`` on 2 CPU ranks, three ways,
   alternating within each round, medians: ``torchrun`` (``python -m
   torch.distributed.run --nproc-per-node 2 -m accelerate.test_utils.scripts
   .test_script``), ``air run -f --watch`` of a workload with that command, and a
   ``%%air_distributed -n 2`` cell running that module (``runpy``) in a fresh kernel
   (its start included, and the extension's load). Beside them: whether the user's
   tail process was up when ``air run`` submitted (it makes the run the ranks wait for,
   importing MLflow first if it had left), submission to ranks started, and the
   kernel's start with the extension loaded.

Every run has its own ``AIR_HOME`` and MLflow store (sqlite), so the tail process is
this bench's own. Default system-metrics interval (10 s), as a user gets.

Run: ``.venv/bin/python bench/bench_overhead.py [--seconds 60] [--rounds 5]
[--only overhead|accelerate]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.tracking.run_tails import serving  # noqa: E402
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402
from tests.waits import job_processes  # noqa: E402

BIN = Path(sys.executable).parent
LOOP = """import os, time
end = time.monotonic() + float(os.environ["BENCH_LOOP_S"])
x = 0
while time.monotonic() < end:
    for i in range(20000):
        x += i * i
print("rank", os.environ["RANK"], "done")
"""
ACCELERATE = "accelerate.test_utils.scripts.test_script"
#: The same script as a cell's body. Its result is assigned, not the cell's value: as a
#: last expression, ``run_module``'s return (the script's globals: torch, accelerate, its
#: functions) came back to the kernel, whose unpickling imported torch there (1.2 s).
RUN_ACCELERATE = f"import runpy\nran = runpy.run_module({ACCELERATE!r}, run_name='__main__')\n"
#: The environment Accelerate's test script needs to run on CPU ranks.
ACCELERATE_ENV = {"ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": ""}
#: A process's role, from a fragment of its command line.
ROLES = {
    "jupyter_air.jobs.supervision.supervisor": "supervisor",
    "jupyter_air.jobs.node.reaper": "reaper",
    "jupyter_air.tracking.run_tails": "tail process",
    "jupyter_air.notify.courier": "courier",
    "jupyter_air.cli": "air run --watch",
}


def role(proc: psutil.Process) -> str | None:
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return None
    return next((name for fragment, name in ROLES.items() if fragment in line), None)


def cpu(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


class Home:
    """One run's own AIR_HOME, MLflow store and environment."""

    def __init__(self, base: Path, name: str, nvml: Path) -> None:
        self.dir = base / name
        self.dir.mkdir()
        scenario = Scenario(gpus=[FakeGpu(util=[20, 40, 60], temp=[45, 47, 49])])
        path = scenario.write(self.dir / "nvml-scenario.txt")
        self.env = {
            **os.environ,
            **env_for(nvml, path),
            **ACCELERATE_ENV,
            "AIR_HOME": str(self.dir / "air"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{self.dir}/mlflow.db",
            "JUPYTER_RUNTIME_DIR": str(self.dir / "runtime"),  # no Jupyter server: no links
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
        }
        for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
            self.env.pop(name, None)
        (self.dir / "loop.py").write_text(LOOP)

    def workload(self, command: str) -> Path:
        path = self.dir / "workload.yaml"
        path.write_text(
            f"experiment_name: bench-overhead\ncommand: {command}\ncompute:\n  nproc_per_node: 2\n"
        )
        return path

    def ours(self, extra: dict[int, str]) -> dict[int, tuple[str, psutil.Process]]:
        """Our processes that are not ranks: those pointing into this home, and ``extra``."""
        found: dict[int, tuple[str, psutil.Process]] = {}
        home = self.env["AIR_HOME"]
        for proc in psutil.process_iter(["pid"]):
            try:
                mine = proc.environ().get("AIR_HOME") == home or home in " ".join(proc.cmdline())
            except psutil.Error:
                continue
            name = role(proc) if mine else None
            if name is not None:
                found[proc.pid] = (name, proc)
        for pid, name in extra.items():
            found[pid] = (name, psutil.Process(pid))
        return found

    def job_id(self) -> str:
        jobs = sorted((self.dir / "air" / "jobs").iterdir())
        return jobs[-1].name


def sample(home: Home, extra: dict[int, str], timeout: float = 120) -> dict[str, float]:
    """CPU seconds per minute of both ranks running, per role (and the ranks')."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = home.dir / "air" / "jobs"
        if jobs.is_dir() and any(jobs.iterdir()):
            ranks = [p for p in job_processes(home.job_id()) if role(p) is None]
            if len(ranks) == 2:
                break
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.2)
    seen: dict[int, list[tuple[float, float]]] = {}  # pid -> (time, CPU seconds)
    roles: dict[int, str] = {}
    start = end = time.monotonic()
    while all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks):
        now = time.monotonic()
        ours = [*home.ours(extra).items(), *((p.pid, ("ranks", p)) for p in ranks)]
        for pid, (name, proc) in ours:
            seconds = cpu(proc)
            if seconds is not None:
                roles[pid] = name
                seen.setdefault(pid, []).append((now, seconds))
        end = now
        time.sleep(1.0)
    half = start + (end - start) / 2
    per_role: dict[str, float] = {"window_s": end - start}
    for pid, name in roles.items():
        whole = seen[pid][-1][1] - seen[pid][0][1]
        steady = seen[pid][-1][1] - next(
            c for t, c in seen[pid] if t >= half or t == seen[pid][-1][0]
        )
        per_role[name] = per_role.get(name, 0.0) + whole / (end - start) * 60
        key = f"{name} (2nd half)"
        per_role[key] = per_role.get(key, 0.0) + steady / (end - half) * 60
    return per_role


def air_run(home: Home, command: str) -> subprocess.Popen[bytes]:
    workload = home.workload(command)
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", str(workload), "--watch"],
        env=home.env, cwd=home.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def wait_ours_gone(home: Home, timeout: float = 120) -> None:
    """Until the job's supervisor and reaper have left (the tail process stays, idle)."""
    deadline = time.monotonic() + timeout
    while any(n in ("supervisor", "reaper") for n, _ in home.ours({}).values()):
        assert time.monotonic() < deadline, "the supervisor did not leave"
        time.sleep(0.5)


def end_tail(home: Home) -> None:
    for name, proc in home.ours({}).values():
        if name in ("tail process", "courier"):
            proc.terminate()


def start_kernel(home: Home) -> Kernel:
    notebooks = home.dir / "notebooks"
    notebooks.mkdir(exist_ok=True)
    env = {**home.env, "JPY_SESSION_NAME": str(notebooks / "bench.ipynb")}
    kernel = Kernel(env, cwd=notebooks)
    loaded = kernel.run("%load_ext jupyter_air")
    assert loaded.error is None, loaded.traceback
    return kernel


def overhead_air_run(base: Path, nvml: Path, seconds: float) -> dict[str, float]:
    home = Home(base, "air-run", nvml)
    home.env["BENCH_LOOP_S"] = str(seconds)
    watcher = air_run(home, "python loop.py")
    result = sample(home, {watcher.pid: "air run --watch"})
    _, err = watcher.communicate()
    assert watcher.returncode == 0, err.decode()
    wait_ours_gone(home)
    end_tail(home)
    return result


def overhead_cell(base: Path, nvml: Path, seconds: float) -> dict[str, float]:
    home = Home(base, "cell", nvml)
    home.env["BENCH_LOOP_S"] = str(seconds)
    kernel = start_kernel(home)
    try:
        pid = kernel.manager.provisioner.pid  # type: ignore[attr-defined]
        msg = kernel.start("%%air_distributed -n 2\n" + LOOP)
        result = sample(home, {pid: "kernel"})
        execution = kernel.collect(msg)
        assert execution.error is None, execution.traceback
        wait_ours_gone(home)
    finally:
        kernel.shutdown()
        end_tail(home)
    return result


def torchrun(home: Home) -> dict[str, float]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        ACCELERATE,
    ]
    start = time.perf_counter()
    subprocess.run(argv, env=home.env, cwd=home.dir, check=True, capture_output=True)
    return {"torchrun": time.perf_counter() - start}


def accelerate_air_run(home: Home) -> dict[str, float]:
    """Its time, and beside it: whether the user's tail process was up (it makes the
    run the ranks wait for; it leaves 20 s after its last request) and the job store's
    submission to ranks started."""
    warm = serving(Path(home.env["AIR_HOME"]))
    start = time.perf_counter()
    watcher = air_run(home, f"python -m {ACCELERATE}")
    _, err = watcher.communicate()
    seconds = time.perf_counter() - start
    assert watcher.returncode == 0, err.decode()
    wait_ours_gone(home)  # untimed: the next arm does not pay for this one's MLflow tail
    store = JobStore(Path(home.env["AIR_HOME"]))
    job = max(store.jobs(), key=lambda j: j.created)
    first = store.attempts(job.id)[0]
    return {
        "air run": seconds,
        "air run: tail process up": float(warm),
        "air run: to ranks": first.started - job.created,
    }


def accelerate_cell(home: Home) -> dict[str, float]:
    start = time.perf_counter()
    kernel = start_kernel(home)
    loaded = time.perf_counter() - start
    try:
        execution = kernel.run(f"%%air_distributed -n 2\n{RUN_ACCELERATE}")
        seconds = time.perf_counter() - start
        assert execution.error is None, execution.traceback
        assert "Error" not in execution.stderr, execution.stderr[-2000:]
    finally:
        kernel.shutdown()
    wait_ours_gone(home)
    return {"cell": seconds, "cell: kernel up, extension loaded": loaded}


def machine() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)"


def overhead(base: Path, nvml: Path, seconds: float) -> None:
    print(f"overhead: 2 ranks x {seconds:.0f} s CPU-bound; {machine()}", flush=True)
    results = {
        "air run": overhead_air_run(base, nvml, seconds),
        "cell": overhead_cell(base, nvml, seconds),
    }
    for name, result in results.items():
        print(json.dumps({"variant": name, **{k: round(v, 3) for k, v in result.items()}}))
    print(f"\nCPU seconds per minute of ranks running, per role (CPU time; {machine()}):")
    roles = sorted({r for result in results.values() for r in result if "(" not in r})
    roles = [r for r in roles if r not in ("window_s", "ranks")]
    for name, result in results.items():
        for part, suffix in (("whole window", ""), ("2nd half", " (2nd half)")):
            ours = sum(result.get(r + suffix, 0.0) for r in roles)
            shown = ", ".join(f"{r} {result[r + suffix]:.2f}" for r in roles if r in result)
            ranks = result["ranks" + suffix]
            print(f"- {name}, {part}: {shown}; all ours {ours:.2f} (ranks {ranks:.1f})")


def accelerate(base: Path, nvml: Path, rounds: int) -> None:
    home = Home(base, "accelerate", nvml)
    torchrun(home)  # untimed: warm caches
    arms: list[tuple[str, Callable[[Home], dict[str, float]]]] = [
        ("torchrun", torchrun),
        ("air run", accelerate_air_run),
        ("cell", accelerate_cell),
    ]
    rows: list[dict[str, float]] = []
    print(f"accelerate: {ACCELERATE} on 2 CPU ranks; {machine()}", flush=True)
    for number in range(rounds):
        row: dict[str, float] = {}
        for _, arm in arms[number % 3 :] + arms[: number % 3]:
            row.update(arm(home))
        print(json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
        rows.append(row)
    m = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    up = sum(int(r["air run: tail process up"]) for r in rows)
    print(f"\n{rounds} rounds, medians ({machine()}):")
    print(
        f"- torchrun {m['torchrun']:.2f} s, air run {m['air run']:.2f} s "
        f"({m['air run'] / m['torchrun']:.2f}x), cell {m['cell']:.2f} s "
        f"({m['cell'] / m['torchrun']:.2f}x, kernel start included)"
    )
    print(
        f"  air run: submission to ranks {m['air run: to ranks']:.2f} s; the tail process "
        f"was up for {up} of {rounds}; cell: kernel up and extension loaded "
        f"{m['cell: kernel up, extension loaded']:.2f} s"
    )
    end_tail(home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each rank's loop")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the Accelerate part")
    parser.add_argument("--only", choices=["overhead", "accelerate"])
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    nvml = build_library()
    try:
        if args.only != "accelerate":
            overhead(base, nvml, args.seconds)
        if args.only != "overhead":
            accelerate(base, nvml, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
