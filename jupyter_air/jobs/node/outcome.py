"""How an attempt ends, decided in one place for every backend.

A node agent (in-process on the local backend, a Ray actor per node on Ray) and the
supervisor watching the nodes both follow ``StopRule``: the first reason to stop wins
and decides the outcome. A rank failing stops the others and fails the attempt with the
earliest failure (the others are usually its consequence: a peer's collective breaking).
A cancel, a timeout or an abort (another node failed) interrupts the ranks, and whatever
fails while they stop is the stop's doing, not a failure of its own. A cluster that says
it took a node away (``blame``) outranks every time: the others went because it did.
"""

from __future__ import annotations

import enum
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ...status import Outcome


class Stop(enum.Enum):
    """Why the ranks are being stopped."""

    FAILURE = "failure"  # a rank failed: the others go at once (SIGTERM)
    ABORT = "abort"  # another node's rank failed: this node's go at once
    CANCEL = "cancel"  # the user, or the kernel that followed the job, went
    TIMEOUT = "timeout"  # the workload's time ran out

    @property
    def interrupts(self) -> bool:
        """SIGINT first (a KeyboardInterrupt the user's code may handle), then SIGTERM."""
        return self in (Stop.CANCEL, Stop.TIMEOUT)


@dataclass
class AttemptEnd:
    """How an attempt (or one node of it) ended."""

    status: Outcome
    exit_codes: list[int | None] = field(default_factory=list)
    failed_rank: int | None = None
    message: str | None = None
    #: Unix time the failing rank was seen to exit: across nodes, the first is the cause.
    failed_at: float | None = None
    #: A failure another attempt cannot mend (the cluster is too small): not retried.
    final: bool = False

    def __post_init__(self) -> None:
        self.status = Outcome(self.status)  # one sent by a node agent may be its value


def shown_exit_codes(codes: Sequence[int | None] | None) -> str:
    """Exit codes as a user reads them: ``[0, 1, SIGTERM, lost]``; ``lost`` for a rank
    whose exit was never seen (its node went, or it never started)."""
    if codes is None:
        return "none yet"
    return "[" + ", ".join(_exit_word(code) for code in codes) + "]"


def _exit_word(code: int | None) -> str:
    if code is None:
        return "lost"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return str(code)


def is_final(status: str, ended: float | None, attempt: int, max_retries: int) -> bool:
    """Whether an attempt's end is its job's outcome: it ended and did not fail, or used
    the last retry (a failure the supervisor chose not to retry is known at the job's end)."""
    if ended is None:
        return False
    return status != Outcome.FAILED or attempt > max_retries


def first_failure(ends: Mapping[int, AttemptEnd]) -> AttemptEnd | None:
    """The failure that came first (of nodes' or ranks' ends, by number): the others are
    usually its consequence."""
    failures = [e for e in ends.values() if e.status is Outcome.FAILED]
    return min(failures, key=lambda e: e.failed_at or float("inf"), default=None)


class StopRule:
    """The stop state machine of one attempt (or one node of it).

    Fed with what happens (``failed``, ``cancel``, ``abort``, thread-safe, also before
    ``begin``) and asked ``due`` whether a stop should begin now; once every rank has
    exited, ``end`` says the outcome.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._timeout: float | None = None
        self._started = clock()
        self.stop: Stop | None = None
        self._message: str | None = None
        self._failures: list[AttemptEnd] = []
        self._blamed: AttemptEnd | None = None
        self._cancelled = False
        self._aborted: str | None = None

    def begin(self, timeout: float | None) -> None:
        """The ranks are starting: the timeout counts from now."""
        self._timeout, self._started = timeout, self._clock()

    def cancel(self) -> None:
        self._cancelled = True

    def abort(self, message: str) -> None:
        self._aborted = message

    def failed(self, end: AttemptEnd) -> None:
        """A rank (or a node) failed. Once a cancel, abort or timeout is under way, a
        failure is its consequence and does not count."""
        if self.stop in (None, Stop.FAILURE):
            self._failures.append(end)

    def blame(self, end: AttemptEnd) -> None:
        """The cluster's own word on whose fault the failure is (a node it took away):
        this end is the failure, whatever failed before or after it. The first word
        stands; like a failure, it does not count once another stop is under way."""
        if self.stop in (None, Stop.FAILURE) and self._blamed is None:
            self._blamed = end

    @property
    def failure(self) -> AttemptEnd | None:
        """The first failure seen so far, as soon as it is seen (other nodes stop on it),
        unless the cluster blamed another."""
        return self._blamed or first_failure(dict(enumerate(self._failures)))

    def due(self) -> Stop | None:
        """The stop that begins now, if one does (each begins once)."""
        if self.stop is not None:
            return None
        if self._failures or self._blamed is not None:
            self.stop = Stop.FAILURE
        elif self._aborted is not None:
            self.stop, self._message = Stop.ABORT, self._aborted
        elif self._cancelled:
            self.stop, self._message = Stop.CANCEL, "cancelled"
        elif self._timeout is not None and self._clock() - self._started > self._timeout:
            self.stop, self._message = Stop.TIMEOUT, f"timed out after {self._timeout:g} s"
        return self.stop

    def end(self, exit_codes: Sequence[int | None]) -> AttemptEnd:
        """The outcome, once every rank has exited with these codes."""
        codes = list(exit_codes)
        failure = self.failure
        if self.stop is Stop.FAILURE and failure is not None:
            return AttemptEnd(
                Outcome.FAILED, codes, failure.failed_rank, failure.message, failure.failed_at
            )
        if self.stop in (Stop.CANCEL, Stop.ABORT):
            return AttemptEnd(Outcome.CANCELLED, codes, message=self._message)
        if self.stop is Stop.TIMEOUT:
            return AttemptEnd(Outcome.FAILED, codes, message=self._message)
        return AttemptEnd(Outcome.SUCCEEDED, codes)
