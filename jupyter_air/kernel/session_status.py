"""What a warm session says of itself: its shape, what it does now, its ranks, or how
it ended (``%air_session status``, ``stop`` and its start's announcement)."""

from __future__ import annotations

import time

from ..jobs.sessions import cells as session_cells
from ..jobs.sessions.host import SessionEnded
from .warm_session import RESTART, WarmSession


def shape(ws: WarmSession) -> str:
    """``2 ranks``, or ``2 ranks on 2 Ray nodes (host-a, host-b)``."""
    ranks = f"{ws.session.nproc} ranks"
    if not ws.backend.multi_node:
        return ranks
    hosts = sorted(set(ws.session.hosts.values()))
    return f"{ranks} {ws.backend.describe(ws.nnodes, hosts)}"


def describe(ws: WarmSession) -> str:
    """What ``%air_session status`` and ``stop`` say: the job, its shape, its cells and
    its run, then what it does now and its ranks' pids, or how it ended."""
    s = ws.session
    cells = f"{s.cells} cell{'' if s.cells == 1 else 's'}"
    head = f"session job {ws.job_id}: {shape(ws)}, {cells}, run {ws.run_name}"
    if s.ended is None and s.stopping is not None:
        return f"{head}\nstopping: {s.stopping}"
    if s.ended is None:
        try:
            s.check()
            return f"{head}\n{_activity(ws)}\n{_pids(ws)}"
        except SessionEnded:
            pass
    return f"{head}\nended: {s.ended}\n{RESTART}"


def _pids(ws: WarmSession) -> str:
    """``pids: rank 0: 1234, rank 1: 1235``, as the other lines read; ``on host-b``
    after each where the ranks are on several machines (a pid is its host's own)."""
    s = ws.session
    hosts = s.hosts if ws.backend.multi_node else {}
    ranks = (
        f"rank {r}: {s.pids[r]}" + (f" on {hosts[r]}" if hosts.get(r) else "")
        for r in sorted(s.pids)
    )
    return "pids: " + ", ".join(ranks)


def _activity(ws: WarmSession) -> str:
    """The running cell and for how long, or how long the session has been idle and
    how long it has left: by the rule the GPU panel reads (``idle_since``)."""
    s, now = ws.session, time.time()
    since = session_cells.idle_since(s.files, s.started)
    cell = session_cells.latest(s.files)
    if since is None and cell is not None:
        return f"running cell {cell.cell} for {_duration(now - cell.started)}"
    idle = now - (since or s.started)
    if not s.idle_timeout:
        return f"idle for {_duration(idle)} (no idle timeout)"
    left = max(0.0, s.idle_timeout - idle)
    return (
        f"idle for {_duration(idle)}; stops in {_duration(left)} without a cell "
        f"(--idle-timeout {s.idle_timeout / 60:g})"
    )


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
