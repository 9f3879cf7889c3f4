"""The ``air`` CLI against the tools it replaces (issue 17; see docs/benchmarks.md).

Side by side in this one script, arms alternating within each round, medians kept:

1. ``watch``: a job whose 2 ranks print N lines each (250,000 by default), submitted
   with ``air run -f`` and waited for (its outcome in the job store, as ``--watch`` ends
   with it), vs the same job with ``air run -f --watch`` printing every line (counted).
   Target: <= 1.3x. Each arm then waits, untimed, for the job's run to be finished in
   MLflow (its logs attached), so that no arm pays for another's tail; that end is also
   given for the unwatched job (what both arms waited for before ``--watch`` ended with
   the outcome). Beside the wall times, the watching process's own CPU seconds (not its
   children's). With ``--baseline DIR`` (another tree of this package, e.g. this one
   with the logs reader of an earlier commit), a third arm watches the same job with
   that tree's ``air``: a before/after in the same rounds.
2. ``follow``: ``LogFollower`` over that finished job's logs, in this process: lines/s
   (wall and CPU), as lines and as text (``follow_text``, what a terminal is given);
   and ``air logs ID`` to /dev/null end to end. Target: >= 200,000/s.
3. ``submit``: the CPU time of the ``air run -f`` process, beside the CPU time of a bare
   ``import mlflow`` (what the submitting side paid before). Target: <= 0.5 s.
4. ``trivial``: ``air run -f --watch`` of a 2-rank job printing one line per rank vs
   ``torchrun --nproc_per_node 2`` on the same script. Target: <= 1.3x. Beside it, from
   the job store's clock: submission (the job's record) to RUNNING (its supervisor up)
   and to attempt 1 started (its run made, the ranks starting). The arms find the
   user's tail process warm (it makes the run); once per round the trivial job is also
   timed with none running (``trivial_cold``): it starts and imports MLflow first.
5. ``search``: ``air logs ID --rank 1 --search WORD`` vs ``grep -i WORD`` on the same
   rank's log file (250,000 lines, 1 in 100 matching), end to end as processes. Target:
   <= 3x. Beside it, the interpreter's own floor: ``python -S -c pass``, ``python -c
   pass`` (with ``site``, as ``air`` starts) and ``python -I -c "import sqlite3"``.

Run: ``.venv/bin/python bench/bench_cli.py [--lines 250000] [--rounds 3] [--chatty-only]
[--baseline DIR]`` (``--chatty-only``: arms 1 and 2 alone). The ``air`` processes run the
package of the tree this script is in (or ``DIR``'s), whatever the venv has installed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.follow import LogFollower, outcome  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.tracking.run_tails import serving  # noqa: E402

BIN = Path(sys.executable).parent
CHATTY = """import os, sys
rank, n = os.environ["RANK"], int(sys.argv[1])
for i in range(n):
    print(f"rank {rank} step {i} loss 0.{i % 1000:03d} lr 3e-4 tokens/s 12345"
          + (" checkpoint saved" if i % 100 == 0 else ""))
"""
#: ``python -c OWN_CPU REPORT ARGS...``: ``air ARGS...``, writing the CPU seconds of its
#: own process (all threads, none of its children's) to REPORT as it exits.
OWN_CPU = """import atexit, resource, runpy, sys
report, sys.argv = sys.argv[1], ["air", *sys.argv[2:]]
def done():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(report, "w") as f:
        f.write(str(usage.ru_utime + usage.ru_stime))
atexit.register(done)
runpy.run_module("jupyter_air.cli", run_name="__main__", alter_sys=True)
"""
TRIVIAL = """import os
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])
"""


def workload(name: str, command: str) -> str:
    return f"experiment_name: bench-cli\ncommand: {command}\ncompute:\n  nproc_per_node: 2\n"


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str], cwd: Path, out: Any = subprocess.DEVNULL) -> float:
    """Wall seconds of one process, checked."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE, check=True)
    return time.perf_counter() - start


def submitted(output: str) -> str:
    return output.split()[1]


def wait_done(store: JobStore, job_id: str) -> None:
    """Until the job's end is recorded: after its run's MLflow tail."""
    while not store.get(job_id).done:
        time.sleep(0.02)


def wait_outcome(store: JobStore, job_id: str) -> None:
    while outcome(store, job_id) is None:
        time.sleep(0.02)


class Bench:
    def __init__(self, work: Path, lines: int, baseline: Path | None = None) -> None:
        self.work, self.lines = work, lines
        self.env = {
            **os.environ,
            "AIR_HOME": str(work / "air"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),  # no Jupyter server: no links
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
        }
        self.baseline_env = baseline and {**self.env, "PYTHONPATH": str(baseline)}
        os.environ.update({k: self.env[k] for k in ("AIR_HOME", "MLFLOW_TRACKING_URI")})
        self.store = JobStore(work / "air")
        (work / "chatty.py").write_text(CHATTY)
        (work / "trivial.py").write_text(TRIVIAL)
        (work / "chatty.yaml").write_text(workload("chatty", f"python chatty.py {lines}"))
        (work / "trivial.yaml").write_text(workload("trivial", "python trivial.py"))
        self.air = [sys.executable, "-m", "jupyter_air.cli"]
        self.chatty_job: str | None = None
        self.latencies: list[dict[str, float]] = []

    def no_watch(self) -> dict[str, float]:
        start = time.perf_counter()
        result = subprocess.run(
            [*self.air, "run", "-f", "chatty.yaml"],
            env=self.env, cwd=self.work, capture_output=True, text=True, check=True,
        )  # fmt: skip
        job_id = submitted(result.stdout)
        wait_outcome(self.store, job_id)
        seconds = time.perf_counter() - start
        wait_done(self.store, job_id)
        self.chatty_job = job_id
        return {"no_watch_s": seconds, "no_watch_recorded_end_s": time.perf_counter() - start}

    def watch(self, baseline: bool = False) -> dict[str, float]:
        out, report = self.work / "watched.txt", self.work / "watch_cpu.txt"
        air = [sys.executable, "-c", OWN_CPU, str(report)]
        env = self.baseline_env if baseline else self.env
        assert env is not None
        with out.open("w") as f:
            seconds = run([*air, "run", "-f", "chatty.yaml", "--watch"], env, self.work, f)
        printed = sum(1 for line in out.open() if " step " in line)
        assert printed == 2 * self.lines, f"--watch printed {printed} of {2 * self.lines} lines"
        with out.open() as f:
            wait_done(self.store, submitted(f.readline()))
        name = "baseline_watch" if baseline else "watch"
        return {f"{name}_s": seconds, f"{name}_cpu_s": float(report.read_text())}

    def baseline_watch(self) -> dict[str, float]:
        return self.watch(baseline=True)

    def follower(self) -> dict[str, float]:
        assert self.chatty_job is not None
        start, cpu = time.perf_counter(), time.process_time()
        count = sum(
            len(lines) for _, lines in LogFollower(self.store, self.chatty_job).follow(interval=0)
        )
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert count == 2 * self.lines
        start, text_cpu = time.perf_counter(), time.process_time()
        follower = LogFollower(self.store, self.chatty_job)
        text_count = sum(text.count("\n") for _, text in follower.follow_text(interval=0))
        text_wall, text_cpu = time.perf_counter() - start, time.process_time() - text_cpu
        assert text_count == count
        logs = run([*self.air, "logs", self.chatty_job], self.env, self.work)
        return {
            "lines_per_s_wall": count / wall,
            "lines_per_s_cpu": count / cpu,
            "text_lines_per_s_wall": count / text_wall,
            "text_lines_per_s_cpu": count / text_cpu,
            "air_logs_lines_per_s": count / logs,
        }

    def submit_cpu(self) -> dict[str, float]:
        before = cpu_of_children()
        result = subprocess.run(
            [*self.air, "run", "-f", "trivial.yaml"],
            env=self.env, cwd=self.work, capture_output=True, text=True, check=True,
        )  # fmt: skip
        air_cpu = cpu_of_children() - before
        wait_done(self.store, submitted(result.stdout))
        before = cpu_of_children()
        subprocess.run([sys.executable, "-c", "import mlflow"], check=True)
        return {"air_run_cpu_s": air_cpu, "import_mlflow_cpu_s": cpu_of_children() - before}

    def trivial_watch(self) -> float:
        start = time.perf_counter()
        result = subprocess.run(
            [*self.air, "run", "-f", "trivial.yaml", "--watch"],
            env=self.env, cwd=self.work, capture_output=True, text=True, check=True,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        wait_done(self.store, submitted(result.stdout))
        job = self.store.get(submitted(result.stdout))
        [attempt] = self.store.attempts(job.id)
        assert job.started is not None
        self.latencies.append(
            {"to_running_s": job.started - job.created, "to_ranks_s": attempt.started - job.created}
        )
        return seconds

    def trivial_watch_cold(self) -> float:
        """The trivial job once the user's tail process has gone (ended here: idle, it
        would stay ``run_tails.IDLE_EXIT`` seconds)."""
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "jupyter_air.tracking.run_tails" in cmdline and str(self.store.home) in cmdline:
                proc.terminate()
        while serving(self.store.home):
            time.sleep(0.5)
        return self.trivial_watch()

    def torchrun(self) -> float:
        argv = [str(BIN / "torchrun"), "--nproc_per_node", "2", "trivial.py"]
        return run(argv, self.env, self.work)

    def search(self) -> dict[str, float]:
        assert self.chatty_job is not None
        log = self.store.attempt_dir(self.chatty_job, 1) / "logs" / "node_0" / "rank_1.log"
        ours = [*self.air, "logs", self.chatty_job, "--rank", "1", "--search", "CHECKPOINT"]
        grep = ["grep", "-i", "CHECKPOINT", str(log)]
        py = sys.executable
        return {
            "air_s": run(ours, self.env, self.work),
            "grep_s": run(grep, self.env, self.work),
            "python_S_s": run([py, "-S", "-c", "pass"], self.env, self.work),
            "python_s": run([py, "-c", "pass"], self.env, self.work),
            "python_I_sqlite3_s": run([py, "-I", "-c", "import sqlite3"], self.env, self.work),
        }


def median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=250_000, help="lines per rank")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--chatty-only", action="store_true", help="the chatty watch and the follower only"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="a tree holding another jupyter_air package: its air watches the chatty job too",
    )
    args = parser.parse_args()
    if not args.chatty_only and shutil.which("torchrun", path=str(BIN)) is None:
        sys.exit("torchrun is missing from the venv (pip install torch)")
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    bench = Bench(work, args.lines, args.baseline and args.baseline.resolve())
    bench.trivial_watch()  # untimed: the store's and the experiment's first use, warm caches
    rounds: list[dict[str, float]] = []
    arms: list[tuple[str, Callable[[], Any]]] = [
        ("no_watch", bench.no_watch),
        ("watch", bench.watch),
        *([("baseline_watch", bench.baseline_watch)] if args.baseline else []),
    ]
    if not args.chatty_only:
        arms += [("torchrun_s", bench.torchrun), ("trivial_watch_s", bench.trivial_watch)]
    for number in range(args.rounds):
        result: dict[str, float] = {}
        for name, arm in arms if number % 2 == 0 else arms[::-1]:
            value = arm()
            result.update(value if isinstance(value, dict) else {name: value})
        result.update(bench.follower())
        if not args.chatty_only:
            result.update(bench.submit_cpu())
            result.update(bench.search())
            result.update(bench.latencies.pop())  # this round's trivial job
            result["trivial_cold_s"] = bench.trivial_watch_cold()
            result.update({f"{k}_cold": v for k, v in bench.latencies.pop().items()})
        print(json.dumps({k: round(v, 3) for k, v in result.items()}), flush=True)
        rounds.append(result)
    m = {key: median(rounds, key) for key in rounds[0]}
    print(
        f"\n{args.rounds} rounds, medians ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}):"
    )
    print(
        f"- watch {m['watch_s']:.2f} s vs no watch {m['no_watch_s']:.2f} s: "
        f"{m['watch_s'] / m['no_watch_s']:.2f}x (target <= 1.3x); the unwatched job's "
        f"recorded end (after its MLflow tail) {m['no_watch_recorded_end_s']:.2f} s"
    )
    print(f"  the watching process's own CPU: {m['watch_cpu_s']:.2f} s")
    if args.baseline:
        print(
            f"- baseline ({args.baseline}): watch {m['baseline_watch_s']:.2f} s, "
            f"{m['baseline_watch_s'] / m['no_watch_s']:.2f}x; its own CPU "
            f"{m['baseline_watch_cpu_s']:.2f} s"
        )
    print(
        f"- follower {m['lines_per_s_wall']:,.0f} lines/s wall, {m['lines_per_s_cpu']:,.0f} "
        f"lines/s CPU; as text {m['text_lines_per_s_wall']:,.0f} wall, "
        f"{m['text_lines_per_s_cpu']:,.0f} CPU; air logs {m['air_logs_lines_per_s']:,.0f} "
        "lines/s (target >= 200,000)"
    )
    if args.chatty_only:
        shutil.rmtree(work, ignore_errors=True)
        return
    print(
        f"- air run -f {m['air_run_cpu_s']:.2f} s CPU; import mlflow alone "
        f"{m['import_mlflow_cpu_s']:.2f} s (target <= 0.5 s)"
    )
    print(
        f"- trivial watch {m['trivial_watch_s']:.2f} s vs torchrun {m['torchrun_s']:.2f} s: "
        f"{m['trivial_watch_s'] / m['torchrun_s']:.2f}x (target <= 1.3x)"
    )
    print(
        f"  submission to RUNNING {m['to_running_s']:.2f} s, to attempt 1 started "
        f"{m['to_ranks_s']:.2f} s; with no tail process running: {m['trivial_cold_s']:.2f} s "
        f"({m['trivial_cold_s'] / m['torchrun_s']:.2f}x), to RUNNING "
        f"{m['to_running_s_cold']:.2f} s, to attempt 1 started {m['to_ranks_s_cold']:.2f} s"
    )
    print(f"- search {m['air_s']:.3f} s vs grep -i {m['grep_s']:.3f} s: "
          f"{m['air_s'] / m['grep_s']:.1f}x (target <= 3x)")  # fmt: skip
    print(
        f"  python -S -c pass {m['python_S_s']:.3f} s, python -c pass {m['python_s']:.3f} s, "
        f"python -I -c 'import sqlite3' {m['python_I_sqlite3_s']:.3f} s"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
