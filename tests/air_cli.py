"""``air`` as a user runs it in a terminal: a new process, this interpreter."""

from __future__ import annotations

import subprocess
import sys


def air(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
