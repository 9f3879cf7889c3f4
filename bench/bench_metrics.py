"""The team's GPUs in Prometheus (issue 41): the three measured targets.

1. ``scrape``: one scrape of 8 GPUs held by 16 jobs (two users, 2 ranks a GPU) on the
   fake driver, the sampler's 2 h ring full. In process: ``generate_latest`` of the
   server's collector against a static registry of the same series (the text format
   alone), side by side. Through a real Jupyter server: ``GET jupyter-air/metrics``'s
   server time (tornado's own request time, from its debug log) against ``GET
   api/status`` of the same server, and the body's size. Targets: <= 10 ms, <= 64 KiB.
2. ``day``: a scripted day of two users' jobs on 4 fake GPUs, on a clock this script
   drives (the sampler every 10 s, a scrape every 30 s from 3 h before the day): each
   user's GPU-hours and idle GPU-hours in the day from the metrics
   (``air_gpu_allocated_seconds_total``'s increase over the day, as PromQL's
   ``increase()``) and from the jobs' own records (``metrics.gpu_hours``: the store's
   attempts and their journals), against the script's truth. Target: within 1 %.
3. ``energy``: a job's energy through the path every backend's samples take (the node's
   sample loop on the fake driver, the supervisor's feed, the journal, ``run_energy``),
   against the scripted counter (target: exact), one node and two; and power integrated
   on a driver without the counter against the true energy of three power profiles
   (target: within 2 %).

``.venv/bin/python bench/bench_metrics.py [--only scrape|scrape_route|day|energy] [--scrapes 200]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_gpu import free_port  # noqa: E402

from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for, load_in_process  # noqa: E402
from tests.waits import until  # noqa: E402

GIB = 1024**3
HOUR = 3600.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


@contextmanager
def sleepers(job_ids: list[str]) -> Iterator[list[int]]:
    """A process per job id, carrying it as a rank does (``AIR_JOB_ID``)."""
    procs = [
        subprocess.Popen(["sleep", "3600"], env={**os.environ, "AIR_JOB_ID": job, "RANK": "0"})
        for job in job_ids
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def two_users_jobs(store: Any, n: int) -> list[str]:
    """``n`` jobs, alice's and bob's in turn, bob's from a notebook; viewable by this
    OS user, as an operator's store shows them."""
    from jupyter_air.identity import os_user
    from jupyter_air.jobs.permissions import Grant, Level, Principal
    from tests.factories import job_spec

    seen = (Grant(Principal("user", os_user()), Level.CAN_VIEW),)
    jobs = []
    for i in range(n):
        owner = ("alice", "bob")[i % 2]
        tags = {"air.notebook": f"{owner}/exp-{i}.ipynb"} if owner == "bob" else {}
        spec = job_spec("python", tags=tags, run_name=f"job-{i}")
        jobs.append(store.create(spec, owner=owner, grants=seen).id)
        store.update(jobs[-1], status="RUNNING")
    return jobs


def eight_gpus(pids: list[int]) -> Scenario:
    """8 H100s, each held by two of ``pids``, their figures moving every reading."""
    return Scenario(
        gpus=[
            FakeGpu(
                util=[(7 * g + k) % 100 for k in range(50)],
                mem_used=[(20 + (g + k) % 40) * GIB for k in range(50)],
                power=[200_000 + 5_000 * ((g + k) % 50) for k in range(50)],
                energy=[10**9 + 3_000_000 * k for k in range(2000)],
                temp=[40 + k % 30 for k in range(50)],
                processes=[(pids[2 * g], 30 * GIB), (pids[2 * g + 1], 20 * GIB)],
            )
            for g in range(8)
        ]
    )


# -- 1. scrape --------------------------------------------------------------------------


def static_registry(text: str) -> Any:
    """A registry serving the same families and series as ``text`` with fixed values: what
    the text format alone costs."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import Collector, CollectorRegistry

    families = list(text_string_to_metric_families(text))

    class Static(Collector):
        def collect(self) -> Iterator[Any]:
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Static())
    return registry


def bench_scrape_in_process(work: Path, scrapes: int) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from jupyter_air.gpu.sampler import GpuSampler
    from jupyter_air.identity import os_identity
    from jupyter_air.jobs.service import JobService
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.metrics.collector import AirCollector
    from jupyter_air.metrics.settings import AirMetrics

    store = JobStore(work / "air")
    jobs = two_users_jobs(store, 16)
    with sleepers(jobs) as pids:
        eight_gpus(pids).write(Path(os.environ["FAKE_NVML_SCENARIO"]))
        sampler = GpuSampler(interval=10.0, history=7200.0)
        try:
            for _ in range(721):  # the 2 h ring full, as on a server up for hours
                sampler.sample_now()
            collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
            start = time.perf_counter()
            body = generate_latest(collector.registry)
            cold = time.perf_counter() - start  # the first: every job read from the store
            baseline = static_registry(body.decode())
            ours, ours_cpu, static = [], [], []
            for _ in range(scrapes):  # alternate, so the machine's load hits both alike
                for _ in range(3):  # a 30 s scrape of a 10 s sampler
                    sampler.sample_now()
                start, cpu = time.perf_counter(), time.thread_time()
                body = generate_latest(collector.registry)
                ours.append(time.perf_counter() - start)
                ours_cpu.append(time.thread_time() - cpu)
                start = time.perf_counter()
                generate_latest(baseline)
                static.append(time.perf_counter() - start)
        finally:
            sampler.stop()
    text = body.decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {
        "series": len(series),
        "body_bytes": len(body),
        "first_scrape_ms": cold * 1e3,
        "collector_p50_ms": statistics.median(ours) * 1e3,
        "collector_p95_ms": percentile(ours, 0.95) * 1e3,
        "collector_cpu_p50_ms": statistics.median(ours_cpu) * 1e3,
        "collector_cpu_p95_ms": percentile(ours_cpu, 0.95) * 1e3,
        "static_same_series_p50_ms": statistics.median(static) * 1e3,
        "ratio_p50_vs_static": statistics.median(ours) / statistics.median(static),
        "holders_ok": all(f'air_job="{j}"' in text for j in jobs),
    }


#: tornado's request log line (jupyter_server's ``log_request``), its time in ms.
REQUEST_LOG = re.compile(r"\b200 GET /(jupyter-air/metrics|api/status)\S* .*?([\d.]+)ms")


#: Blocks of scrapes and of ``api/status`` requests, in turn.
BLOCKS = 3


def process_cpu(pid: int) -> float:
    """CPU seconds of a process so far (user and system)."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def bench_scrape_route(work: Path, lib_dir: Path, requests: int) -> dict[str, Any]:
    from jupyter_air.jobs.store import JobStore

    home = work / "air-route"
    store = JobStore(home)
    jobs = two_users_jobs(store, 16)
    token_file = work / "metrics-token"
    token_file.write_text(secrets.token_hex(32) + "\n")
    token_file.chmod(0o600)
    port, token = free_port(), secrets.token_hex(8)
    log_path = work / "server.log"
    with sleepers(jobs) as pids:
        scenario = eight_gpus(pids).write(work / "route-scenario.txt")
        env = {
            **os.environ,
            **env_for(lib_dir, scenario),
            "AIR_HOME": str(home),
            "JUPYTER_CONFIG_DIR": str(work / "config"),
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        with log_path.open("w") as log:
            server = subprocess.Popen(
                [
                    sys.executable, "-m", "jupyter_server", "--no-browser",
                    f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                    f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
                    "--ServerApp.jpserver_extensions=jupyter_air=True",
                    "--ServerApp.log_level=DEBUG", "--allow-root",
                    "--GpuSampler.interval=1", "--GpuSampler.history=720",
                    "--GpuSampler.idle_timeout=3600",
                    f"--AirMetrics.token_file={token_file}",
                ],
                env=env, stdout=log, stderr=log,
            )  # fmt: skip
        base = f"http://127.0.0.1:{port}/"

        def get(path: str, auth: str) -> tuple[bytes, float]:
            req = urllib.request.Request(base + path, headers={"Authorization": auth})
            start = time.perf_counter()
            with urllib.request.urlopen(req, timeout=30) as response:
                body: bytes = response.read()
            return body, time.perf_counter() - start

        metrics_auth = f"Bearer {token_file.read_text().strip()}"

        def sampling() -> bool:  # (the sampler's full ring: timed in process)
            try:
                rows = json.loads(get("jupyter-air/gpu", f"token {token}")[0])
            except OSError:  # not listening yet
                return False
            return len(rows["samples"]["t"]) >= 10

        try:
            until(sampling, "the server sampling its GPUs", timeout=120, step=0.5)
            get("jupyter-air/metrics", metrics_auth)  # the first: jobs read from the store
            sizes: list[int] = []
            client: dict[str, list[float]] = {"metrics": [], "status": []}
            server_cpu = {"metrics": 0.0, "status": 0.0}
            asked = {"metrics": ("jupyter-air/metrics", metrics_auth)}
            asked["status"] = ("api/status", f"token {token}")
            for block in range(2 * BLOCKS):  # blocks of each in turn, a request a second
                kind = ("metrics", "status")[block % 2]
                before = process_cpu(server.pid)
                for _ in range(requests // BLOCKS):
                    time.sleep(1.0)  # a new sample or so between two scrapes
                    body, elapsed = get(*asked[kind])
                    client[kind].append(elapsed)
                    if kind == "metrics":
                        sizes.append(len(body))
                server_cpu[kind] += process_cpu(server.pid) - before
        finally:
            server.terminate()
            server.wait(15)
    logged: dict[str, list[float]] = {"jupyter-air/metrics": [], "api/status": []}
    for line in log_path.read_text().splitlines():
        if found := REQUEST_LOG.search(line):
            logged[found.group(1)].append(float(found.group(2)))
    n = requests // BLOCKS * BLOCKS
    scrape, status = logged["jupyter-air/metrics"][-n:], logged["api/status"][-n:]
    return {
        "requests": n,
        "server_cpu_ms_a_scrape_beyond_api_status": (
            (server_cpu["metrics"] - server_cpu["status"]) / n * 1e3
        ),
        "server_cpu_ms_an_api_status": server_cpu["status"] / n * 1e3,
        "body_bytes_max": max(sizes),
        "server_p50_ms": statistics.median(scrape),
        "server_p95_ms": percentile(scrape, 0.95),
        "api_status_server_p50_ms": statistics.median(status),
        "ratio_p50_vs_api_status": statistics.median(scrape) / statistics.median(status),
        "client_p50_ms": statistics.median(client["metrics"]) * 1e3,
        "client_api_status_p50_ms": statistics.median(client["status"]) * 1e3,
    }


# -- 2. a day of GPU-hours ----------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """One attempt of a scripted job: who, which GPUs, when, how busy."""

    name: str
    owner: str
    gpus: tuple[int, ...]
    start: float  # hours from the day's start
    end: float  # hours; past 24: still running at the day's end
    util: float
    attempt: int = 1


#: The day, hours from its start; times off the 10-s grid, as jobs keep them.
DAY = (
    Held("pretrain", "alice", (0, 1), -2.0 + 7 / 3600, 9.22, 92.0),  # began before the day
    Held("finetune", "alice", (2,), 10.055, 11.0, 85.0),  # failed, then retried:
    Held("finetune", "alice", (2,), 11.034, 13.685, 88.0, attempt=2),
    Held("explore", "bob", (3,), 1.0 + 13 / 3600, 20.31, 1.0),  # idle all day
    Held("sweep", "bob", (0, 1), 15.0 + 21 / 3600, 23.5, 60.0),
    Held("late", "bob", (2,), 22.0 + 44 / 3600, 30.0, 3.0),  # running at the day's end
)
DAY_START = 1_765_000_000.0  # a Saturday, 05:46:40 UTC
BEFORE = 3 * HOUR  # the metrics' count starts this long before the day


class Clock:
    """``time.time`` for the day: what this script says it is."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def day_truth(threshold: float) -> dict[str, tuple[float, float]]:
    """Each user's (GPU-hours, idle GPU-hours) in the day, from the script."""
    found: dict[str, list[float]] = {}
    for h in DAY:
        hours = (min(h.end, 24.0) - max(h.start, 0.0)) * len(h.gpus)
        got = found.setdefault(h.owner, [0.0, 0.0])
        got[0] += hours
        got[1] += hours if h.util < threshold else 0.0
    return {user: (v[0], v[1]) for user, v in found.items()}


def record_day(store: Any, clock: Clock) -> dict[str, str]:
    """The jobs' own records: created, attempts started and ended, each attempt's system
    samples (10 s, as its node's sampler) and the GPUs its hints name."""
    from jupyter_air.identity import os_user
    from jupyter_air.job_dir import AttemptDir
    from jupyter_air.jobs.node.hints import write_hints
    from jupyter_air.jobs.permissions import Grant, Level, Principal
    from jupyter_air.status import AttemptStatus
    from jupyter_air.tracking import journal
    from jupyter_air.tracking.sampling import Sample
    from tests.factories import job_spec

    seen = (Grant(Principal("user", os_user()), Level.CAN_VIEW),)
    jobs: dict[str, str] = {}
    for h in DAY:
        start, end = DAY_START + h.start * HOUR, DAY_START + h.end * HOUR
        clock.now = start
        if h.name not in jobs:
            spec = job_spec(
                "command", command=["train"], nproc_per_node=len(h.gpus), run_name=h.name
            )
            jobs[h.name] = store.create(spec, owner=h.owner, grants=seen).id
            store.update(jobs[h.name], status="RUNNING", started=start)
        job = jobs[h.name]
        store.start_attempt(job, h.attempt, None)
        files = AttemptDir(store.attempt_dir(job, h.attempt)).make()
        write_hints(files.path, list(h.gpus), [], start)
        last = min(end, DAY_START + 24 * HOUR)
        samples, t, step = [], start + 10.0, 0
        while t <= last:
            metrics = {f"gpu_{g}_utilization_percentage": h.util for g in h.gpus}
            samples.append(Sample(t, step, metrics))
            t, step = t + 10.0, step + 1
        journal.append_samples(files, "run", "system/", samples, [s.step for s in samples])
        if h.end <= 24.0:
            clock.now = end
            status = AttemptStatus.FAILED if h.attempt == 1 and h.name == "finetune" else None
            store.end_attempt(job, h.attempt, status or AttemptStatus.SUCCEEDED, [0])
    for h in DAY:
        if h.end <= 24.0:
            store.update(jobs[h.name], status="SUCCEEDED", ended=DAY_START + h.end * HOUR)
    return jobs


def day_scenario(t: float, pids: dict[str, int]) -> Scenario:
    """The 4 GPUs at ``t``: each held by the ranks of the attempt running on it."""
    gpus = [FakeGpu(util=0) for _ in range(4)]
    for h in DAY:
        if DAY_START + h.start * HOUR <= t < DAY_START + h.end * HOUR:
            for g in h.gpus:
                gpus[g] = FakeGpu(util=round(h.util), processes=[(pids[f"{h.name}:{g}"], GIB)])
    return Scenario(gpus=gpus)


Series = tuple[str, str, str]  # (counter, user, air_job)


def usage_counters(collector: Any) -> dict[Series, float]:
    """Each usage counter series' value, as a scrape says it."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(collector.registry).decode()
    return {
        (s.name, s.labels["user"], s.labels["air_job"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("air_gpu_allocated_seconds_total", "air_gpu_idle_seconds_total")
    }


def increase(at_start: dict[Series, float], last: dict[Series, float]) -> dict[str, list[float]]:
    """Each user's (allocated, idle) GPU-seconds counted in the day, as PromQL's
    ``increase()`` over the day sums them: each series' last value less its value at the
    day's start (0 for a series born in the day); a series that left the scrapes (its job
    ended ``forget_after`` ago) keeps its last value."""
    found: dict[str, list[float]] = {}
    for key, value in last.items():
        name, user, _ = key
        got = found.setdefault(user, [0.0, 0.0])
        got[name == "air_gpu_idle_seconds_total"] += value - at_start.get(key, 0.0)
    return found


def bench_day(work: Path) -> dict[str, Any]:
    from jupyter_air.gpu.sampler import GpuSampler
    from jupyter_air.identity import os_identity
    from jupyter_air.jobs.service import JobService
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.metrics.collector import AirCollector
    from jupyter_air.metrics.gpu_hours import gpu_hours
    from jupyter_air.metrics.settings import AirMetrics

    threshold = AirMetrics().idle_threshold
    clock = Clock(DAY_START - BEFORE)
    real_time, time.time = time.time, clock
    try:
        store = JobStore(work / "air-day")
        jobs = record_day(store, clock)
        ranks = [f"{h.name}:{g}" for h in DAY for g in h.gpus]
        with sleepers([jobs[r.split(":")[0]] for r in ranks]) as pid_list:
            pids = dict(zip(ranks, pid_list, strict=True))
            scenario_path = Path(os.environ["FAKE_NVML_SCENARIO"])
            clock.now = DAY_START - BEFORE
            sampler = GpuSampler(interval=10.0, history=3600.0)
            collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
            at_start: dict[Series, float] = {}
            last: dict[Series, float] = {}
            shown = None
            cpu = time.process_time()
            for tick in range(int((BEFORE + 24 * HOUR) / 10) + 1):
                clock.now = DAY_START - BEFORE + 10.0 * tick
                scenario = day_scenario(clock.now, pids)
                if scenario != shown:  # a job started or ended since the last sample
                    scenario.write(scenario_path)
                    shown = scenario
                sampler.sample_now()
                if tick % 3 == 0:  # a scrape every 30 s, as Prometheus keeps it
                    counters = usage_counters(collector)
                    last.update(counters)
                    if clock.now == DAY_START:
                        at_start = counters
            cpu = time.process_time() - cpu
            sampler.stop()
        now = DAY_START + 24 * HOUR
        records = gpu_hours(store, store.jobs(), DAY_START, now, threshold)
    finally:
        time.time = real_time
    truth = day_truth(threshold)
    counted = increase(at_start, last)
    rows = {}
    for user, (hours, idle) in sorted(truth.items()):
        metric_h, metric_idle = (v / HOUR for v in counted.get(user, [0.0, 0.0]))
        (rec,) = [u for u in records if u.user == user]
        rows[user] = {
            "truth_gpu_h": hours,
            "metrics_gpu_h": metric_h,
            "records_gpu_h": rec.gpu_hours,
            "metrics_error_pct": (metric_h - hours) / hours * 100,
            "records_error_pct": (rec.gpu_hours - hours) / hours * 100,
            "metrics_vs_records_pct": (metric_h - rec.gpu_hours) / rec.gpu_hours * 100,
            "truth_idle_h": idle,
            "metrics_idle_h": metric_idle,
            "records_idle_h": rec.idle_gpu_hours,
        }
    return {"users": rows, "scrapes": int((BEFORE + 24 * HOUR) / 30) + 1, "cpu_s": cpu}


# -- 3. energy ------------------------------------------------------------------------------


def journaled_energy(work: Path, nodes: list[set[int]], readings: int) -> Any:
    """A job's energy through every backend's path: each node's sample loop (``readings``
    samples, a node after another) into the supervisor's feed, its journal read back."""
    from jupyter_air.job_dir import AttemptDir
    from jupyter_air.jobs.supervision.system_feed import SystemMetricsFeed
    from jupyter_air.tracking.energy import run_energy
    from jupyter_air.tracking.sampling import Sample, SampleLoop

    files = AttemptDir(Path(tempfile.mkdtemp(dir=work)) / "attempt").make()
    feed = SystemMetricsFeed("run", files, len(nodes))
    for node, gpus in enumerate(nodes):

        def to_feed(sample: Sample, node: int = node) -> None:
            feed.add(node, [sample])

        loop = SampleLoop(3600, to_feed, gpus=gpus)
        try:
            for _ in range(readings):
                loop.take()
        finally:
            loop.finish(last=False)
    feed.finish()
    return run_energy(files)


def power_profiles() -> dict[str, Callable[[float], float]]:
    """Watts at second ``t`` of an hour's training."""
    rng = [math.sin(k * 12.9898) * 43758.5453 % 1 for k in range(3601)]  # fixed noise

    def noise(t: float) -> float:
        return 60 * (rng[int(t) % 3601] - 0.5)  # +-30 W, a new value each second

    def evals(t: float) -> float:  # 420 W training, a 40 s evaluation at 110 W every 5 min
        return (110.0 if t % 300 >= 260 else 420.0) + noise(t)

    return {
        "swinging (250 +- 150 W, 4 min period)": lambda t: 250 + 150 * math.sin(t / 37),
        "train 420 W, eval 110 W 40 s every 5 min, +-30 W noise": evals,
        "bursty (on 450 W / off 90 W every 7 s)": lambda t: 450.0 if t % 14 < 7 else 90.0,
    }


def true_energy_j(power: Callable[[float], float], a: float, b: float) -> float:
    """The energy over [a, b], summed over 10 ms (the profiles change on whole seconds)."""
    steps = round((b - a) / 0.01)
    return sum(power(a + (k + 0.5) * 0.01) for k in range(steps)) * 0.01


def bench_energy(work: Path) -> dict[str, Any]:
    from jupyter_air.tracking.energy import J_PER_KWH

    scenario_path = Path(os.environ["FAKE_NVML_SCENARIO"])
    # (a) the counter, exact: irregular rises, as a training's; node 1 reads GPU 1 after
    # node 0's readings of both GPUs (one reading a sample)
    rises = [int(1e7 * (1 + abs(math.sin(k)))) for k in range(360)]
    counter = [5 * 10**11 + sum(rises[:k]) for k in range(361)]
    Scenario(gpus=[FakeGpu(energy=counter)]).write(scenario_path)
    one = journaled_energy(work, [{0}], 361)
    exact_one = (counter[-1] - counter[0]) / 1000 / J_PER_KWH
    other = [7 * 10**10 + 2 * (c - counter[0]) for c in counter]
    Scenario(gpus=[FakeGpu(energy=counter), FakeGpu(energy=[0] * 361 + other)]).write(scenario_path)
    two = journaled_energy(work, [{0}, {1}], 361)
    exact_two = exact_one + (other[-1] - other[0]) / 1000 / J_PER_KWH
    # (b) power integrated from 10-s samples (a driver without the counter), on the
    # driver's own readings: the meter as the node's sampler runs it, at each reading's t
    integration = {}
    for name, power in power_profiles().items():
        times = [10.0 * k for k in range(361)]  # an hour, sampled every 10 s
        Scenario(gpus=[FakeGpu(energy=None, power=[round(power(t) * 1000) for t in times])]).write(
            scenario_path
        )
        meter = sampled_meter(times)
        guessed = meter.metrics()["gpu_energy_kwh"] * J_PER_KWH
        true = true_energy_j(power, times[0], times[-1])
        integration[name] = {
            "true_kwh": true / J_PER_KWH,
            "integrated_kwh": guessed / J_PER_KWH,
            "error_pct": (guessed - true) / true * 100,
        }
    return {
        "counter_one_node": {"journaled_kwh": one.kwh, "scripted_kwh": exact_one,
                             "equal": one.kwh == exact_one, "integrated_kwh": one.integrated_kwh},
        "counter_two_nodes": {"journaled_kwh": two.kwh, "scripted_kwh": exact_two,
                              "difference_kwh": two.kwh - exact_two},
        "integration_10s": integration,
    }  # fmt: skip


def sampled_meter(times: list[float]) -> Any:
    """The node sampler's GPU monitor on the fake driver, a reading at each of ``times``
    (its clock driven): the meter it fed."""
    from jupyter_air.gpu.nvml import Nvml
    from jupyter_air.tracking import system_metrics

    nvml = Nvml(retry_interval=0)
    monitor = system_metrics.GpuMonitor(nvml, gpus={0})
    real = time.monotonic
    try:
        for t in times:
            time.monotonic = lambda t=t: t  # type: ignore[misc]
            monitor.collect_metrics()
    finally:
        time.monotonic = real
        nvml.shutdown()
    return monitor._energy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", choices=("scrape", "scrape_in_process", "scrape_route", "day", "energy")
    )
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes timed in process")
    parser.add_argument("--requests", type=int, default=60, help="scrapes of the route")
    args = parser.parse_args()
    lib_dir = build_library()
    work = Path(tempfile.mkdtemp(prefix="air-bench-metrics-"))
    os.environ["FAKE_NVML_SCENARIO"] = str(work / "scenario.txt")
    Scenario(gpus=[FakeGpu()]).write(work / "scenario.txt")
    load_in_process(lib_dir)
    sections: dict[str, Callable[[], dict[str, Any]]] = {
        "scrape_in_process": lambda: bench_scrape_in_process(work, args.scrapes),
        "scrape_route": lambda: bench_scrape_route(work, lib_dir, args.requests),
        "day": lambda: bench_day(work),
        "energy": lambda: bench_energy(work),
    }
    print(f"load average: {os.getloadavg()} on {os.cpu_count()} CPUs", flush=True)
    for name, run in sections.items():
        if args.only is None or name.startswith(args.only):
            print(json.dumps({name: run()}, indent=2), flush=True)


if __name__ == "__main__":
    main()
