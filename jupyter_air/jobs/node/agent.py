"""The node agent: one per node of a multi-node attempt (a Ray actor, a Slurm task).

It starts its node's ranks as the local backend does (``LocalRanks``: same sessions, same
signals, same log records) and answers the supervisor's polls with what the ranks wrote
since the last poll, whole records tagged by rank: an output channel of our own, so
Ray's log forwarding and deduplication never see rank output. It also samples the
node's GPUs for the GPU resources panel and its system metrics for the MLflow run.

Every method returns at once, so any channel can drive it: Ray's actor calls
(``backends.ray``), or our own sealed frames (``backends.slurm``).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ... import __version__
from ...gpu.owners import job_of
from ...gpu.sampler import GpuSampler
from ...job_dir import AttemptDir, JobDir
from ...paths import write_private
from ...status import Outcome
from ...tracking.sampling import Sample, SampleLoop
from ..env import free_port
from .hints import GpuSample, gpu_samples, rank_gpus
from .launch import NodeLaunch, in_this_python, node_specs
from .outcome import AttemptEnd
from .ranks import LocalRanks
from .stacks import dump_ranks

#: A node agent's folder in its node's temporary folder: ``air-node-<its pid>-<random>``.
DIR_PREFIX = "air-node-"

#: Bytes of one rank's log sent in one poll at most.
MAX_POLL_BYTES = 8 << 20

if TYPE_CHECKING:
    from ...gpu.nvml import GpuInfo, GpuReading


class NodeAgent:
    """Runs one node's ranks; every method returns at once (its caller has one thread)."""

    def __init__(self, metrics_interval: float, gpu_interval: float = 10.0) -> None:
        root = Path(tempfile.gettempdir())
        remove_dead_agents_dirs(root)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=root))
        self._ranks: LocalRanks | None = None
        self._attempt: AttemptDir | None = None
        self._outcome: AttemptEnd | None = None
        self._rank_gpus: dict[int, int] = {}
        self._offsets: dict[int, int] = {}
        self._logs: dict[int, Path] = {}
        self._gpu = GpuSampler(interval=gpu_interval, idle_timeout=365 * 86400.0)
        self._gpu.start()
        self._gpu_sent = -1
        self._metrics = _NodeMetrics(metrics_interval)

    def describe(self) -> dict[str, Any]:
        """Who this node is, and a port free here for rank 0's store, should this be
        node 0; a backend adds its own name for the node and the address its peers reach
        it at (``node_id``, ``ip``)."""
        return {"version": __version__, "hostname": socket.gethostname(), "port": free_port("")}

    @property
    def started(self) -> bool:
        """Whether it started its ranks (they may have ended since)."""
        return self._ranks is not None

    def clock(self) -> float:
        """This node's time, to compare failure times across nodes' clocks."""
        return time.time()

    def start(self, launch: NodeLaunch) -> None:
        launch = replace(launch, command=in_this_python(launch.command))
        files = JobDir(self._dir)
        self._attempt = files.attempt(launch.attempt).make()
        if launch.payload is not None:
            write_private(files.payload, launch.payload)
        cwd = launch.working_dir
        if cwd is None or not os.path.isdir(cwd):  # the notebook's directory is not here
            cwd = str(self._dir)
        specs = node_specs(launch, files, cwd=cwd, ray_actor=True)
        self._logs = {spec.rank: spec.log_path for spec in specs}
        self._rank_gpus = rank_gpus({s.rank: s.env.get("CUDA_VISIBLE_DEVICES") for s in specs})
        self._ranks = LocalRanks(specs)
        self._metrics.loop.gpus = set(self._rank_gpus.values())  # the energy of the job's GPUs
        self._metrics.loop.start()
        threading.Thread(target=self._run, name="air-node-ranks", daemon=True).start()

    def _run(self) -> None:
        assert self._ranks is not None
        try:
            outcome = self._ranks.run()
        except BaseException as err:  # the supervisor must hear of it, not wait forever
            message = f"the node agent failed: {err!r}"
            outcome = AttemptEnd(Outcome.FAILED, [], message=message, failed_at=time.time())
        self._outcome = outcome
        self._metrics.loop.prepare()  # the last sample is taken at finish(): load MLflow

    def poll(self) -> dict[str, Any]:
        """New log records by rank, the outcome once every rank has exited (after its
        last records), the first failure as soon as it is seen, a GPU snapshot when
        there is a new sample, and metrics samples."""
        outcome = self._outcome  # read first: the logs read next are then complete
        failure = self._ranks.failure if self._ranks is not None else None
        report: dict[str, Any] = {
            "logs": self._new_records(),
            "outcome": asdict(outcome) if outcome is not None else None,
            "failing": asdict(failure) if failure is not None else None,
            "metrics": self._metrics.drain(),
            "gpu": None,
            # What the supervisor's hints need from this node: its GPUs' readings taken
            # with the metrics, which GPU each rank holds, and when each last wrote.
            "hints": {
                "rank_gpus": self._rank_gpus,
                "samples": self._metrics.drain_gpu(),
                "last_output": self._ranks.last_output() if self._ranks is not None else {},
            },
        }
        if self._gpu.samples_taken != self._gpu_sent:
            self._gpu_sent = self._gpu.samples_taken
            report["gpu"] = _with_job_owners(self._gpu.snapshot())
        return report

    def _new_records(self) -> dict[int, bytes]:
        records = {}
        for rank, path in self._logs.items():
            offset = self._offsets.get(rank, 0)
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read(MAX_POLL_BYTES)  # a flood of output: the rest next time
            except FileNotFoundError:
                continue
            whole = data[: data.rfind(b"\n") + 1]  # a record being written waits for the next poll
            if not whole and len(data) == MAX_POLL_BYTES:  # one record longer than that
                whole = data  # readers of the copy take partial records as they come
            if whole:
                records[rank] = whole
                self._offsets[rank] = offset + len(whole)
        return records

    def stacks(self, node: int) -> list[dict[str, Any]]:
        """This node's running ranks' stacks (a fraction of a second: py-spy is fast)."""
        if self._ranks is None:
            return []
        return [asdict(s) for s in dump_ranks(self._ranks.running(), node)]

    def sample_now(self) -> None:
        """A metrics sample at once, sent with the next poll (a session cell ended)."""
        self._metrics.loop.sample_now()

    def stop(self, interrupt_first: bool, message: str) -> None:
        """Stop this node's ranks: as an interrupt (cancel, timeout) or at once (another
        node failed)."""
        if self._ranks is None:
            return
        if interrupt_first:
            self._ranks.cancel()
        else:
            self._ranks.abort(message)

    def result_files(self) -> dict[str, bytes]:
        """What the ranks left for the kernel: rank 0's value and any traceback."""
        if self._attempt is None:
            return {}
        return {path.name: path.read_bytes() for path in self._attempt.result_files()}

    def finish(self) -> list[Sample]:
        """Clean up (the payload holds the notebook's data), then the last metrics
        sample, so even a short job has its figures."""
        self._gpu.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
        return self._metrics.finish()


def remove_dead_agents_dirs(root: Path) -> None:
    """Remove the folders this user's node agents left in ``root`` when they died without
    finishing (a Ray actor killed, an agent SIGKILLed): each may hold a notebook's state.
    Only this user's own folders (never a link: ``lstat``), of agents no longer running."""
    for path in root.glob(f"{DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(DIR_PREFIX).split("-", 1)[0]
        try:
            info = path.lstat()
        except OSError:
            continue
        mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
        if mine and pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _with_job_owners(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Name the job behind each GPU process, read here where the processes are."""
    for state in snapshot["state"]:
        for process in state["processes"]:
            job_id = job_of(process["pid"])
            if job_id is not None:
                process["owner"] = {"kind": "job", "id": job_id, "name": None}
    return snapshot


class _NodeMetrics:
    """This node's samples (the loop every backend samples with), kept for the next poll
    with the GPU readings they took, which the supervisor's hints read."""

    def __init__(self, interval: float) -> None:
        self._samples: list[Sample] = []
        self._gpu_samples: list[dict[int, GpuSample]] = []
        self._lock = threading.Lock()
        self.loop = SampleLoop(interval, self._keep, self._on_gpu)

    def _keep(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def _on_gpu(self, readings: list[GpuReading], inventory: dict[int, GpuInfo]) -> None:
        with self._lock:
            self._gpu_samples.append(gpu_samples(readings, inventory))

    def drain_gpu(self) -> list[dict[int, GpuSample]]:
        """The GPU readings taken since the last call, for the supervisor's hints."""
        with self._lock:
            samples, self._gpu_samples = self._gpu_samples, []
        return samples

    def drain(self) -> list[Sample]:
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

    def finish(self) -> list[Sample]:
        """The samples not yet sent, with one last one."""
        self.loop.finish(last=True)
        return self.drain()
