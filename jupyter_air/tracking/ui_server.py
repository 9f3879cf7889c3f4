"""One ``mlflow server`` child per local tracking store, started on first use.

The Jupyter server proxies ``{base_url}jupyter-air/mlflow/<key>/`` to the child of the
store registered under ``<key>`` (see ``stores``). Each child runs with
``--static-prefix`` set to that very path, so the proxy forwards URLs unchanged and
the UI's relative links (``static-files/...``, ``ajax-api/...``) resolve through it.

Only the Jupyter server can reach a child: it serves on a Unix socket in a directory
that ``mkdtemp`` creates for it (0700, under a name nobody can take first) and on no
TCP port, and it is trusted as ready only when the process answering there is in its
process group. Its environment keeps none of the server's tokens and credentials.

No child outlives the server: ``ui_child`` ends its group when the server's end of its
stdin closes, and a record under ``AIR_HOME/mlflow-ui/children`` lets the next server
end the processes of a dead one that did not end (``clean_leftovers``).

Children run in their own session and process group (``mlflow server`` itself starts
a ``uvicorn`` process), so stopping one signals the whole group. A child's exit is
noticed without reaping it: its zombie keeps the group id from being reused until the
rest of the group is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil
from traitlets import Float, TraitError, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from ..paths import air_home, private_dir, private_opener, write_private
from .stores import lookup_store
from .ui_links import UI_URL_ENV, is_local_store

STOP_GRACE = 5.0
POLL = 0.1
# What the child may see of the server's environment: what Python and MLflow need to
# run, and MLflow's own settings, less any credential (of the Hub, a remote tracking
# server or registry, a cloud).
KEPT_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONNOUSERSITE",
    }
)
CREDENTIAL = re.compile(r"TOKEN|PASS|SECRET|KEY|CRED|AUTH", re.IGNORECASE)
PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class UnknownStore(LookupError):
    """No local tracking store is registered under this key."""


class UiUnavailable(RuntimeError):
    """The MLflow UI of a store could not be started (the message says why, briefly:
    it reaches the browser; the details go to the server's log)."""


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    socket: str
    directory: Path
    log: Path
    record: Path


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

    async def socket_path(self, key: str) -> str:
        """``ensure`` for the event loop: answers at once when the child runs, else waits
        on a thread of this object's own, so that slow starts never hold the loop's
        default executor."""
        path = self.running(key)
        if path is None:
            path = await asyncio.get_running_loop().run_in_executor(self._starter, self.ensure, key)
        return path

    def running(self, key: str) -> str | None:
        """The socket of the live child for ``key``, or None; never starts one."""
        with self._lock:
            slot = self._slots.get(key)
            child = slot.child if slot is not None else None
        return child.socket if child is not None and not _exited(child.proc) else None

    def ensure(self, key: str) -> str:
        """The path of the Unix socket on which the child for ``key`` serves HTTP.

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
                    return child.socket
            if child is not None:
                self.log.warning(
                    "MLflow UI for %s exited (%s), restarting it; its log: %s",
                    key,
                    _exit_status(child.proc),
                    child.log,
                )
                _stop([child])
            tracking_uri = lookup_store(key, self._home)
            if tracking_uri is None or not is_local_store(tracking_uri):
                raise UnknownStore(f"no local tracking store is registered under {key!r}")
            child = self._start(key, tracking_uri)
            with self._lock:
                if not self._closed:
                    slot.child = child
                    return child.socket
            _stop([child])
            raise UiUnavailable("the Jupyter server is stopping")

    def stop(self) -> None:
        """Stop every child (and whatever each started); later ``ensure`` calls fail."""
        with self._lock:
            self._closed = True
            children = [slot.child for slot in self._slots.values() if slot.child is not None]
            for slot in self._slots.values():
                slot.child = None
        _stop(children)

    def clean_leftovers(self) -> None:
        """End the children that a Jupyter server now gone left running (one that did
        not notice its end), as recorded under AIR_HOME; a live server's are left be."""
        for record in sorted(self._records().glob("*.json")):
            try:
                data = json.loads(record.read_text())
                owner = _Identity(*data["owner"])
                processes = [_Identity(*p) for p in data["processes"]]
                directory = Path(data["directory"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                self.log.warning("Unreadable MLflow UI record %s, removed: %s", record, e)
                record.unlink(missing_ok=True)
                continue
            if owner.running():
                continue
            ended = [p.pid for p in processes if p.running()]
            if processes and processes[0].pid in ended:
                with suppress(ProcessLookupError):
                    os.killpg(processes[0].pid, signal.SIGKILL)  # its group, whole
            for pid in ended:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if ended:
                self.log.warning(
                    "Ended MLflow UI processes %s left by Jupyter server %d, which is gone",
                    ended,
                    owner.pid,
                )
            shutil.rmtree(directory, ignore_errors=True)
            record.unlink(missing_ok=True)

    def _home_dir(self) -> Path:
        return private_dir((self._home or air_home()) / "mlflow-ui")

    def _records(self) -> Path:
        return private_dir(self._home_dir() / "children")

    def _start(self, key: str, tracking_uri: str) -> _Child:
        home = self._home_dir()
        log = home / f"{key}.log"
        directory = Path(tempfile.mkdtemp(prefix="air-mlflow-ui-"))
        sock = str(directory / "ui.sock")
        prefix = self.prefix(key)
        # uvicorn matches routes on the decoded path (JupyterHub base URLs hold %40 and such).
        command = [
            sys.executable,
            "-m",
            "jupyter_air.tracking.ui_child",
            "--backend-store-uri",
            tracking_uri,
            "--workers",
            "1",
            "--static-prefix",
            unquote(prefix),
            # Artifacts are read where the kernels wrote them, not proxied: the artifact
            # proxy's routes ignore --static-prefix and its default root would give
            # experiments created in the UI a location the kernels cannot write to.
            "--no-serve-artifacts",
            *_artifact_root_option(tracking_uri),
            # uvicorn serves on the socket only, whatever host and port MLflow adds.
            "--uvicorn-opts",
            f"--no-access-log --uds {shlex.quote(sock)}",
        ]
        started = time.monotonic()
        out = private_opener(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,  # its end with this process: see ui_child
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=home,
                env=_child_env(os.environ),
                start_new_session=True,
            )
        finally:
            os.close(out)
        child = _Child(proc, sock, directory, log, self._records() / f"{proc.pid}.json")
        _write_record(child, [proc.pid])
        deadline = started + self.start_timeout
        while not child_answers(sock, f"{prefix}/health", group=proc.pid):
            failure = None
            if _exited(proc):
                failure = f"exited ({_exit_status(proc)})"
            elif time.monotonic() > deadline:
                failure = f"did not answer within {self.start_timeout:g} s"
            if failure is not None:
                _stop([child])
                self.log.error(
                    "MLflow UI for %s %s; the end of its log (%s):\n%s",
                    tracking_uri,
                    failure,
                    log,
                    _tail(log),
                )
                raise UiUnavailable(f"the MLflow UI {failure}; the Jupyter server's log says why")
            time.sleep(POLL)
        _write_record(child, [proc.pid, *(p.pid for p in _descendants(proc.pid))])
        self.log.info(
            "MLflow UI for %s started in %.1f s (pid %d, %s)",
            tracking_uri,
            time.monotonic() - started,
            proc.pid,
            sock,
        )
        return child


@dataclass(frozen=True)
class _Identity:
    """A process as a pid and its start time, so that a reused pid is not taken for it."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> _Identity:
        return cls(pid, psutil.Process(pid).create_time())

    def running(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            return (
                abs(process.create_time() - self.create_time) < 0.01
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False


def _write_record(child: _Child, pids: list[int]) -> None:
    """Which processes are the child's and which server owns them, for ``clean_leftovers``."""
    identities = []
    for pid in pids:
        with suppress(psutil.Error):
            identities.append(_Identity.of(pid))
    owner = _Identity.of(os.getpid())
    data = {
        "owner": [owner.pid, owner.create_time],
        "processes": [[i.pid, i.create_time] for i in identities],
        "directory": str(child.directory),
    }
    tmp = child.record.with_suffix(".tmp")
    write_private(tmp, json.dumps(data))
    os.replace(tmp, child.record)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: see ``KEPT_ENV``. MLflow's GenAI job runner (huey
    consumers) is off: the UI does not need it."""
    kept = {
        name: value
        for name, value in environ.items()
        if name in KEPT_ENV
        or name.startswith("LC_")
        or (
            name.startswith("MLFLOW_")
            and not name.startswith(("MLFLOW_TRACKING_", "MLFLOW_REGISTRY_"))
            and not CREDENTIAL.search(name)
        )
    }
    return {**kept, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def _artifact_root_option(tracking_uri: str) -> list[str]:
    """``<db dir>/mlruns`` for an absolute sqlite store: where MLflow's client puts the
    artifacts of the default ``sqlite:///mlflow.db`` store (``./mlruns``). File stores
    keep their artifacts in the store, which MLflow picks by itself."""
    if urlsplit(tracking_uri).scheme != "sqlite":
        return []
    path = Path(unquote(tracking_uri[len("sqlite:///") :]))
    return ["--default-artifact-root", str(path.parent / "mlruns")] if path.is_absolute() else []


class _ChildConnection(HTTPConnection):
    """HTTP over the child's Unix socket, to a peer in the process group ``group`` only."""

    def __init__(self, socket_path: str, group: int) -> None:
        super().__init__("localhost", timeout=2)  # MLflow accepts Host: localhost
        self.socket_path = socket_path
        self.group = group

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
            pid, _, _ = PEERCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size)
            )
            if os.getpgid(pid) != self.group:
                raise ConnectionRefusedError(f"process {pid} answers, not the MLflow UI child")
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def child_answers(socket_path: str, path: str, group: int) -> bool:
    """Whether ``GET path`` answers 200 on the Unix socket from a process of the process
    group ``group`` (the child's), not from whatever else may be listening there.
    Proxies in the environment do not apply here."""
    conn = _ChildConnection(socket_path, group)
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


def _stop(children: list[_Child]) -> None:
    """SIGTERM each child's process group, SIGKILL what is left after a grace period;
    then remove its socket's directory and its record.

    The children are reaped only at the end, so until then each group id is still ours.
    """
    for child in children:
        with suppress(ProcessLookupError):
            os.killpg(child.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and not all(_exited(c.proc) for c in children):
        time.sleep(POLL)
    for child in children:
        with suppress(ProcessLookupError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        child.proc.wait()
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        shutil.rmtree(child.directory, ignore_errors=True)
        child.record.unlink(missing_ok=True)


def _tail(log: Path, size: int = 4000) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace").strip()
    except OSError as e:
        return f"(unreadable: {e})"
