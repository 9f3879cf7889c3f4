"""The Python stacks of a job's ranks: where a stuck or slow job is.

Taken with py-spy (``py-spy dump --pid P --native``): it reads a process's memory from
outside, so it works on any rank, a cell's or a ``python train.py`` that knows nothing
of us, even one stuck in C (a collective, a dataloader's queue) where Python code (a
``faulthandler`` signal handler) would never run; ``--native`` adds the C frames. The
node that runs the ranks takes them (the supervisor, a Ray node agent), since only a
process's parent may read it where ptrace is restricted (Yama's ``ptrace_scope`` 1).

Each rank's flight recorder is read at the same time (``flight_recorder``), and the
set says which collective the ranks wait in and who never came to it (``jobs.hangs``).

A set is saved with the attempt: ``attempt_K/stacks/<name>/rank_R.txt``, each rank's
recorder (``rank_R.fr.json``) and its ``stacks.json`` (why, when, each rank's files or
errors, the hang's report). ``air stacks`` and the server ask the job's supervisor for
a new set (a request file, then SIGUSR2) and wait for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ...job_dir import STACKS, STACKS_INDEX, read_json, recorder_file, replace_json, stacks_file
from ...paths import private_dir, write_private
from ..hangs import NAMED, HangReport, analyse
from . import flight_recorder

#: Seconds one rank's dump may take (py-spy takes well under one).
DUMP_TIMEOUT = 10.0
#: Seconds ``request`` waits for the supervisor's answer.
ANSWER_WAIT = 30.0


class StacksError(RuntimeError):
    """No stacks: the job runs no rank here, its supervisor is gone, py-spy failed."""


@dataclass(frozen=True)
class RankStacks:
    rank: int
    node: int
    pid: int
    text: str | None
    error: str | None = None
    #: Its flight recorder (``flight_recorder.slim``'s), or why there is none.
    recorder: dict[str, Any] | None = None
    recorder_error: str | None = None


def py_spy() -> str:
    """py-spy beside this interpreter (a dependency of ours), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise StacksError("py-spy is not installed (pip install py-spy)")
    return found


def dump(pid: int) -> str:
    """Every thread's stack of the rank ``pid`` and of its Python subprocesses (dataloader
    workers), their C frames too where they can be read. A rank that is not Python
    itself (``bash -c``, a launcher) is dumped from its first Python descendant."""
    tool = py_spy()
    last = "no Python process in it"
    for target in _candidates(pid):
        for native in (True, False):  # a process without unwind info: Python frames only
            argv = [tool, "dump", "--pid", str(target), "--subprocesses"]
            try:
                done = subprocess.run(
                    argv + (["--native"] if native else []),
                    capture_output=True,
                    text=True,
                    timeout=DUMP_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                last = f"py-spy took more than {DUMP_TIMEOUT:g} s"
                continue
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout
            said = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            last = said[0].removeprefix("Error: ") if said else f"exit code {done.returncode}"
            if "python version" in last.lower():
                break  # not a Python process: its children may be
    raise StacksError(f"py-spy could not read process {pid}: {last}")


def _candidates(pid: int) -> list[int]:
    """The rank's process, then its descendants, nearest first."""
    import psutil

    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


def dump_ranks(pids: Mapping[int, int], node: int = 0) -> list[RankStacks]:
    """The stacks of ``{rank: pid}``, all at once (a set is one moment, not N of them),
    with their flight recorders, asked for meanwhile."""

    def one(rank: int, pid: int) -> RankStacks:
        try:
            return RankStacks(rank, node, pid, dump(pid))
        except StacksError as err:
            return RankStacks(rank, node, pid, None, str(err))

    with ThreadPoolExecutor(max_workers=max(1, min(len(pids), 16)) + 1) as pool:
        asked = pool.submit(flight_recorder.gather, pids)
        taken = list(pool.map(lambda item: one(*item), sorted(pids.items())))
        recorded = asked.result()
    return [
        replace(s, recorder=found.trace, recorder_error=found.error)
        if (found := recorded.get(s.rank)) is not None
        else s
        for s in taken
    ]


def save(attempt_dir: Path, name: str, reason: str, stacks: list[RankStacks]) -> Path:
    """A set of stacks with the attempt, and the hang its recorders tell; its directory."""
    where = private_dir(private_dir(attempt_dir / STACKS) / name)
    ranks: dict[str, Any] = {}
    for s in stacks:
        entry: dict[str, Any] = {"node": s.node, "pid": s.pid}
        if s.text is not None:
            entry["file"] = stacks_file(s.rank)
            write_private(where / entry["file"], s.text)
        else:
            entry["error"] = s.error
        if s.recorder is not None:
            entry["recorder"] = recorder_file(s.rank)
            replace_json(where / entry["recorder"], s.recorder)
        else:
            entry["recorder_error"] = s.recorder_error
        ranks[str(s.rank)] = entry
    now = time.time()
    index: dict[str, Any] = {"reason": reason, "time": now, "ranks": ranks}
    hang = hang_of(stacks, now)
    if hang is not None:
        index["hang"] = hang.to_json()
    replace_json(where / STACKS_INDEX, index)
    return where


def hang_of(stacks: list[RankStacks], now: float) -> HangReport | None:
    """What the ranks' recorders say of where the job waits (None: no recorder is on)."""
    return analyse(
        {s.rank: s.recorder for s in stacks},
        {s.rank: s.recorder_error for s in stacks},
        {s.rank: s.text for s in stacks},
        int(now * 1e9),
    )


@dataclass(frozen=True)
class StackSet:
    name: str
    reason: str
    time: float
    stacks: list[RankStacks]
    #: Where the ranks wait, from their recorders (None: no recorder was on).
    hang: HangReport | None = None

    def text(self, rank: int | None = None) -> str:
        """The set as a terminal shows it: the hang named, then one rank after the other."""
        when = datetime.fromtimestamp(self.time).strftime("%Y-%m-%d %H:%M:%S")
        out = [f"Stacks of {when} ({self.reason})"]
        if self.hang is not None:
            out.append(f"Collectives: {self.hang.line}")
            out.extend(f"    {line}" for line in self.hang.details)
        for s in self.stacks:
            if rank is not None and s.rank != rank:
                continue
            out.append(f"\n=== node {s.node} rank {s.rank} (pid {s.pid}) ===")
            out.append(s.text.rstrip() if s.text is not None else f"not taken: {s.error}")
        return "\n".join(out) + "\n"


def read(attempt_dir: Path, name: str) -> StackSet | None:
    where = attempt_dir / STACKS / name
    index = read_json(where / STACKS_INDEX)
    if not isinstance(index, dict):
        return None
    stacks = []
    for rank, entry in sorted(index.get("ranks", {}).items(), key=lambda kv: int(kv[0])):
        text = None
        if entry.get("file"):
            try:
                text = (where / entry["file"]).read_text(errors="replace")
            except OSError as err:
                entry["error"] = str(err)
        recorder = read_json(where / entry["recorder"]) if entry.get("recorder") else None
        stacks.append(
            RankStacks(
                int(rank),
                entry["node"],
                entry["pid"],
                text,
                entry.get("error"),
                recorder if isinstance(recorder, dict) else None,
                entry.get("recorder_error"),
            )
        )
    hang = index.get("hang")
    return StackSet(
        name,
        str(index.get("reason", "")),
        float(index.get("time", 0)),
        stacks,
        HangReport.from_json(hang) if isinstance(hang, dict) else None,
    )


def named_hang(attempt_dir: Path) -> str | None:
    """The collective the attempt's ranks were last seen waiting in: the line of the
    latest set whose recorders named one."""
    for name in reversed(sets(attempt_dir)):
        index = read_json(attempt_dir / STACKS / name / STACKS_INDEX)
        hang = index.get("hang") if isinstance(index, dict) else None
        if isinstance(hang, dict) and hang.get("kind") in NAMED:
            return str(hang.get("line"))
    return None


def sets(attempt_dir: Path) -> list[str]:
    """The attempt's sets, oldest first."""
    root = attempt_dir / STACKS
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / STACKS_INDEX).is_file())


# -- asking the supervisor --------------------------------------------------------------


def new_name() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


def requests(attempt_dir: Path) -> list[str]:
    root = attempt_dir / STACKS
    if not root.is_dir():
        return []
    return sorted(p.name.removeprefix("request-") for p in root.glob("request-*"))


def answered(attempt_dir: Path, name: str) -> None:
    """The request ``name`` is done with (its set saved, or given up)."""
    (attempt_dir / STACKS / f"request-{name}").unlink(missing_ok=True)


def request(attempt_dir: Path, supervisor_pid: int, wait: float = ANSWER_WAIT) -> StackSet:
    """Ask the supervisor of a running attempt for a set now, and wait for it."""
    name = new_name()
    root = private_dir(attempt_dir / STACKS)
    write_private(root / f"request-{name}", "")
    try:
        os.kill(supervisor_pid, signal.SIGUSR2)
    except ProcessLookupError:
        answered(attempt_dir, name)
        raise StacksError("the job's supervisor is gone") from None
    deadline = time.monotonic() + wait
    while (found := read(attempt_dir, name)) is None:
        if time.monotonic() > deadline:
            raise StacksError(f"no answer from the job's supervisor in {wait:g} s")
        time.sleep(0.05)
    return found
