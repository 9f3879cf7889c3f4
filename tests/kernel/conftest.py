"""A real IPython kernel (through jupyter_client) with jupyter_air loaded, on the fake
NVML driver, with its own job store and MLflow store."""

from __future__ import annotations

import os
import queue
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from jupyter_air.jobs.store import JobStore
from tests.fake_nvml import FakeGpu, Scenario, env_for
from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.leftovers import end_processes_in
from tests.mlflow_store import fresh_store
from tests.waits import job_processes, until


@dataclass
class Execution:
    """What one cell produced."""

    stdout: str = ""
    stderr: str = ""
    displays: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    #: Every plain text a display showed, updates included (a live status line's words).
    shown: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        shown = [d.get("text/plain", "") for d in self.displays]
        return "\n".join([self.stdout, self.stderr, *shown])

    def value(self) -> str:
        assert self.error is None, self.traceback
        assert self.result is not None, "the cell has no result"
        return str(self.result["text/plain"])

    @property
    def traceback(self) -> str:
        return "\n".join(self.error["traceback"]) if self.error else ""


class Kernel:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self._read: list[dict[str, Any]] = []  # iopub messages read ahead by wait_shown

    def start(self, code: str) -> str:
        return str(self.client.execute(code))

    def wait_shown(self, msg_id: str, text: str, timeout: float = 120) -> None:
        """Until a display of the running cell shows ``text`` (its live status line);
        what was read is kept for ``collect``."""

        def shown() -> bool:
            try:
                msg = self.client.get_iopub_msg(timeout=1)
            except queue.Empty:
                return False
            self._read.append(msg)
            data = msg["content"].get("data") or {}
            return bool(
                msg["parent_header"].get("msg_id") == msg_id and text in data.get("text/plain", "")
            )

        until(shown, f"a display showing {text!r}", timeout, step=0)

    def _next(self, timeout: float) -> dict[str, Any]:
        if self._read:
            return self._read.pop(0)
        return dict(self.client.get_iopub_msg(timeout=timeout))

    def collect(self, msg_id: str, timeout: float = 240) -> Execution:
        out = Execution()
        started = time.monotonic()
        displays: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        while True:
            msg = self._next(timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind in ("display_data", "update_display_data"):
                key = content.get("transient", {}).get("display_id") or f"anon-{len(order)}"
                if key not in displays:
                    order.append(key)
                displays[key] = content["data"]
                out.shown.append(str(content["data"].get("text/plain", "")))
            elif kind == "execute_result":
                out.result = content["data"]
            elif kind == "error":
                out.error = content
            elif kind == "status" and content["execution_state"] == "idle":
                break
        out.displays = [displays[k] for k in order]
        out.seconds = time.monotonic() - started
        return out

    def run(self, code: str, timeout: float = 240) -> Execution:
        return self.collect(self.start(code), timeout)

    def interrupt(self) -> None:
        self.manager.interrupt_kernel()

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

    def kill(self) -> None:
        """SIGKILL to the kernel's process, as the OOM killer sends: nothing in it runs,
        where ``shutdown`` interrupts it first (a cell's ``KeyboardInterrupt``)."""
        provisioner = self.manager.provisioner
        assert isinstance(provisioner, LocalProvisioner), provisioner
        assert provisioner.pid is not None, "no kernel process"
        os.kill(provisioner.pid, signal.SIGKILL)
        until(lambda: not self.manager.is_alive(), "the killed kernel gone")
        self.shutdown()


@pytest.fixture(scope="module")
def air_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("air")
    yield home
    end_processes_in(home)  # its tail process, courier, a job's supervisor: not past the module


@pytest.fixture(scope="module")
def kernel_env(air_home: Path, fake_nvml_dir: Path, mlflow_template: Path) -> dict[str, str]:
    """One fake GPU; system metrics every second so short jobs record some. The store is
    a migrated copy: a test's own client never migrates it while the kernel does."""
    scenario = Scenario(gpus=[FakeGpu(util=[20, 40, 60], temp=[45, 47, 49])])
    scenario_path = scenario.write(air_home / "nvml-scenario.txt")
    env = {
        **os.environ,
        **env_for(fake_nvml_dir, scenario_path),
        "AIR_HOME": str(air_home),
        "MLFLOW_TRACKING_URI": fresh_store(mlflow_template, air_home),
        "AIR_SYSTEM_METRICS_INTERVAL": "1",
        "JPY_SESSION_NAME": str(air_home / "notebooks" / "train.ipynb"),
        "CUDA_VISIBLE_DEVICES": "",  # the CPU build of torch: ranks use gloo
    }
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str], air_home: Path) -> Iterator[Kernel]:
    notebooks = air_home / "notebooks"
    notebooks.mkdir(exist_ok=True)
    k = Kernel(kernel_env, cwd=notebooks)
    loaded = k.run("%load_ext jupyter_air")
    assert loaded.error is None, loaded.traceback
    yield k
    k.shutdown()


def running_job(air_home: Path, ranks: int, timeout: float = 120) -> str:
    """The id of the one running job, once ``ranks`` of its processes are up."""
    store = JobStore(air_home)

    def up() -> str | None:
        jobs = [j for j in store.jobs() if j.status == "RUNNING"]
        return jobs[0].id if jobs and len(job_processes(jobs[0].id)) >= ranks else None

    return until(up, f"{ranks} ranks of a running job started", timeout)


def execute_notebook(
    path: Path, env: dict[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    """Run a notebook top to bottom in a fresh kernel with ``env``, as a user would;
    its outputs, in order. The file itself is not changed."""
    import nbformat
    from nbclient import NotebookClient

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return [o for cell in nb.cells for o in cell.get("outputs", [])]
