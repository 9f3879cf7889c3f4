"""One ``mlflow server`` child per local tracking store, started on first use.

The Jupyter server proxies ``{base_url}jupyter-air/mlflow/<key>/`` to the child of the
store registered under ``<key>`` (see ``stores``). Each child runs with
``--static-prefix`` set to that very path, so the proxy forwards URLs unchanged and
the UI's relative links (``static-files/...``, ``ajax-api/...``) resolve through it.

Children run in their own session and process group (``mlflow server`` itself starts
a ``uvicorn`` process), so stopping one signals the whole group. A child's exit is
noticed without reaping it: its zombie keeps the group id from being reused until the
rest of the group is killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from traitlets import Float, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from ..paths import air_home
from .stores import lookup_store
from .ui_links import UI_URL_ENV, is_local_store

STOP_GRACE = 5.0
POLL = 0.1


class UnknownStore(LookupError):
    """No local tracking store is registered under this key."""


class UiUnavailable(RuntimeError):
    """The MLflow UI of a store could not be started (the message says why)."""


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    origin: str
    log: Path


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    child: _Child | None = None


class MlflowUi(LoggingConfigurable):
    """Serves the MLflow UI of the local tracking stores that jobs registered."""

    url = Unicode(
        help=(
            "URL of an MLflow UI to link runs to instead of the one this server starts "
            f"for local tracking stores (then it starts none). Defaults to ${UI_URL_ENV}; "
            "kernels started by this server receive the value in that variable."
        ),
    ).tag(config=True)

    start_timeout = Float(
        60.0,
        help="Seconds to wait for a started `mlflow server` to answer before giving up.",
    ).tag(config=True)

    @default("url")
    def _url_from_env(self) -> str:
        return os.environ.get(UI_URL_ENV, "")

    @validate("start_timeout")
    def _positive(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not value > 0:
            raise TraitError(f"start_timeout must be > 0 seconds, got {value}")
        return value

    def __init__(self, base_url: str = "/", home: Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self._home = home
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self._closed = False
        self._starter = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mlflow-ui")

    def share_with_kernels(self) -> None:
        """Put the override in this process's environment, which kernels inherit."""
        if self.url:
            os.environ[UI_URL_ENV] = self.url

    def prefix(self, key: str) -> str:
        """The URL path under which the UI of ``key`` is served (percent-encoded)."""
        return f"{self.base_url}jupyter-air/mlflow/{key}"

    async def origin(self, key: str) -> str:
        """``ensure`` for the event loop: answers at once when the child runs, else waits
        on a thread of this object's own, so that slow starts never hold the loop's
        default executor."""
        origin = self.running(key)
        if origin is None:
            origin = await asyncio.get_running_loop().run_in_executor(
                self._starter, self.ensure, key
            )
        return origin

    def running(self, key: str) -> str | None:
        """The origin of the live child for ``key``, or None; never starts one."""
        with self._lock:
            slot = self._slots.get(key)
            child = slot.child if slot is not None else None
        return child.origin if child is not None and not _exited(child.proc) else None

    def ensure(self, key: str) -> str:
        """The origin (``http://127.0.0.1:<port>``) of the running child for ``key``.

        Starts the child on first use and again if it died; blocks until it answers.
        Concurrent callers for one key wait for one start. Raises ``UnknownStore`` or
        ``UiUnavailable``.
        """
        with self._lock:
            if self._closed:
                raise UiUnavailable("the Jupyter server is stopping")
            slot = self._slots.setdefault(key, _Slot())
        with slot.lock:
            with self._lock:
                child, slot.child = slot.child, None
                if child is not None and not _exited(child.proc):
                    slot.child = child
                    return child.origin
            if child is not None:
                self.log.warning(
                    "MLflow UI for %s exited (%s), restarting it; its log: %s",
                    key,
                    _exit_status(child.proc),
                    child.log,
                )
                _stop([child.proc])
            tracking_uri = lookup_store(key, self._home)
            if tracking_uri is None or not is_local_store(tracking_uri):
                raise UnknownStore(f"no local tracking store is registered under {key!r}")
            child = self._start(key, tracking_uri)
            with self._lock:
                if not self._closed:
                    slot.child = child
                    return child.origin
            _stop([child.proc])
            raise UiUnavailable("the Jupyter server is stopping")

    def stop(self) -> None:
        """Stop every child (and whatever each started); later ``ensure`` calls fail."""
        with self._lock:
            self._closed = True
            children = [slot.child for slot in self._slots.values() if slot.child is not None]
            for slot in self._slots.values():
                slot.child = None
        _stop([child.proc for child in children])

    def _start(self, key: str, tracking_uri: str) -> _Child:
        home = (self._home or air_home()) / "mlflow-ui"
        home.mkdir(parents=True, exist_ok=True)
        log = home / f"{key}.log"
        port = _free_port()
        prefix = self.prefix(key)
        # uvicorn matches routes on the decoded path (JupyterHub base URLs hold %40 and such).
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            tracking_uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--static-prefix",
            unquote(prefix),
            # Artifacts are read where the kernels wrote them, not proxied: the artifact
            # proxy's routes ignore --static-prefix and its default root would give
            # experiments created in the UI a location the kernels cannot write to.
            "--no-serve-artifacts",
            *_artifact_root_option(tracking_uri),
            "--uvicorn-opts",
            "--no-access-log",
        ]
        # The job runner (huey consumers) only serves MLflow's GenAI jobs: not needed here.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        started = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=home,
                env=env,
                start_new_session=True,
            )
        origin = f"http://127.0.0.1:{port}"
        deadline = started + self.start_timeout
        while not _answers(port, f"{prefix}/health"):
            failure = None
            if _exited(proc):
                failure = f"exited ({_exit_status(proc)})"
            elif time.monotonic() > deadline:
                failure = f"did not answer within {self.start_timeout:g} s"
            if failure is not None:
                _stop([proc])
                raise UiUnavailable(
                    f"mlflow server for {tracking_uri} {failure}; the end of its log "
                    f"({log}):\n{_tail(log)}"
                )
            time.sleep(POLL)
        self.log.info(
            "MLflow UI for %s started in %.1f s (pid %d, %s)",
            tracking_uri,
            time.monotonic() - started,
            proc.pid,
            origin,
        )
        return _Child(proc=proc, origin=origin, log=log)


def _artifact_root_option(tracking_uri: str) -> list[str]:
    """``<db dir>/mlruns`` for an absolute sqlite store: where MLflow's client puts the
    artifacts of the default ``sqlite:///mlflow.db`` store (``./mlruns``). File stores
    keep their artifacts in the store, which MLflow picks by itself."""
    if urlsplit(tracking_uri).scheme != "sqlite":
        return []
    path = Path(unquote(tracking_uri[len("sqlite:///") :]))
    return ["--default-artifact-root", str(path.parent / "mlruns")] if path.is_absolute() else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int, path: str) -> bool:
    """Whether ``GET path`` answers 200 (proxies in the environment do not apply here)."""
    conn = HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, HTTPException):
        return False
    finally:
        conn.close()


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child exited, leaving it unreaped (``WNOWAIT``): see the module doc."""
    return _exit_status(proc) is not None


def _exit_status(proc: subprocess.Popen[bytes]) -> str | None:
    """How the child ended ("exit code 1", "signal 9"), or None while it runs."""
    if proc.returncode is not None:
        return f"exit code {proc.returncode}"
    try:
        result = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "reaped elsewhere"
    if result is None:
        return None
    kind = "exit code" if result.si_code == os.CLD_EXITED else "signal"
    return f"{kind} {result.si_status}"


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each child's process group, SIGKILL what is left after a grace period.

    The children are reaped only at the end, so until then each group id is still ours.
    """
    for proc in procs:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and not all(_exited(p) for p in procs):
        time.sleep(POLL)
    for proc in procs:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(log: Path, size: int = 4000) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace").strip()
    except OSError as e:
        return f"(unreadable: {e})"
