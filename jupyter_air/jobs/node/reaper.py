"""A watchdog that takes a job's processes down when their owner goes, however it goes.

Ranks die with their supervisor (``PR_SET_PDEATHSIG``), but what they start does not:
the child of ``sh -c``, a worker that called ``setsid``. So the owner of some ranks (a
supervisor, a Ray node agent) starts this small process and holds a pipe to it. When
the pipe closes, because the owner ended normally, was cancelled or was killed outright,
the watchdog kills the process groups it was told of, then every process of this user
whose environment names the job, and removes the files it was asked to remove.

``python -m jupyter_air.jobs.node.reaper KEY=VALUE ...`` (the environment to match); on its
stdin, lines ``group PGID``, ``ungroup PGID``, ``remove PATH``.

A process that both leaves its rank's group and clears its environment escapes; nothing
short of a cgroup (which needs privileges these machines do not give) would catch it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

import psutil

#: Seconds the watchdog keeps sweeping while processes of the job keep appearing.
PATIENCE = 5.0


def matching(match: Mapping[str, str]) -> list[psutil.Process]:
    """Live processes (other than this one) whose environment holds every pair of
    ``match``; only this user's processes can be read, so only they are found."""
    if not match:
        return []  # an empty match would be every process
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
            if all(env.get(k) == v for k, v in match.items()) and proc.status() != "zombie":
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def sweep(match: Mapping[str, str], groups: Iterable[int] = (), patience: float = PATIENCE) -> int:
    """SIGKILL the process groups, then every process matching ``match``, again while
    new ones appear (a parent may fork while it dies); the number of processes killed."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + patience
    killed = 0
    while (found := matching(match)) and time.monotonic() < deadline:
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        killed += len(found)
        psutil.wait_procs(found, timeout=0.5)
    return killed


class Reaper:
    """The owner's end of the watchdog: tell it about groups and files, then close."""

    def __init__(self, match: Mapping[str, str]) -> None:
        env = {k: v for k, v in os.environ.items() if k not in match}
        args = [f"{k}={v}" for k, v in match.items()]
        # Its own session: a signal to the owner's process group does not reach it.
        self._process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_air.jobs.node.reaper", *args],
            stdin=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        assert self._process.stdin is not None
        self._pipe: IO[bytes] = self._process.stdin

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # the watchdog is gone: nothing to do
            self._pipe.write(f"{line}\n".encode())
            self._pipe.flush()

    def track(self, pgid: int) -> None:
        """A process group to kill if the owner goes before it says ``untrack``."""
        self._say(f"group {pgid}")

    def untrack(self, pgid: int) -> None:
        """The group was killed already: its id may be reused by someone else's group."""
        self._say(f"ungroup {pgid}")

    def remove(self, path: Path) -> None:
        self._say(f"remove {path}")

    def close(self, wait: float | None = None) -> None:
        """Let it sweep now; with ``wait``, for at most that many seconds."""
        with contextlib.suppress(OSError):
            self._pipe.close()
        if wait is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(wait)


def main(argv: list[str]) -> int:
    match = dict(arg.split("=", 1) for arg in argv)
    groups: set[int] = set()
    files: list[Path] = []
    for raw in sys.stdin.buffer:  # until the owner closes the pipe or dies
        verb, _, arg = raw.decode(errors="replace").rstrip("\n").partition(" ")
        if verb == "group":
            groups.add(int(arg))
        elif verb == "ungroup":
            groups.discard(int(arg))
        elif verb == "remove":
            files.append(Path(arg))
    killed = sweep(match, groups)
    if killed:
        print(f"jupyter_air reaper: killed {killed} process(es) left by {match}", file=sys.stderr)
    for path in files:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner
    sys.exit(main(sys.argv[1:]))
