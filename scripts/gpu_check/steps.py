"""The kit's steps in order; each records its checks and never stops the others.

1 install (done by scripts/gpu-check; its log is reported), 2b the hardware queries
(throttle reasons, ECC, retired pages, remapped rows, an XID event set) as the driver
answers them, 2 NVML vs nvidia-smi while a job's CUDA process holds memory and
computes, 3 the job's cell through a real kernel, the refused oversubscription, the
MLflow run's GPU metrics and the GPU API's owner of the process, 4 the sampler's cost
and the panel's payload, and the gpu pytest tests.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_air.gpu.nvml import Nvml

from . import machine
from .compare import compare
from .gpu_tests import run_gpu_tests
from .hardware import STEP as HARDWARE
from .hardware import check_hardware
from .kernel import LOAD_CELL, TOO_MANY_RANKS_CELL, Execution, Kernel
from .report import Report
from .server import Server
from .timing import sampler_vs_bare

#: The report's step names.
INSTALL, SMI, CELL = "1 install", "2 nvml-vs-nvidia-smi", "3 job cell"
API, TIMING = "3 gpu api", "4 timing"
#: The checks that need the job's rank up, by step.
JOB_CHECKS = (
    ("nccl_all_reduce", CELL),
    ("job_process_seen_by_nvml", SMI),
    ("job_process_listed_by_nvidia_smi", SMI),
    ("cuda_memory_held", SMI),
    ("gpu_api_lists_job_process", API),
    ("one_rank_cell", CELL),
    ("mlflow_system_gpu_metrics", CELL),
)
#: MLflow's names of the GPU metrics that must be non-zero while the job computes.
GPU_METRICS = (
    "utilization_percentage",
    "memory_usage_megabytes",
    "power_usage_watts",
    "temperature_celsius",
)


def child_env(extra: dict[str, Any]) -> dict[str, str]:
    """This process's environment for a kernel, server or test run: no PYTHONPATH (they
    import the installed jupyter_air), no MLflow run or experiment of the caller."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        env.pop(name, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Run:
    def __init__(self, args: argparse.Namespace, report: Report, root: Path) -> None:
        self.args, self.report, self.root = args, report, root
        self.work: Path = args.workdir
        self.air_home = self.work / "air"
        self.notebooks = self.work / "notebooks"
        self.notebooks.mkdir(parents=True)
        self.nvml = Nvml(retry_interval=0)
        self.ready: dict[str, Any] | None = None
        self.env = child_env(
            {
                "AIR_HOME": self.air_home,
                "MLFLOW_TRACKING_URI": f"sqlite:///{self.air_home}/mlflow.db",
                "AIR_SYSTEM_METRICS_INTERVAL": 1,  # several samples in a run of seconds
                "JPY_SESSION_NAME": self.notebooks / "gpu-check.ipynb",
                "JUPYTER_CONFIG_DIR": self.work / "jupyter" / "config",
                "JUPYTER_DATA_DIR": self.work / "jupyter" / "data",
                "JUPYTER_RUNTIME_DIR": self.work / "jupyter" / "runtime",
            }
        )

    def step(self, name: str, step: str, fn: Callable[[], None]) -> None:
        """Run ``fn``; an exception fails check ``name`` with its traceback's end. The
        seconds it took go into the report's timings."""
        started = time.monotonic()
        try:
            fn()
        except Exception as err:
            tail = traceback.format_exc().strip().splitlines()[-3:]
            self.report.failed(name, step, f"{type(err).__name__}: {err} | {' / '.join(tail)}")
        finally:
            self.report.timings[f"seconds {name}"] = round(time.monotonic() - started, 2)

    # -- the run ---------------------------------------------------------------------

    def all(self) -> None:
        self.install()
        self.report.machine.update(machine.describe(self.nvml))
        gpus = self.nvml.inventory()
        if not gpus:
            self.report.failed("nvml_sees_a_gpu", SMI, self.nvml.status().reason or "no GPU")
            return
        self.step("hardware", HARDWARE, lambda: check_hardware(self.nvml, self.report))
        server = Server(self.env, self.notebooks, self.work / "server.log")
        kernel: Kernel | None = None
        try:
            kernel = self.start_kernel()
            if kernel is not None:
                self.step("load_ext", CELL, lambda: self.load_extension(kernel))
                self.step("too_many_ranks_refused", CELL, lambda: self.refused(kernel, len(gpus)))
            self.job_cell(kernel, server)
        finally:
            if kernel is not None:
                kernel.shutdown()
            server.stop()
        if self.args.no_gpu_tests:
            self.report.skipped("pytest -m gpu", "gpu pytest", "--no-gpu-tests")
        else:
            self.step("pytest -m gpu", "gpu pytest", self.gpu_tests)

    def install(self) -> None:
        log = self.args.install_log
        if log is None:
            self.report.skipped(
                "install_from_wheelhouse", INSTALL, "--no-install: the kit ran in this interpreter"
            )
            return
        doc = json.loads(Path(log).read_text())
        self.report.machine["installed_from"] = doc.get("wheelhouse")
        self.report.expect(
            "install_from_wheelhouse", INSTALL, doc.get("installed", False), doc.get("detail", "")
        )
        problems = doc.get("pip_check", "").strip()
        self.report.expect(
            "pip_check", INSTALL, not problems,
            problems or "every requirement met by the wheelhouse or the machine's packages",
        )  # fmt: skip

    def start_kernel(self) -> Kernel | None:
        started = time.monotonic()
        try:
            kernel = Kernel(self.env, self.notebooks)
        except Exception as err:
            self.report.failed("kernel_start", CELL, f"{type(err).__name__}: {err}")
            return None
        self.report.timings["seconds kernel start"] = round(time.monotonic() - started, 2)
        return kernel

    def load_extension(self, kernel: Kernel) -> None:
        out = kernel.run("%load_ext jupyter_air", timeout=120)
        self.report.expect(
            "load_ext", CELL, out.finished and out.error is None, str(out.error or "")
        )

    def refused(self, kernel: Kernel, n_gpus: int) -> None:
        from jupyter_air.jobs.store import JobStore

        n, store = n_gpus + 1, JobStore(self.air_home)
        jobs_before = len(store.jobs())
        out = kernel.run(TOO_MANY_RANKS_CELL.format(n=n), timeout=120)
        started = len(store.jobs()) - jobs_before
        self.report.expect(
            "too_many_ranks_refused", CELL,
            "UsageError: " in out.text and "--oversubscribe" in out.text and not started,
            f"-n {n} on {n_gpus} GPU(s), {started} job(s) started: {out.text.strip()[:300]}",
        )  # fmt: skip

    # -- the job -------------------------------------------------------------------------

    def job_cell(self, kernel: Kernel | None, server: Server) -> None:
        """The job's cell runs while steps 2 to 4 read the GPU; without it (or without a
        kernel) they still run, and what needs the job is skipped with the reason."""
        cell = LOAD_CELL.format(
            dir=self.work, hold_mib=self.args.hold_mib, side=self.args.side, limit=300
        )
        msg_id, started, out = kernel.start(cell) if kernel else "", time.monotonic(), Execution()
        ready = None
        if kernel is not None:
            ready = self.ready = self.wait_ready(kernel, msg_id, out, timeout=240)
            self.report.timings["seconds cell to rank up"] = round(time.monotonic() - started, 2)
        if ready is None:
            why = f"{out.error} {out.text[-500:]}" if kernel else "no kernel (kernel_start)"
            self.report.failed("job_started", CELL, f"the rank never said it was up: {why}")
            for name, step in JOB_CHECKS:
                self.report.skipped(name, step, "the job did not start (job_started)")
        else:
            self.job_started(ready)
        try:
            self.step("nvml_vs_smi", SMI, self.compare_with_smi)
            self.step("gpu_api", API, lambda: self.gpu_api(server, ready))
            self.step("sampler_timing", TIMING, self.timing)
        finally:
            (self.work / "stop").touch()
        if kernel is not None and ready is not None:
            started = time.monotonic()
            kernel.collect(msg_id, timeout=180, into=out)
            self.report.timings["seconds stop to cell end"] = round(time.monotonic() - started, 2)
            self.check_cell(out)
            self.step("mlflow_system_gpu_metrics", CELL, lambda: self.mlflow_metrics(ready))

    def job_started(self, ready: dict[str, Any]) -> None:
        self.report.passed("job_started", CELL, f"job {ready['job']}, rank pid {ready['pid']}")
        self.report.machine.update(
            {
                "torch": ready["torch"], "torch_cuda": ready["torch_cuda"],
                "torch_device": ready["device"], "capability": ready["capability"],
                "rank_backend": ready["backend"],
                "rank_CUDA_VISIBLE_DEVICES": ready["cuda_visible_devices"],
            }
        )  # fmt: skip
        self.gpu_only_checks(ready)
        self.step("job_process_seen_by_nvml", SMI, lambda: self.wait_listed(ready["pid"]))

    def wait_ready(
        self, kernel: Kernel, msg_id: str, out: Execution, timeout: float
    ) -> dict[str, Any] | None:
        """The rank's ready file, or None once the cell ended without one or in time."""
        path, deadline = self.work / "ready.json", time.monotonic() + timeout
        while time.monotonic() < deadline and not out.finished:
            if path.is_file():
                doc: dict[str, Any] = json.loads(path.read_text())
                return doc
            kernel.collect(msg_id, timeout=0.2, into=out)
        return None

    def gpu_only_checks(self, ready: dict[str, Any]) -> None:
        if not ready["cuda"]:
            why = (
                f"torch {ready['torch']} in the rank has no CUDA (the cell ran on gloo, on the CPU)"
            )
            self.report.skipped("nccl_all_reduce", CELL, why)
            self.report.skipped("cuda_memory_held", SMI, why)
            return
        self.report.expect(
            "nccl_all_reduce", CELL,
            ready["backend"] == "nccl" and ready["all_reduce"] == [1.0] * 4,
            f"backend {ready['backend']}, all_reduce {ready['all_reduce']} on {ready['device']}",
        )  # fmt: skip

    def wait_listed(self, pid: int, timeout: float = 20) -> None:
        """NVML lists the rank once its CUDA context (or the fake's scenario) has it."""
        deadline = time.monotonic() + timeout
        while True:
            listed = {p.pid for r in self.nvml.read_all() for p in r.processes}
            if pid in listed:
                self.report.passed("job_process_seen_by_nvml", SMI, f"pid {pid}")
                return
            if time.monotonic() > deadline:
                self.report.failed(
                    "job_process_seen_by_nvml", SMI,
                    f"pid {pid} not among NVML's processes {sorted(listed)} after {timeout} s "
                    "(another PID namespace?)",
                )  # fmt: skip
                return
            time.sleep(0.2)

    def compare_with_smi(self) -> None:
        apps = compare(self.nvml, self.report, rounds=self.args.rounds, pause=0.5)
        if self.ready is None:
            return
        pid, held = self.ready["pid"], self.ready["held_mib"]
        mine = [a for a in apps if a.pid == pid]
        self.report.expect(
            "job_process_listed_by_nvidia_smi", SMI, bool(mine),
            f"pid {pid} in {[(a.pid, a.process_name, a.used_mib) for a in apps]}",
        )  # fmt: skip
        if self.ready["cuda"]:
            used = max((a.used_mib or 0 for a in mine), default=0)
            self.report.expect(
                "cuda_memory_held", SMI, used >= held,
                f"nvidia-smi: pid {pid} uses {used} MiB, the job holds {held} MiB of tensors",
            )  # fmt: skip

    def gpu_api(self, server: Server, ready: dict[str, Any] | None) -> None:
        server.wait_ready(timeout=120)
        body, doc = server.request("jupyter-air/gpu/sample", method="POST")
        if ready is not None:
            self.gpu_api_owner(doc, ready)
        deadline = time.monotonic() + 30  # the 1 s sampler adds a second row
        while len(doc["samples"]["t"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            body, doc = server.request("jupyter-air/gpu")
        t = doc["samples"]["t"]
        increment, _ = server.request(f"jupyter-air/gpu?since={t[-2]}&inventory={doc['inventory']}")
        self.report.timings.update(
            {
                "api_full_bytes": len(body), "api_full_rows": len(t),
                "api_increment_bytes_one_sample": len(increment),
            }
        )  # fmt: skip
        self.report.expect("gpu_api_payload", API, len(t) >= 2, f"{len(t)} rows, {len(body)} bytes")

    def gpu_api_owner(self, doc: dict[str, Any], ready: dict[str, Any]) -> None:
        processes = [p for state in doc["state"] for p in state["processes"]]
        mine = [p for p in processes if p["pid"] == ready["pid"]]
        owner = mine[0]["owner"] if mine else None
        self.report.expect(
            "gpu_api_lists_job_process", API,
            owner is not None and owner.get("kind") == "job" and owner.get("id") == ready["job"],
            f"pid {ready['pid']} -> owner {owner}; "
            f"all: {[(p['pid'], p['owner']) for p in processes]}",
        )  # fmt: skip

    def timing(self) -> None:
        figures = sampler_vs_bare(self.nvml, self.args.timing_rounds, self.args.timing_samples)
        self.report.timings.update(figures)
        self.report.passed(
            "sampler_timing", TIMING,
            f"{figures['sampler_us_per_sample']} µs per sample; bare pynvml "
            f"{figures['bare_pynvml_us_per_sample']} µs, with psutil's host figures "
            f"{figures['bare_pynvml_plus_psutil_us_per_sample']} µs "
            f"({figures['sampler_vs_bare_pynvml_plus_psutil']}x that)",
        )  # fmt: skip

    def check_cell(self, out: Execution) -> None:
        self.report.expect(
            "one_rank_cell", CELL,
            out.finished and out.error is None and "'stopped': True" in (out.result or ""),
            f"result {out.result}; error {out.error}; output {out.text[-300:]!r}",
        )  # fmt: skip

    def mlflow_metrics(self, ready: dict[str, Any]) -> None:
        from mlflow import MlflowClient

        from jupyter_air.jobs.store import JobStore
        from jupyter_air.procs import alive

        store, deadline = JobStore(self.air_home), time.monotonic() + 120
        while not (job := store.get(ready["job"])).done and time.monotonic() < deadline:
            time.sleep(0.5)
        self.report.expect(
            "job_succeeded", CELL, job.status == "SUCCEEDED", f"job {job.id}: {job.status}"
        )
        # The supervisor publishes the run's system metrics as it ends, after the status.
        while job.supervisor_pid and alive(job.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        client = MlflowClient(self.env["MLFLOW_TRACKING_URI"])
        index = int((ready["cuda_visible_devices"] or "0").split(",")[0])
        peaks = {}
        for name in GPU_METRICS:
            key = f"system/gpu_{index}_{name}"
            peaks[key] = max(
                (m.value for m in client.get_metric_history(ready["run_id"], key)), default=None
            )
        zero = [k for k, v in peaks.items() if not v]
        self.report.expect(
            "mlflow_system_gpu_metrics", CELL, not zero,
            f"peaks {peaks}" + (f"; zero or missing: {zero}" if zero else ""),
        )  # fmt: skip

    def gpu_tests(self) -> None:
        run_gpu_tests(self.root, self.work, child_env({}), self.report)
