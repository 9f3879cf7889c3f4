"""``--backend ray`` vs Ray Train's TorchTrainer vs the local backend, side by side.

One simulated Ray cluster (``ray.cluster_utils.Cluster``: a head and a second node,
one CPU each, no GPU, no dashboard, as in tests/kernel/test_ray_backend.py) is started
in this process for the whole benchmark. The same tiny gloo DDP training (Linear(16, 1),
20 SGD steps; see bench_magic.py) then runs 2 ranks at a time, three ways, alternated
each round (the order rotates), each a fresh ``python`` driver timed from ``Popen`` to
its exit (interpreter and imports count for all alike):

1. ``ray``: ``@distributed(backend="ray", nnodes=2, nproc_per_node=1)`` and
   ``fn.distributed()`` on the cluster (``RAY_ADDRESS``), MLflow on SQLite;
2. ``torchtrainer``: Ray Train's ``TorchTrainer`` with ``ScalingConfig(num_workers=2,
   use_gpu=False)`` on the same cluster (one CPU per node: one worker per node), Ray's
   defaults for log forwarding;
3. ``local``: ``@distributed(nproc_per_node=2)`` on this machine, no cluster.

Each driver checks its result (world size 2, one rank per node on the cluster) and
exits non-zero otherwise. Every rank prints a line with ``time.time()`` first thing:
"user code" is when it ran, "first line" when the driver printed it. After each run
the script waits until the job's processes are gone (our supervisor finishes MLflow
after the driver returned; Ray reaps a finished driver's workers), so runs do not
overlap; that wait is reported as ``settle``. A first, untimed round warms caches and
creates the MLflow store.

Memory: RSS (and USS) of the cluster's processes when idle, by process and by node;
the peak of every process of one more, untimed, run of each contender (sampled every
0.1 s); and the RSS of a driver after ``import ray`` and ``ray.init(address)``.

Run: ``.venv/bin/python bench/bench_ray.py [--runs 5]`` (about 8 minutes on 2 cores).
Prints a JSON summary, then a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.store import JobStore  # noqa: E402

CONTENDERS = ("ray", "torchtrainer", "local")
#: Detached actors Ray Train leaves running after a ``fit`` (for every later one too).
STAYING = ("ray::_AutoscalingCoordinatorActor",)

#: The training every contender runs, with the process group already initialized.
WORK = """
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 16)
    for _ in range(20):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    world = dist.get_world_size()
"""

OURS = (
    """
import sys
from jupyter_air import distributed


@distributed(backend=BACKEND, nnodes=NNODES, nproc_per_node=NPROC)
def train():
    import os, time
    print(f"AIR_BENCH_FIRST {time.time():.3f} rank {os.environ['RANK']} "
          f"node {os.environ['GROUP_RANK']}", flush=True)
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
"""
    + WORK
    + """
    print(f"AIR_BENCH_LAST {time.time():.3f} rank {os.environ['RANK']} world {world}", flush=True)
    dist.destroy_process_group()
    return world


if __name__ == "__main__":
    world = train.distributed()
    print(f"AIR_BENCH_RESULT world_size={world}", flush=True)
    sys.exit(0 if world == 2 else 3)
"""
)

TORCHTRAINER = (
    """
import os, sys
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train(config):
    import time
    import ray, ray.train
    print(f"AIR_BENCH_FIRST {time.time():.3f} rank {ray.train.get_context().get_world_rank()} "
          f"node {ray.get_runtime_context().get_node_id()}", flush=True)
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    # Ray Train has initialized the gloo process group already.
"""
    + WORK
    + """
    rank = ray.train.get_context().get_world_rank()
    print(f"AIR_BENCH_LAST {time.time():.3f} rank {rank} world {world}", flush=True)


if __name__ == "__main__":
    ray.init(address=os.environ["RAY_ADDRESS"])
    trainer = TorchTrainer(
        train,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=sys.argv[1], name=sys.argv[2]),
    )
    result = trainer.fit()
    print(f"AIR_BENCH_RESULT error={result.error}", flush=True)
    sys.exit(0 if result.error is None else 3)
"""
)

DRIVER_MEMORY = """
import json, os, sys, psutil
me = psutil.Process()
def mem():
    info = me.memory_full_info()
    return {"rss_mb": round(info.rss / 2**20, 1), "uss_mb": round(info.uss / 2**20, 1)}
out = {"bare (psutil imported)": mem()}
import ray
out["after import ray"] = mem()
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
out["after ray.init(address)"] = mem()
print("AIR_BENCH_MEMORY " + json.dumps(out), flush=True)
ray.shutdown()
"""

FIRST = re.compile(r"AIR_BENCH_FIRST (\S+) rank (\S+) node (\S+)")
LAST = re.compile(r"AIR_BENCH_LAST (\S+) rank (\S+) world (\S+)")


# -- processes ---------------------------------------------------------------------


def become_subreaper() -> None:
    """Orphans (a supervisor whose driver exited) become our children, so every
    process a run leaves behind is found, measured and reaped from here."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def label(proc: psutil.Process) -> str:
    """A short name: Ray's process title, the binary, or the Python script."""
    try:
        cmd = proc.cmdline()
        name = proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    if cmd and cmd[0].startswith("ray::"):  # an actor's title names its running method too
        return cmd[0].split()[0].split(".")[0]
    if name in ("gcs_server", "raylet"):
        return name
    if "-m" in cmd:
        module = cmd[cmd.index("-m") + 1]
        return {
            "jupyter_air.jobs.node.rank_main": "rank",
            "jupyter_air.jobs.supervision.supervisor": "supervisor",
        }.get(module, module)
    for arg in cmd[1:]:
        if arg.endswith(".py"):
            parts = Path(arg).parts
            if arg.endswith("dashboard/agent.py"):
                return "dashboard agent"
            if arg.endswith("runtime_env/agent/main.py"):
                return "runtime_env agent"
            if arg.endswith("autoscaler/_private/monitor.py"):
                return "autoscaler monitor"
            if arg.endswith("dashboard/dashboard.py"):
                return "dashboard (minimal)"
            if arg.startswith(tempfile.gettempdir()) and "air-bench-ray-" in arg:
                return "driver"
            return parts[-1].removesuffix(".py")
    return name


def rss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def active(proc: psutil.Process) -> bool:
    """Alive and not an idle Ray worker waiting for a task."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and label(proc) != "ray::IDLE"
    except psutil.NoSuchProcess:
        return False


def cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return float(times.user + times.system)


def reap_zombies(keep: set[int]) -> None:
    for proc in psutil.Process().children():
        try:
            zombie = proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            continue
        if zombie and proc.pid not in keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, os.WNOHANG)


class Cluster:
    """The simulated two-node cluster, its processes and environment."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster as RayCluster

        # Short: Ray's socket paths must fit in 107 bytes.
        self.tmp = tempfile.mkdtemp(prefix="airray", dir="/tmp")
        self.env = {
            "RAY_TMPDIR": self.tmp,
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        os.environ.update(self.env)  # the raylets, and so every worker, inherit it
        started = time.perf_counter()
        self.ray = RayCluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False},
        )
        self.ray.add_node(num_cpus=1, num_gpus=0)
        self.ray.wait_for_nodes(timeout=120)
        self.start_seconds = time.perf_counter() - started
        self.address = self.ray.address

    def node_pids(self) -> dict[str, set[int]]:
        """Each node's own processes (and theirs: agents, workers), by node."""
        nodes: dict[str, set[int]] = {}
        for i, node in enumerate(self.ray.list_all_nodes()):  # type: ignore[no-untyped-call]
            pids: set[int] = set()
            for infos in node.all_processes.values():
                for info in infos:
                    pids.add(info.process.pid)
                    try:
                        kids = psutil.Process(info.process.pid).children(recursive=True)
                    except psutil.NoSuchProcess:
                        continue
                    pids.update(k.pid for k in kids)
            nodes["head" if i == 0 else f"node {i}"] = pids
        return nodes

    def baseline(self) -> tuple[set[int], set[int]]:
        """Every process of the idle cluster: its services (gcs, raylets, agents,
        monitors) and its idle workers, which a job may take."""
        services: set[int] = set()
        idle: set[int] = set()
        for proc in descendants():
            (idle if label(proc) == "ray::IDLE" else services).add(proc.pid)
        return services, idle

    def shutdown(self) -> None:
        self.ray.shutdown()  # type: ignore[no-untyped-call]
        shutil.rmtree(self.tmp, ignore_errors=True)


def idle_memory(cluster: Cluster) -> dict[str, Any]:
    """RSS and USS of every process of the idle cluster, by name and by node."""
    by_name: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "rss_mb": 0, "uss_mb": 0})
    by_node: dict[str, dict[str, float]] = {}
    total_rss = total_uss = 0
    for node, pids in cluster.node_pids().items():
        node_rss = node_uss = 0
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            entry = by_name[label(proc)]
            entry["n"] += 1
            entry["rss_mb"] += info.rss / 2**20
            entry["uss_mb"] += info.uss / 2**20
            node_rss += info.rss
            node_uss += info.uss
        by_node[node] = {"rss_mb": round(node_rss / 2**20), "uss_mb": round(node_uss / 2**20)}
        total_rss += node_rss
        total_uss += node_uss
    return {
        "total_rss_mb": round(total_rss / 2**20),
        "total_uss_mb": round(total_uss / 2**20),
        "by_node": by_node,
        "by_process": {
            k: {"n": v["n"], "rss_mb": round(v["rss_mb"]), "uss_mb": round(v["uss_mb"])}
            for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]["rss_mb"])
        },
    }


class PeakSampler:
    """Every 0.1 s: RSS of every process under this one, by name; keeps the sample with
    the largest total outside the cluster's services, and the CPU time each name used
    (a process is counted from its first sight; one that exits loses its last 0.1 s)."""

    def __init__(self, services: set[int], idle: set[int]) -> None:
        self._services = services
        self._idle = idle
        self._stop = threading.Event()
        self.peak_total = 0
        self.peak_by_name: dict[str, int] = {}
        self.services_peak = 0
        self._cpu: dict[int, tuple[str, float, float]] = {}  # pid -> (name, first, last)
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PeakSampler:
        for proc in descendants():  # what ran before the run does not count
            cpu = cpu_seconds(proc)
            self._cpu[proc.pid] = (label(proc), cpu, cpu)
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _service(self, proc: psutil.Process, name: str) -> bool:
        return proc.pid in self._services or (proc.pid in self._idle and name == "ray::IDLE")

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            by_name: dict[str, int] = defaultdict(int)
            services = 0
            for proc in descendants():
                name = label(proc)
                size = rss(proc)
                if self._service(proc, name):
                    services += size
                else:
                    by_name[name] += size
                known = self._cpu.get(proc.pid)
                first, last = (known[1], known[2]) if known else (0.0, 0.0)
                if known and name in ("?", "ray::IDLE"):  # gone, or a worker between tasks
                    name = known[0]
                self._cpu[proc.pid] = (name, first, cpu_seconds(proc) or last)
            total = sum(by_name.values())
            if total > self.peak_total:
                self.peak_total, self.peak_by_name = total, dict(by_name)
            self.services_peak = max(self.services_peak, services)

    def summary(self) -> dict[str, Any]:
        cpu: dict[str, float] = defaultdict(float)
        for name, first, last in self._cpu.values():
            cpu[name] += last - first
        return {
            "peak_rss_mb": round(self.peak_total / 2**20),
            "at_peak_by_process_mb": {
                k: round(v / 2**20)
                for k, v in sorted(self.peak_by_name.items(), key=lambda kv: -kv[1])
            },
            "cluster_services_peak_rss_mb": round(self.services_peak / 2**20),
            "cpu_seconds_by_process": {
                k: round(v, 2) for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.05
            },
        }


# -- runs --------------------------------------------------------------------------


class Bench:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.work = Path(tempfile.mkdtemp(prefix="air-bench-ray-"))
        self.air_home = self.work / "air"
        ours = OURS.replace("BACKEND", '"ray"').replace("NNODES", "2").replace("NPROC", "1")
        local = OURS.replace("BACKEND", '"local"').replace("NNODES", "1").replace("NPROC", "2")
        self.scripts = {
            "ray": self.work / "ours_ray.py",
            "torchtrainer": self.work / "torchtrainer.py",
            "local": self.work / "ours_local.py",
        }
        self.scripts["ray"].write_text(ours)
        self.scripts["local"].write_text(local)
        self.scripts["torchtrainer"].write_text(TORCHTRAINER)
        (self.work / "driver_memory.py").write_text(DRIVER_MEMORY)
        base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        base.update(
            {
                "AIR_HOME": str(self.air_home),
                "MLFLOW_TRACKING_URI": f"sqlite:///{self.work}/mlflow.db",
                "PYTHONUNBUFFERED": "1",
            }
        )
        on_cluster = {**base, **cluster.env, "RAY_ADDRESS": cluster.address}
        self.envs = {"ray": on_cluster, "torchtrainer": on_cluster, "local": base}
        self.services, self.idle = cluster.baseline()
        self.staying: dict[str, int] = {}  # name -> RSS (MB) of actors a run left
        self.count = 0

    def argv(self, who: str) -> list[str]:
        argv = [sys.executable, str(self.scripts[who])]
        if who == "torchtrainer":
            self.count += 1
            argv += [str(self.work / "ray_results"), f"bench-{self.count}"]
        return argv

    def run(self, who: str) -> dict[str, Any]:
        lines: list[tuple[float, str]] = []
        start_wall = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(
            self.argv(who),
            env=self.envs[who],
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        stream = proc.stdout

        def read() -> None:
            for line in stream:
                lines.append((time.time(), line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        code = proc.wait()
        seconds = time.perf_counter() - start
        reader.join(10)
        log = self.work / f"{who}-{self.count}-{int(start_wall)}.out"
        log.write_text("".join(text for _, text in lines))
        result: dict[str, Any] = {"seconds": seconds, "code": code, "output": str(log)}
        firsts = [(t, FIRST.search(text)) for t, text in lines if FIRST.search(text)]
        if firsts:
            result["user_code_s"] = min(float(m.group(1)) for _, m in firsts if m) - start_wall
            result["first_line_s"] = firsts[0][0] - start_wall
            result["ranks"] = sorted({(m.group(2), m.group(3)) for _, m in firsts if m})
            result["duplicated_lines"] = len(firsts) - len(result["ranks"])
        lasts = [m for _, text in lines if (m := LAST.search(text))]
        if lasts:
            result["user_code_end_s"] = max(float(m.group(1)) for m in lasts) - start_wall
        # Both ranks ran to the end in a world of 2, each on its own node on the cluster
        # (Ray Train's log forwarding may show a line twice).
        ok = code == 0 and {(m.group(2), m.group(3)) for m in lasts} == {("0", "2"), ("1", "2")}
        ranks = dict(result.get("ranks", []))
        ok = ok and set(ranks) == {"0", "1"}
        if who != "local":
            ok = ok and len(set(ranks.values())) == 2
        if who != "torchtrainer":
            ok = ok and any("AIR_BENCH_RESULT world_size=2" in t for _, t in lines)
        if not ok:
            tail = "".join(text for _, text in lines[-40:])
            raise RuntimeError(f"{who} failed (exit {code}, ranks {result.get('ranks')}):\n{tail}")
        if who != "torchtrainer":
            result["phases"] = self.phases(start_wall, start_wall + seconds)
        result["settle_s"] = self.settle()
        return result

    def phases(self, popen: float, exit_: float) -> dict[str, float]:
        """Where one of our runs spent its time, from the job store and the rank logs."""
        store = JobStore(self.air_home)
        job = store.jobs(limit=1)[0]
        (attempt,) = store.attempts(job.id)
        attempt_dir = store.attempt_dir(job.id, 1)
        stamps = []
        for path in attempt_dir.glob("logs/node_*/rank_*.log"):
            for line in path.read_text().splitlines():
                head = line.split("\t", 1)[0]
                if head.isdigit():
                    stamps.append(int(head) / 1000)
        points = {
            "job recorded (driver: imports, MLflow run)": job.created,
            "supervisor running": job.started or job.created,
            "attempt started": attempt.started,
            "first rank record": min(stamps) if stamps else attempt.started,
            "last rank record (user code done)": max(stamps) if stamps else attempt.started,
            "attempt ended (ranks exited)": attempt.ended or exit_,
            "job ended": job.ended or exit_,
            "driver exited": exit_,
        }
        out, last = {}, popen
        for name, at in points.items():
            out[name] = round(at - last, 3)
            last = at
        return out

    def settle(self, timeout: float = 120) -> float:
        """Until every process of the run is gone (idle Ray workers may stay)."""
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            reap_zombies(self.services | self.idle)
            busy = [p for p in descendants() if p.pid not in self.services and active(p)]
            for proc in busy:
                if label(proc) in STAYING:
                    self.services.add(proc.pid)
                    self.staying[label(proc)] = round(rss(proc) / 2**20)
            busy = [p for p in busy if p.pid not in self.services]
            if not busy:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"processes left after {timeout} s: {[label(p) for p in busy]}")
        seconds = time.perf_counter() - started
        time.sleep(1.0)
        return seconds

    def peak(self, who: str) -> dict[str, Any]:
        with PeakSampler(self.services, self.idle) as sampler:
            self.run(who)
        return sampler.summary()

    def driver_memory(self) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, str(self.work / "driver_memory.py")],
            env=self.envs["ray"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        (line,) = [x for x in out.splitlines() if x.startswith("AIR_BENCH_MEMORY ")]
        self.settle()
        return dict(json.loads(line.removeprefix("AIR_BENCH_MEMORY ")))


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    become_subreaper()
    before = {p.pid for p in descendants()}
    cluster = Cluster()
    bench = None
    try:
        time.sleep(5)  # let prestarted workers come up
        reap_zombies(set())
        idle = idle_memory(cluster)
        bench = Bench(cluster)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in CONTENDERS}
        warmup = {who: round(bench.run(who)["seconds"], 2) for who in CONTENDERS}
        print(f"warm-up round: {warmup}", file=sys.stderr)
        for i in range(args.runs):
            order = CONTENDERS[i % 3 :] + CONTENDERS[: i % 3]
            for who in order:
                result = bench.run(who)
                runs[who].append(result)
                print(
                    f"round {i + 1} {who}: {result['seconds']:.2f} s "
                    f"(user code at {result.get('user_code_s', float('nan')):.2f} s, "
                    f"settle {result['settle_s']:.1f} s)",
                    file=sys.stderr,
                )
        memory = {
            "cluster_start_s": round(cluster.start_seconds, 1),
            "idle_cluster": idle,
            "driver": bench.driver_memory(),
            "left_running_by_ray_train_rss_mb": bench.staying,
            "peak_during_one_run": {who: bench.peak(who) for who in CONTENDERS},
        }
        memory["idle_cluster_after_runs"] = idle_memory(cluster)
    finally:
        if bench is not None and not args.keep:
            shutil.rmtree(bench.work, ignore_errors=True)
        cluster.shutdown()
        reap_zombies(set())
        left = [p for p in descendants() if p.pid not in before]
        for proc in left:
            print(f"left behind, killed: {proc.pid} {label(proc)}", file=sys.stderr)
            proc.kill()
        psutil.wait_procs(left, timeout=10)
        reap_zombies(set())
    summary = report(runs, warmup, memory)
    print(json.dumps(summary, indent=2))
    print(markdown(summary))


def report(
    runs: dict[str, list[dict[str, Any]]], warmup: dict[str, float], memory: dict[str, Any]
) -> dict[str, Any]:
    wall = {who: [r["seconds"] for r in rs] for who, rs in runs.items()}
    med = {who: statistics.median(v) for who, v in wall.items()}
    phases: dict[str, dict[str, float]] = {}
    for who in ("ray", "local"):
        names = runs[who][0]["phases"]
        phases[who] = {
            n: round(statistics.median(r["phases"][n] for r in runs[who]), 2) for n in names
        }
    return {
        "seconds": {who: [round(x, 2) for x in v] for who, v in wall.items()},
        "wall": {who: stats(v) for who, v in wall.items()},
        "user_code_s": {who: stats([r["user_code_s"] for r in rs]) for who, rs in runs.items()},
        "user_code_end_s": {
            who: stats([r["user_code_end_s"] for r in rs]) for who, rs in runs.items()
        },
        "first_line_s": {who: stats([r["first_line_s"] for r in rs]) for who, rs in runs.items()},
        "settle_s": {who: stats([r["settle_s"] for r in rs]) for who, rs in runs.items()},
        "rank_lines_shown_twice_at_driver": {
            who: max(r.get("duplicated_lines", 0) for r in rs) for who, rs in runs.items()
        },
        "ratio_ray_vs_torchtrainer": round(med["ray"] / med["torchtrainer"], 2),
        "ratio_ray_vs_local": round(med["ray"] / med["local"], 2),
        "per_round_ratio_ray_vs_torchtrainer": [
            round(a / b, 2) for a, b in zip(wall["ray"], wall["torchtrainer"], strict=True)
        ],
        "per_round_ratio_ray_vs_local": [
            round(a / b, 2) for a, b in zip(wall["ray"], wall["local"], strict=True)
        ],
        "warmup_seconds": warmup,
        "phases_median_s": phases,
        "memory": memory,
    }


def markdown(s: dict[str, Any]) -> str:
    names = {
        "ray": "`@distributed(backend='ray', nnodes=2, nproc_per_node=1)`",
        "torchtrainer": "Ray Train `TorchTrainer`, `ScalingConfig(num_workers=2)`",
        "local": "`@distributed(nproc_per_node=2)` (local backend)",
    }
    rows = [
        "| contender | wall median | min | max | user code starts | first line at driver "
        "| user code ends | settle after exit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for who, name in names.items():
        w, u, f = s["wall"][who], s["user_code_s"][who], s["first_line_s"][who]
        e, t = s["user_code_end_s"][who], s["settle_s"][who]
        rows.append(
            f"| {name} | {w['median']:.2f} s | {w['min']:.2f} s | {w['max']:.2f} s "
            f"| {u['median']:.2f} s | {f['median']:.2f} s | {e['median']:.2f} s "
            f"| {t['median']:.2f} s |"
        )
    rows.append("")
    rows.append(f"ray / TorchTrainer: **{s['ratio_ray_vs_torchtrainer']}x** (target <= 0.5x)")
    rows.append(f"ray / local: **{s['ratio_ray_vs_local']}x**")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
