"""``--backend slurm`` against plain ``srun`` on the same cluster, side by side.

A real Slurm cluster of two nodes (``tests/slurm_cluster.py``: Debian's slurm-wlm, one
slurmctld, two slurmd, on this machine) is started for the whole benchmark. Then,
alternated each round:

1. ``air``: ``@distributed(backend="slurm", nnodes=2, nproc_per_node=1)`` and
   ``fn.distributed()`` in this process, as a cell in a warm kernel (jupyter_air and
   MLflow imported once; MLflow on SQLite), from the call to its value: the supervisor,
   the MLflow run, ``srun`` and its allocation, a node agent per node calling back, one
   rank per node running the function;
2. ``srun``: ``srun -N2 --ntasks-per-node=1 python -c ...`` of the same trivial code
   (each task prints its rank), from ``Popen`` to exit;
3. ``local``: the same function with ``@distributed(nproc_per_node=2)`` on this
   machine: what a job costs before any cluster (supervisor, run, ranks);
4. ``session``: the same code as a ``%%air_distributed --session`` cell in a kernel
   whose ``%air_session start --backend slurm --nnodes 2 -n 1`` holds one allocation
   and its agents and ranks between cells (each cell still gets its MLflow run), from
   the execute request to the kernel's idle: what a user who iterates pays per cell.
   The session's start (allocation, agents, ranks) is taken once, apart.

Then the cancel: a 2-node job sleeping, cancelled once both ranks run; the time from
the cancel to no job of ours in ``squeue`` (target <= 5 s).

Run: ``.venv/bin/python bench/bench_slurm.py [--runs 5]`` (about 2 minutes on 2 cores).
Prints a JSON summary, then a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.backend_contract import Engine, submit  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: E402
from tests.waits import job_processes, until  # noqa: E402

CODE = "import os; print(os.environ.get('RANK', os.environ.get('SLURM_PROCID')))"


def rank_of() -> str:
    return os.environ["RANK"]


def time_air(call: object) -> float:
    started = time.perf_counter()
    value = call.distributed()  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    assert value == "0", value
    return elapsed


def time_srun(cluster: SlurmCluster) -> float:
    started = time.perf_counter()
    done = cluster.run("srun", "-N2", "--ntasks-per-node=1", sys.executable, "-c", CODE)
    elapsed = time.perf_counter() - started
    assert sorted(done.stdout.split()) == ["0", "1"], done.stdout
    return elapsed


def time_session(kernel: Kernel) -> float:
    started = time.perf_counter()
    done = kernel.run(f"%%air_distributed --session\n{CODE.replace('; print(', '; (')}")
    elapsed = time.perf_counter() - started
    assert done.value() == "'0'", done.text + done.traceback
    return elapsed


def start_session(work: Path) -> tuple[Kernel, float]:
    (work / "notebooks").mkdir(parents=True)
    kernel = Kernel(dict(os.environ), cwd=work / "notebooks")
    assert kernel.run("%load_ext jupyter_air").error is None
    started = time.perf_counter()
    done = kernel.run("%air_session start --backend slurm --nnodes 2 -n 1")
    assert done.error is None, done.traceback
    return kernel, time.perf_counter() - started


def time_cancel(cluster: SlurmCluster, home: Path) -> float:
    service, job = submit(Engine("slurm", nnodes=2), home, "import time; time.sleep(600)")
    until(lambda: len(job_processes(job.id)) >= 2, "both ranks", 120)
    started = time.perf_counter()
    service.cancel(job.id)
    while any("|air-" in line for line in cluster.queue()):
        time.sleep(0.05)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    os.environ["AIR_HOME"] = str(work / "air")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work}/mlflow.db"
    from jupyter_air import distributed

    call = distributed(backend="slurm", nnodes=2, nproc_per_node=1)(rank_of)
    local = distributed(nproc_per_node=2)(rank_of)
    times: dict[str, list[float]] = {
        "air": [], "srun": [], "local": [], "session": [], "cancel": []
    }  # fmt: skip
    with slurm_cluster(work / "slurm") as cluster:
        os.environ["SLURM_CONF"] = str(cluster.conf)
        time_air(call), time_srun(cluster), time_air(local)  # warm: caches, the MLflow store
        kernel, session_start = start_session(work)
        time_session(kernel)
        for round_ in range(args.runs):
            order = [
                ("air", lambda: time_air(call)),
                ("srun", lambda: time_srun(cluster)),
                ("local", lambda: time_air(local)),
                ("session", lambda: time_session(kernel)),
            ]
            for name, timed in order[round_ % 4 :] + order[: round_ % 4]:
                times[name].append(timed())
        assert kernel.run("%air_session stop").error is None
        kernel.shutdown()
        for _ in range(3):
            times["cancel"].append(time_cancel(cluster, work / "cancel"))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    summary = {
        "runs": args.runs,
        "p50_s": {k: round(v, 3) for k, v in p50.items()},
        "air_over_srun": round(p50["air"] / p50["srun"], 2),
        "session_over_srun": round(p50["session"] / p50["srun"], 2),
        "session_start_s": round(session_start, 2),
        "samples_s": {k: [round(v, 3) for v in vs] for k, vs in times.items()},
    }
    print(json.dumps(summary, indent=2))
    print("\n| trivial 2-node call | p50 |\n| --- | --- |")
    print(f'| air (`@distributed(backend="slurm")`) | {p50["air"]:.2f} s |')
    print(f"| `srun -N2 python -c` | {p50['srun']:.2f} s |")
    print(f"| local backend, 2 ranks | {p50['local']:.2f} s |")
    print(f"| ratio | x{summary['air_over_srun']} |")
    print(f"| session cell on 2 Slurm nodes | {p50['session']:.2f} s |")
    print(f"| ratio | x{summary['session_over_srun']} |")
    print(f"| the session's start, once | {session_start:.2f} s |")
    print(f"| cancel to nothing in squeue | {p50['cancel']:.2f} s |")


if __name__ == "__main__":
    main()
