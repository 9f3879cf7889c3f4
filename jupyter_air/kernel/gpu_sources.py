"""Where ``%air_gpu`` reads its samples: the Jupyter server's sampler, else one in the kernel.

The server's sampler is shared by every panel and view of that server, so a kernel
started by a Jupyter server with jupyter_air reads it over the REST API
(``{url}jupyter-air/gpu``, docs/api.md) with the server's token from its runtime file.
Without one (VS Code, a plain ``ipython``, a server without the extension), the kernel
samples NVML itself through the same :class:`~jupyter_air.gpu.sampler.GpuSampler`,
only while a view polls.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode

from ..gpu.owners import job_of, owner_of
from ..gpu.sampler import GpuSampler
from ..tracking.ui_links import JupyterServer, current_jupyter_server

#: Seconds one request to the server may take before the view says it failed.
REQUEST_TIMEOUT = 10.0


class SourceUnavailable(Exception):
    """The server's sampler cannot be read: why, in words for the view."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The token goes to the server of the runtime file and nowhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ServerSource:
    """The Jupyter server's sampler, through ``GET/POST {url}jupyter-air/gpu``."""

    def __init__(self, server: JupyterServer, token: str) -> None:
        self.server = server
        self._token = token  # never shown: not in the URL, not in any message
        self._opener = urllib.request.build_opener(_NoRedirect)
        self.description = f"the Jupyter server's sampler (pid {server.pid})"

    def __repr__(self) -> str:
        return f"ServerSource({self.server.url!r})"

    def fetch(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        return self._call("GET", "jupyter-air/gpu", since, inventory)

    def refresh(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        return self._call("POST", "jupyter-air/gpu/sample", since, inventory)

    def release(self) -> None:
        """Nothing to stop: the server's sampler pauses itself when nobody asks."""

    def _call(
        self, method: str, path: str, since: float | None, inventory: str | None
    ) -> dict[str, Any]:
        query = {k: v for k, v in (("since", since), ("inventory", inventory)) if v is not None}
        url = _slash(self.server.url) + path + (f"?{urlencode(query)}" if query else "")
        request = urllib.request.Request(
            url,
            method=method,
            data=b"" if method == "POST" else None,
            headers={"Authorization": f"token {self._token}", "Accept": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=REQUEST_TIMEOUT) as response:
                doc = json.load(response)
        except urllib.error.HTTPError as err:
            message = f"the Jupyter server answered {err.code} {err.reason}"
            raise SourceUnavailable(message) from None
        except (OSError, ValueError) as err:
            raise SourceUnavailable(f"the Jupyter server did not answer: {err}") from None
        if not isinstance(doc, dict):
            raise SourceUnavailable("the Jupyter server's answer is not a GPU snapshot")
        return doc


class KernelSource:
    """A sampler in this kernel, started while a view polls and stopped when none does.

    Views of one kernel share it (one NVML reader, one history), counted by
    :meth:`fetch` and :meth:`release`.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _sampler: ClassVar[GpuSampler | None] = None
    _users: ClassVar[set[int]] = set()

    def __init__(self, reason: str, interval: float = 10.0) -> None:
        self.reason = reason
        self.interval = interval
        self.description = f"a sampler in this kernel ({reason})"

    def fetch(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        doc = self._acquire().snapshot(since, inventory)
        _name_owners(doc)
        return doc

    def refresh(self, since: float | None, inventory: str | None) -> dict[str, Any]:
        self._acquire().sample_now()
        return self.fetch(since, inventory)

    def release(self) -> None:
        cls = type(self)
        with cls._lock:
            cls._users.discard(id(self))
            sampler = cls._sampler if not cls._users else None
            if sampler is not None:
                cls._sampler = None
        if sampler is not None:
            sampler.stop()

    @classmethod
    def sampling(cls) -> bool:
        """Whether a sampler runs in this kernel now."""
        return cls._sampler is not None

    def _acquire(self) -> GpuSampler:
        cls = type(self)
        with cls._lock:
            cls._users.add(id(self))
            if cls._sampler is None:
                cls._sampler = GpuSampler(interval=self.interval)
                cls._sampler.start()
            return cls._sampler


def _name_owners(doc: dict[str, Any]) -> None:
    """Name the job, or this kernel, behind each GPU process (as the server does)."""
    me = {os.getpid(): {"kind": "kernel", "id": None, "name": "this kernel"}}
    for state in doc.get("state", []):
        for proc in state["processes"]:
            job_id = job_of(proc["pid"])
            if job_id is not None:
                proc["owner"] = {"kind": "job", "id": job_id, "name": None}
            else:
                proc["owner"] = owner_of(proc["pid"], me)


def find_source(
    choice: str = "auto",
    *,
    interval: float = 10.0,
    environ: Mapping[str, str] | None = None,
    runtime_dir: Path | None = None,
) -> ServerSource | KernelSource:
    """The server's sampler when it answers (``choice`` "auto" or "server"), else the kernel's.

    "server" raises :class:`SourceUnavailable` rather than falling back; "kernel" never
    asks a server.
    """
    if choice == "kernel":
        return KernelSource("as asked", interval)
    try:
        source = _server_source(environ, runtime_dir)
        source.fetch(None, None)  # answers, with the extension, and takes the token
        return source
    except SourceUnavailable as err:
        if choice == "server":
            raise
        return KernelSource(str(err), interval)


def _server_source(environ: Mapping[str, str] | None, runtime_dir: Path | None) -> ServerSource:
    env = os.environ if environ is None else environ
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = Path(jupyter_runtime_dir())
    server = current_jupyter_server(env, runtime_dir)
    if server is None:
        raise SourceUnavailable("no Jupyter server found for this kernel")
    token = _server_token(server, runtime_dir)
    if not token:
        raise SourceUnavailable("the Jupyter server's runtime file has no token")
    return ServerSource(server, token)


def _server_token(server: JupyterServer, runtime_dir: Path) -> str:
    """The token in the server's runtime file (private to the user, as the runtime dir)."""
    try:
        info = json.loads((runtime_dir / f"jpserver-{server.pid}.json").read_text())
    except (OSError, ValueError):
        return ""
    token = info.get("token") if isinstance(info, dict) else None
    return token if isinstance(token, str) else ""


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"
