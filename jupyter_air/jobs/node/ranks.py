"""The ranks of one node as processes of this one: the local backend's, and each node
agent's on a cluster's node.

Each rank is a fresh interpreter in its own session, so a signal to its process
group reaches whatever it started (DataLoader workers, compilers) and nothing is
left holding GPU memory. A watchdog (``reaper``) takes those groups, and whatever
left them, down when the attempt ends or its owner is killed outright. Output is read
with one selector loop for all pipes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ...logs.capture import LINE, RankLog, StreamSplitter, plain_lines
from ...logs.levels import ERROR
from ...status import Outcome
from .death import MemoryWatch, XidLook, explain
from .launch import RankSpec
from .outcome import AttemptEnd, StopRule
from .reaper import Reaper, sweep

#: Seconds a rank gets to stop after SIGINT, then after SIGTERM, before SIGKILL.
INTERRUPT_GRACE = 5.0
TERMINATE_GRACE = 3.0
#: Seconds the output of exited ranks is still read, once what held it open is gone.
LEFTOVER_GRACE = 1.0
#: Seconds the pipes of exited ranks get to reach their end before something is taken
#: to hold them open.
LEFTOVER_DRAIN = 0.2
#: Seconds between two looks at the ranks' memory (their cgroup, resident size).
MEMORY_LOOK = 0.5
#: A failing rank's last lines read for the cause of its death.
LAST_LINES = 60


@dataclass
class _Rank:
    spec: RankSpec
    process: subprocess.Popen[bytes]
    log: RankLog
    splitters: dict[int, StreamSplitter] = field(default_factory=dict)
    exited_at: float | None = None


class LocalRanks:
    """Start, watch and stop the ranks of one attempt on this machine."""

    def __init__(self, specs: Sequence[RankSpec], reaper: Reaper | None = None) -> None:
        """``reaper``: the watchdog of the process that owns these ranks (a supervisor's)
        to tell of their groups; without one, the ranks get a watchdog of their own."""
        self._specs = list(specs)
        self._shared_reaper = reaper
        self._ranks: list[_Rank] = []
        self._rule = StopRule()
        self._selector = selectors.DefaultSelector()
        self._last_output: dict[int, float] = {}
        self._memory = MemoryWatch()
        self._xids = XidLook.of(self._specs)
        self._memory_looked = 0.0

    @property
    def failure(self) -> AttemptEnd | None:
        """The first failure, as soon as it is seen: other nodes are stopped on it while
        this node is still stopping its own ranks."""
        return self._rule.failure

    def cancel(self) -> None:
        """Ask the attempt to stop (thread- and signal-safe)."""
        self._rule.cancel()

    def abort(self, message: str) -> None:
        """Stop at once (SIGTERM first, as after a failure) because of something outside
        this machine: another node's rank failed. Thread-safe."""
        self._rule.abort(message)

    def last_output(self) -> dict[int, float]:
        """Unix time each rank last wrote anything (the hints' "printed nothing for")."""
        return dict(self._last_output)

    def pids(self) -> list[int]:
        return [r.process.pid for r in self._ranks]

    def running(self) -> dict[int, int]:
        """``{rank: pid}`` of the ranks that have not exited."""
        return {r.spec.rank: r.process.pid for r in self._ranks if r.process.poll() is None}

    def run(self, timeout: float | None = None) -> AttemptEnd:
        """Start every rank and return once all have exited."""
        rule = self._rule
        rule.begin(timeout)
        reaper = self._shared_reaper or Reaper(_rank_match(self._specs))
        self._xids.start()
        try:
            for spec in self._specs:
                if rule.due() is not None:
                    break  # a cancel stops a launch in progress: the ranks started are stopped
                try:
                    self._start(spec, reaper)
                except (OSError, subprocess.SubprocessError) as err:
                    return self._not_started(spec, err)
            self._watch(rule, reaper)
            return self._with_cause(rule.end(self._exit_codes()))
        finally:
            self._xids.stop()
            if reaper is self._shared_reaper:  # the attempt's leftovers go before a retry
                sweep(_rank_match(self._specs), patience=1.0)
            else:
                reaper.close()

    def _with_cause(self, end: AttemptEnd) -> AttemptEnd:
        """The failing rank's death in words (``death``), now that its last lines are in
        its log: an out-of-memory kill, a native crash and where, a MemoryError."""
        rank = end.failed_rank
        if end.status is not Outcome.FAILED or rank is None or rank >= len(self._ranks):
            return end
        failed = next((r for r in self._ranks if r.spec.rank == rank), None)
        if failed is None or end.message != _exit_text(rank, failed.process.returncode):
            return end  # a timeout, a rank that could not start: said already
        last = deque(plain_lines(failed.spec.log_path), maxlen=LAST_LINES)
        xids = self._xids.near(rank, end.failed_at)
        code = failed.process.returncode
        return replace(end, message=explain(rank, code, last, self._memory, xids))

    def _watch(self, rule: StopRule, reaper: Reaper) -> None:
        """Read output until every rank's exit is noted and its pipes are drained,
        stopping the ranks as ``rule`` says. The loop ends on exits it has noted, never on
        a rank found exited in passing: a rank dying between the two looks would
        otherwise end the attempt without its failure."""
        while self._selector.get_map() or any(r.exited_at is None for r in self._ranks):
            self._pump(0.1)
            if time.monotonic() - self._memory_looked > MEMORY_LOOK:
                self._memory_looked = time.monotonic()
                for rank in self._ranks:
                    if rank.process.poll() is None:
                        self._memory.look(rank.spec.rank, rank.process.pid)
            self._note_exits(rule, reaper)
            rule.due()
            if rule.stop is not None and not self._all_exited():
                self._stop_all(interrupt_first=rule.stop.interrupts)
            if self._selector.get_map() and self._output_held():
                self._end_leftovers()
        for rank in self._ranks:
            rank.process.wait()
            for splitter in rank.splitters.values():
                splitter.flush()
            rank.log.close()

    def _note_exits(self, rule: StopRule, reaper: Reaper) -> None:
        """The ranks that exited since the last look: their groups go, and a nonzero code
        is a failure."""
        for rank in self._ranks:
            if rank.exited_at is None and rank.process.poll() is not None:
                rank.exited_at = time.monotonic()
                # Whatever the rank left behind in its session goes with it.
                _kill_group(rank.process.pid)
                reaper.untrack(rank.process.pid)
                code = rank.process.returncode
                if code != 0:
                    text = _exit_text(rank.spec.rank, code)
                    rule.failed(AttemptEnd(Outcome.FAILED, [], rank.spec.rank, text, time.time()))

    def _output_held(self) -> bool:
        """Every rank has exited a while ago, yet some output is still open: something a
        rank started outside its group holds it (their groups' end closes the rest)."""
        exits = [r.exited_at for r in self._ranks]
        if not exits or None in exits:
            return False
        return time.monotonic() - max(e for e in exits if e is not None) > LEFTOVER_DRAIN

    def _exit_codes(self) -> list[int | None]:
        codes: list[int | None] = [r.process.returncode for r in self._ranks]
        return codes + [None] * (len(self._specs) - len(codes))  # not started: cancelled first

    def _not_started(self, spec: RankSpec, err: BaseException) -> AttemptEnd:
        """A rank that cannot start (command not found, no such directory): the ranks
        already started are stopped, and the attempt fails saying why."""
        failed_at = time.time()
        self._stop_all(interrupt_first=False)
        for rank in self._ranks:
            rank.process.wait()
            rank.log.close()
        message = f"rank {spec.rank} could not start: {err}"
        log = RankLog(spec.log_path)
        log.write(LINE["err"] + ERROR, message)
        log.close()
        return AttemptEnd(Outcome.FAILED, self._exit_codes(), spec.rank, message, failed_at)

    def _start(self, spec: RankSpec, reaper: Reaper) -> None:
        process = subprocess.Popen(
            spec.argv,
            env=spec.env,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        reaper.track(process.pid)  # its session's id is its pid
        rank = _Rank(spec, process, RankLog(spec.log_path))
        for pipe, stream in ((process.stdout, "out"), (process.stderr, "err")):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            rank.splitters[pipe.fileno()] = StreamSplitter(rank.log, stream)
            self._selector.register(pipe, selectors.EVENT_READ, rank)
        self._ranks.append(rank)

    def _end_leftovers(self) -> None:
        """Every rank has exited, but something one started outside its group may still
        hold its output open: it goes now (it would outlive the job), and whatever output
        is left is read for a moment, then given up."""
        sweep(_rank_match(self._specs), patience=1.0)
        deadline = time.monotonic() + LEFTOVER_GRACE
        while self._selector.get_map() and time.monotonic() < deadline:
            self._pump(0.05)
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]

    def _pump(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            rank: _Rank = key.data
            fd = key.fd
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if data:
                self._last_output[rank.spec.rank] = time.time()
                rank.splitters[fd].feed(data)
            else:  # end of stream
                self._selector.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]

    def _all_exited(self) -> bool:
        return all(r.process.poll() is not None for r in self._ranks)

    def _stop_all(self, interrupt_first: bool) -> None:
        """SIGINT (on cancel), then SIGTERM, then SIGKILL, each after its grace period,
        reading output all along so the last lines before the end are kept."""
        steps: list[tuple[signal.Signals, float]] = [(signal.SIGTERM, TERMINATE_GRACE)]
        if interrupt_first:
            steps.insert(0, (signal.SIGINT, INTERRUPT_GRACE))
        for sig, grace in steps:
            self._signal_all(sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not self._all_exited():
                self._pump(0.05)
            if self._all_exited():
                return
        self._signal_all(signal.SIGKILL)

    def _signal_all(self, sig: signal.Signals) -> None:
        for rank in self._ranks:
            if rank.process.poll() is None or sig == signal.SIGKILL:
                _kill_group(rank.process.pid, sig)


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if os.uname().sysname == "Linux" else None
if _libc is not None:
    _libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    _libc.signal.restype = ctypes.c_void_p
_SIG_DFL = None  # C's SIG_DFL, a null handler


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends, so a
    supervisor or node agent killed outright (OOM, a Ray node removed) leaves no rank
    behind; and SIGINT back to its default, so that a cancel's first step interrupts
    the rank (a KeyboardInterrupt) whoever started it: a SIGINT ignored by a process
    started in the background by a shell is ignored by its children too, and Python
    keeps it so. Only C calls: nothing here may take a lock the fork copied."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        _libc.signal(signal.SIGINT, _SIG_DFL)


def terminate_with_parent() -> None:
    """In a child that must clean up as it goes (a cluster's launcher, ``srun``), before
    exec: SIGTERM when the thread that started it ends. Only C calls, as above."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _rank_match(specs: Sequence[RankSpec]) -> dict[str, str]:
    """What the environment of this node's ranks of this attempt, and of anything they
    start, holds (several nodes of one job may share a machine); empty if not a job's."""
    env = specs[0].env if specs else {}
    if "AIR_JOB_ID" not in env:
        return {}
    return {k: env[k] for k in ("AIR_JOB_ID", "AIR_ATTEMPT", "GROUP_RANK") if k in env}


def _kill_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _exit_text(rank: int, code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"rank {rank} was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"rank {rank} exited with code {code}"
