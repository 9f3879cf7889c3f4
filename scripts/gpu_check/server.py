"""Step 3's server side: a Jupyter server with jupyter_air, as JupyterLab's, whose GPU
API the kit reads (owners of GPU processes, the panel's payload)."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``python -m jupyter_server`` on a free local port, sampling every second."""

    def __init__(self, env: dict[str, str], root: Path, log: Path) -> None:
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
                f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.jpserver_extensions=jupyter_air=True",
                "--GpuSampler.interval=1", "--GpuSampler.idle_timeout=3600",
            ],
            env=env, cwd=root, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def request(self, path: str, method: str = "GET") -> tuple[bytes, dict[str, Any]]:
        """The body and its JSON of ``{base}/path`` with the token."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{path}",
            method=method,
            data=b"" if method == "POST" else None,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            body: bytes = response.read()
        return body, json.loads(body)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Jupyter server exited ({self.proc.returncode})")
            try:
                self.request("api/status")
                return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Jupyter server did not answer in {timeout} s"
                    ) from None
                time.sleep(0.3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()
