"""Whether a process is still there (a zombie child counts as gone)."""

from __future__ import annotations

import os

import psutil


def alive(pid: int, started_by: float | None = None) -> bool:
    """Whether ``pid`` runs; with ``started_by`` (Unix time), only if that process had
    started by then: a process started later holds a reused pid."""
    if started_by is not None:
        try:
            if psutil.Process(pid).create_time() > started_by + 1.0:
                return False
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:
            pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
