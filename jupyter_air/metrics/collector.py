"""The Prometheus collector: reads the GPU sampler and the jobs service at scrape time.

GPU gauges carry dcgm-exporter's names, units and labels (``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``), so that its dashboards work, plus ``user``,
``air_job`` and ``notebook`` of the processes holding the GPU (several holders: their
values joined with ``,``); ``air_job``, not ``job``, which Prometheus gives every series
(the scrape's job), as dcgm-exporter's ``hpc_job``. Who holds a GPU is said as the GPU
panel says it: the job a process runs for (``AIR_JOB_ID``), else the kernel it descends
from; its user is the job's owner, else the process's OS user. A MIG-enabled GPU's
slices have memory series of their own with dcgm-exporter's ``GPU_I_ID`` and
``GPU_I_PROFILE`` labels (empty on a whole GPU's series), held by the processes on each,
in place of the GPU's memory series (a sum over series counts each MiB once).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..gpu.owners import job_of, owner_of
from ..gpu.sampler import GpuSampler
from ..jobs.permissions import Forbidden
from ..jobs.service import JobService
from ..jobs.store import UnknownJob
from .settings import AirMetrics
from .usage import GpuUsage, Holder

GPU_LABELS = (
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "user",
    "air_job",
    "notebook",
)
USAGE_LABELS = ("Hostname", "user", "air_job", "notebook")
JOB_LABELS = ("state", "user")

#: dcgm-exporter's gauges we export: (name, help), as its default counters say them.
DCGM_GAUGES: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB): total less used."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ)."),
)

#: Every metric name a scrape can hold, as Prometheus stores it (a counter's with _total).
EXPORTED = frozenset(
    {name for name, _ in DCGM_GAUGES}
    | {"air_gpu_allocated_seconds_total", "air_gpu_idle_seconds_total", "air_jobs"}
)


class AirCollector(Collector):
    """One per process: its usage counters live as long as it does.

    ``kernels``: the pid of each kernel of this server and its notebook, set by the
    server before a scrape (empty in ``air exporter``, which has no kernels).
    """

    def __init__(self, sampler: GpuSampler, service: JobService, settings: AirMetrics) -> None:
        self.sampler = sampler
        self.service = service
        self.usage = GpuUsage(settings.idle_threshold, settings.forget_after)
        self.kernels: Mapping[int, str] = {}
        self._lock = threading.Lock()
        #: The newest values of each GPU's sample columns, kept between scrapes.
        self._latest: list[dict[str, Any]] = []
        #: The holder of each job whose processes held GPUs at the last scrape.
        self._job_holders: dict[str, Holder] = {}
        #: The job of each GPU process at the last scrape, by (pid, start time): a
        #: process's AIR_JOB_ID never changes, and reading its environment is a scrape's
        #: dearest look at it.
        self._pid_jobs: dict[tuple[int, float], str | None] = {}
        #: The GPUs and host of the sampler's inventory, sent by it only when new.
        self._inventory: tuple[str | None, list[dict[str, Any]], dict[str, Any]] = (None, [], {})
        #: A registry of this collector alone, never the process-wide default one.
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            doc = self.sampler.snapshot(self.usage.counted_until, self._inventory[0])
            if "gpus" in doc:  # the first scrape, or GPUs that changed
                self._inventory = (doc["inventory"], doc["gpus"], doc["host"])
            doc["gpus"], doc["host"] = self._inventory[1:]
            if len(self._latest) != len(doc["samples"]["gpu"]):  # another inventory
                self._latest = [{} for _ in doc["samples"]["gpu"]]
            for latest, columns in zip(self._latest, doc["samples"]["gpu"], strict=True):
                latest.update({name: values[-1] for name, values in columns.items() if values})
            holders = self._holders(doc)
            self.usage.charge(
                doc["samples"]["t"],
                [gpu["util"] for gpu in doc["samples"]["gpu"]],
                [frozenset(held) for held in holders],
                self.sampler.interval,
            )
            yield from self._gauges(doc, holders)
        yield from self._usage(str(doc["host"]["hostname"]))
        yield self._jobs()

    def _holders(self, doc: dict[str, Any]) -> list[list[Holder]]:
        """The holder of each process of each GPU. A job's owner and notebook never
        change: each job is read once while its processes hold GPUs (kept from one scrape
        to the next)."""
        jobs: dict[str, Holder] = {}
        pids: dict[tuple[int, float], str | None] = {}
        holders = [
            [self._holder(p["pid"], jobs, pids) for p in state["processes"]]
            for state in doc["state"]
        ]
        self._job_holders, self._pid_jobs = jobs, pids
        return holders

    def _holder(
        self, pid: int, jobs: dict[str, Holder], pids: dict[tuple[int, float], str | None]
    ) -> Holder:
        job_id = self._job_of(pid, pids)
        if job_id is None:
            return Holder(_user_of(pid), "", owner_of(pid, self.kernels) or "")
        if job_id not in jobs:
            jobs[job_id] = self._job_holders.get(job_id) or self._job_holder(job_id, pid)
        return jobs[job_id]

    def _job_of(self, pid: int, pids: dict[tuple[int, float], str | None]) -> str | None:
        """``job_of(pid)``, read once in the life of the process."""
        try:
            key = (pid, psutil.Process(pid).create_time())
        except (psutil.Error, OSError):  # gone
            return None
        if key not in pids:
            pids[key] = self._pid_jobs[key] if key in self._pid_jobs else job_of(pid)
        return pids[key]

    def _job_holder(self, job_id: str, pid: int) -> Holder:
        try:
            job = self.service.get(job_id)
        except (UnknownJob, Forbidden):  # not in this store, or not its user's to see
            return Holder(_user_of(pid), job_id, "")
        return Holder(job.owner, job_id, dict(job.spec.tracking.tags).get("air.notebook", ""))

    def _gauges(self, doc: dict[str, Any], holders: list[list[Holder]]) -> Iterator[Metric]:
        host = str(doc["host"]["hostname"])
        families = {
            name: GaugeMetricFamily(name, text, labels=GPU_LABELS) for name, text in DCGM_GAUGES
        }
        gpus = zip(doc["gpus"], self._latest, holders, doc["state"], strict=True)
        for info, latest, held, state in gpus:
            gpu = [str(info["index"]), info["uuid"] or "", f"nvidia{info['index']}"]
            gpu += [info["name"] or "", host]
            labels = [*gpu, "", "", *_holder_labels(held)]
            for mig in state.get("mig", []):  # each slice: its memory, its holders
                on_it = [held[i] for i in mig["processes"]]
                instance = [str(mig["gpu_instance"]), mig["profile"] or ""]
                _add_memory(families, [*gpu, *instance, *_holder_labels(on_it)], mig)
            # A MIG GPU's memory is its slices' (summed by user, it must count once)
            total, used = info["mem_total_mib"], None if state.get("mig") else latest.get("mem")
            values = {
                "DCGM_FI_DEV_GPU_UTIL": latest.get("util"),
                "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_DEV_FB_FREE": None if total is None or used is None else total - used,
                "DCGM_FI_DEV_GPU_TEMP": latest.get("temp"),
                "DCGM_FI_DEV_POWER_USAGE": latest.get("power"),
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": state.get("energy_mj"),
            }
            for name, value in values.items():
                if value is not None:  # not reported, or the GPU is lost
                    families[name].add_metric(labels, float(value))
        return iter(families.values())

    def _usage(self, host: str) -> Iterator[Metric]:
        allocated = CounterMetricFamily(
            "air_gpu_allocated_seconds",
            "GPU-seconds held by a user's job or notebook (shared evenly between holders).",
            labels=USAGE_LABELS,
        )
        idle = CounterMetricFamily(
            "air_gpu_idle_seconds",
            "GPU-seconds held while the GPU's utilization was under AirMetrics.idle_threshold.",
            labels=USAGE_LABELS,
        )
        for usage in self.usage.usages(time.time()):
            h = usage.holder
            labels = [host, h.user, h.job, h.notebook]
            allocated.add_metric(labels, usage.allocated)
            idle.add_metric(labels, usage.idle)
        yield allocated
        yield idle

    def _jobs(self) -> Metric:
        jobs = GaugeMetricFamily(
            "air_jobs", "Jobs pending or running, by state and owner.", labels=JOB_LABELS
        )
        counts = Counter(
            (job.status.value, job.owner) for job in self.service.jobs(active_only=True)
        )
        for (state, user), count in sorted(counts.items()):
            jobs.add_metric([state, user], count)
        return jobs


def _holder_labels(held: list[Holder]) -> list[str]:
    """The user, air_job and notebook labels of these holders."""
    return [
        _joined(h.user for h in held),
        _joined(h.job for h in held),
        _joined(h.notebook for h in held),
    ]


def _add_memory(
    families: dict[str, GaugeMetricFamily], labels: list[str], mig: dict[str, Any]
) -> None:
    """A MIG slice's memory series (NVML reports no utilization, power or temperature of
    a slice)."""
    total, used = mig["mem_total_mib"], mig["mem_used_mib"]
    if used is not None:
        families["DCGM_FI_DEV_FB_USED"].add_metric(labels, float(used))
        if total is not None:
            families["DCGM_FI_DEV_FB_FREE"].add_metric(labels, float(total - used))


def _joined(values: Iterator[str]) -> str:
    return ",".join(sorted({v for v in values if v}))


def _user_of(pid: int) -> str:
    """The OS user a process runs as ("" once it is gone)."""
    try:
        return str(psutil.Process(pid).username())
    except (psutil.Error, OSError):
        return ""
