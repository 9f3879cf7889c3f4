"""Where a rank's step goes: waiting for data, computing, or waiting in collectives.

The rank's training thread is always in one place: in the DataLoader iterator's
``__next__`` (waiting for data), in a collective it called and waits on (waiting in
collectives), or computing, inside the backward pass, the optimizer's step, or anywhere
else (the forward pass, the loss, the user's own code). Each move from one place to
another adds the time spent there to the step's split (``Marks.phase``); every
``NOTE_EVERY`` steps, on a job of several ranks, one note line says how the compute split
between those three, seconds a step over the steps since the last (``{"cs": {"backward":
..., "optimizer": ..., "other": ...}, "s": 120, "steps": 10}``), so that the straggler
hint can say where a slow rank's compute goes. The rank's start (imports, making the
model) up to its first read of data or backward pass is no step's and is not counted.

Under DDP, every bucket's gradient all-reduce is waited for at the end of the backward
pass, so a rank slowed in its backward makes every other rank's backward as long as its
own (traceml #252): the backward's wall time cannot single it out. The autograd engine
runs the callbacks queued during a backward pass in their order, once the graph is done;
DDP's wait for its buckets is one of them. A callback queued when the graph's first node
runs comes first, at the moment this rank's own gradients are done: what follows until
``backward`` returns is the wait for the other ranks (and the last bucket's all-reduce).
It costs one hook and one callback a backward pass, whatever the model (on a rank of
several; a rank alone has nobody to wait for).

On the CPU the split is wall time (``time.perf_counter``): a collective blocks the thread
that waits for it. On a GPU the kernels run behind the CPU and NCCL's waits are the
stream's, not the thread's: once CUDA is initialized, each move records a CUDA event on
the current stream instead (``StreamTimer``), and the time between two events is the
GPU's, read once the GPU has passed the later one (``Event.query``, never a wait). Those
spans land in the step being marked when they are read, a step or two after their own:
the straggler hint looks at hundreds of steps. The wait for data is then the GPU's idle
time behind the DataLoader (none while it still has queued work), and the wait in
collectives the stream's wait for NCCL. Only the thread that installed this (the rank's
main thread) is followed: a collective or a DataLoader on another thread is not this
rank's step. Collectives that ``torch.compile`` traces are left to it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from enum import StrEnum
from types import ModuleType
from typing import Any, TypeVar

from ..import_hooks import when_imported
from . import marks as marks_module
from .marks import Marks, Phase

#: Steps between two notes of the compute's split (a step number divisible by it).
NOTE_EVERY = 10
#: Seconds between two looks for this process's marks while there are none.
LOOK_AGAIN = 1.0
#: Set on what we wrapped, so that a second install wraps nothing twice.
WRAPPED = "__air_phases__"

#: The collectives timed when called synchronously (``async_op`` left False). DDP's
#: buffer sync before the forward pass is ``_broadcast_coalesced``.
COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "_broadcast_coalesced",
)

F = TypeVar("F", bound=Callable[..., Any])


class Place(StrEnum):
    """Where the training thread is; the compute's three places share ``Phase.COMPUTE``."""

    DATA = "data"
    COMM = "comm"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    OTHER = "other"


PHASES = {
    Place.DATA: Phase.DATA,
    Place.COMM: Phase.COMM,
    Place.BACKWARD: Phase.COMPUTE,
    Place.OPTIMIZER: Phase.COMPUTE,
    Place.OTHER: Phase.COMPUTE,
}
#: Places a nested event does not leave: a collective inside a collective's wait, a
#: DataLoader read by a DataLoader, are the outer one's time.
WAITS = frozenset({Place.DATA, Place.COMM})


#: Spans a GPU may hold unread (its queue of work far behind the CPU): more are dropped.
MAX_PENDING = 1024

#: When a move happened: the CPU's clock, and the CUDA event recorded then (None on the CPU).
Stamp = tuple[float, Any]


class StreamTimer:
    """Seconds between CUDA events on the rank's current stream: each move records one,
    and a span between two is read once the GPU has passed its end. Events are reused
    once no span holds them, so a step costs a few ``record`` calls and no allocation."""

    def __init__(self, event: Callable[..., Any]) -> None:
        self._event = event  # torch.cuda.Event
        self._free: list[Any] = []
        self._pending: deque[tuple[Place, Any, Any]] = deque()

    def record(self) -> Any:
        """A new event, recorded now on the current stream."""
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record()
        return event

    def spans(self, place: Place, start: Any, end: Any) -> list[tuple[Place, float]]:
        """Queue the span ``start``-``end`` spent in ``place``; the spans the GPU has
        passed, oldest first, with their seconds. An event is reused once read."""
        if len(self._pending) < MAX_PENDING:
            self._pending.append((place, start, end))
        done: list[tuple[Place, float]] = []
        while self._pending and self._pending[0][2].query():
            where, first, last = self._pending.popleft()
            done.append((where, first.elapsed_time(last) / 1000.0))
            self._free.append(first)  # later spans start at their own, later events
        return done


def cuda_streams() -> StreamTimer | None:
    """A timer on CUDA events once this process has initialized CUDA; None until then."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    return StreamTimer(cuda.Event)


class Tracker:
    """The training thread's place, and since when; each move is counted into the
    current step's split of ``marks()`` (None: marks are off, nothing is counted)."""

    def __init__(
        self,
        marks: Callable[[], Marks | None] = marks_module.current,
        clock: Callable[[], float] = time.perf_counter,
        notes: bool = True,
        streams: Callable[[], StreamTimer | None] = cuda_streams,
    ) -> None:
        self._marks = marks
        self._clock = clock
        self._notes = notes
        self._find_streams = streams
        self._streams: StreamTimer | None = None  # found once CUDA is initialized
        self._owner = threading.get_ident()
        self.place = Place.OTHER
        self._since: Stamp = (clock(), None)
        self._compute: dict[str, float] = {}
        self._steps = 0  # marked since the last note
        self._found: Marks | None = None  # kept: a warm session's next cell retargets it
        self._looked = -LOOK_AGAIN
        self._optimizer: list[Place] = []  # the places an optimizer step came from
        self._done: Stamp | None = None  # when the backward pass's own graph was done
        #: Whether the training began: its first read of data or backward pass.
        self._training = False

    def owns(self) -> bool:
        """Whether the caller is the training thread."""
        return threading.get_ident() == self._owner

    def stamp(self) -> Stamp:
        """Now: the CPU's clock, and a CUDA event on the current stream once there is CUDA."""
        if self._streams is None:
            self._streams = self._find_streams()
        return self._clock(), None if self._streams is None else self._streams.record()

    def move(self, place: Place, at: Stamp | None = None) -> Place:
        """Go to ``place`` (at ``at``, else now); returns the place left."""
        now = self.stamp() if at is None else at
        left, since = self.place, self._since
        self.place, self._since = place, now
        if not self._training:  # the rank's start (imports, the model's making) is no step's
            self._training = place in (Place.DATA, Place.BACKWARD)
            return left
        marks = self._found or self._look(now[0])
        if marks is None:
            return left
        if self._streams is not None and since[1] is not None and now[1] is not None:
            spans = self._streams.spans(left, since[1], now[1])
        else:
            spans = [(left, now[0] - since[0])]
        for where, spent in spans:
            if spent > 0:
                marks.phase(PHASES[where], spent)
                if where not in WAITS:
                    self._compute[where] = self._compute.get(where, 0.0) + spent
        return left

    def _look(self, now: float) -> Marks | None:
        """This process's marks, looked for at most every ``LOOK_AGAIN`` seconds until
        found (they are off, or their folder is not made yet)."""
        if now - self._looked < LOOK_AGAIN:
            return None
        self._looked = now
        self._found = found = self._marks()
        if found is not None and self._notes:
            found.on_step(self._stepped)
        return found

    def _stepped(self, step: int) -> None:
        """After a step mark: every ``NOTE_EVERY`` steps (by number, so that every rank
        notes the same steps), the compute's split of the steps since, in one line."""
        self._steps += 1
        if step % NOTE_EVERY:
            return
        compute, steps, self._compute, self._steps = self._compute, self._steps, {}, 0
        if compute and self._found is not None:
            split = {k: round(v / steps, 6) for k, v in compute.items()}
            self._found.note(cs=split, s=step, steps=steps)

    def optimizer_began(self, *_: Any) -> None:
        """``torch.optim``'s global pre-hook of every optimizer's step."""
        if self.owns() and self.place not in WAITS:
            self._optimizer.append(self.move(Place.OPTIMIZER))

    def optimizer_ended(self, *_: Any) -> None:
        """The post-hook: back where the step was called from."""
        if self.owns() and self._optimizer:
            self.move(self._optimizer.pop())

    def waiting(self, place: Place, call: F, aside: Callable[[], bool] = lambda: False) -> F:
        """``call``, with the time in it counted as ``place`` when the training thread
        waits on it synchronously, unless ``aside()``."""

        @functools.wraps(call)
        def waited(*args: Any, **kwargs: Any) -> Any:
            if aside() or kwargs.get("async_op") or not self.owns() or self.place in WAITS:
                return call(*args, **kwargs)
            left = self.move(place)
            try:
                return call(*args, **kwargs)
            finally:
                self.move(left)

        setattr(waited, WRAPPED, True)
        return waited  # type: ignore[return-value]

    def backward(self, call: F, engine: Callable[[], Any]) -> F:
        """``torch.autograd.backward``, split at the moment its graph is done: before it
        this rank's own backward (compute), after it the wait in the callbacks queued
        after the graph (DDP's all-reduce: comm). ``engine()`` gives autograd's engine."""

        def graph_done() -> None:
            self._done = self.stamp()

        def first_node(*_: Any) -> None:
            with contextlib.suppress(Exception):  # never in the training's way: no split
                engine().queue_callback(graph_done)

        @functools.wraps(call)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.owns() or self.place in WAITS or self.place is Place.BACKWARD:
                return call(tensors, *args, **kwargs)  # one inside a backward: the outer's
            self._done = None
            handle = _hook_first_node(tensors, first_node)
            left = self.move(Place.BACKWARD)
            try:
                return call(tensors, *args, **kwargs)
            finally:
                if handle is not None:
                    handle.remove()
                if self._done is not None:
                    self.move(Place.COMM, at=self._done)
                self.move(left)

        setattr(backward, WRAPPED, True)
        return backward  # type: ignore[return-value]


def _hook_first_node(tensors: Any, hook: Callable[..., None]) -> Any:
    """``hook`` on the graph node of the first of ``tensors`` (a tensor or a sequence)
    that has one, the node a backward pass runs first; its handle, or None."""
    items = tensors if isinstance(tensors, Sequence) else (tensors,)
    node = next((t.grad_fn for t in items if getattr(t, "grad_fn", None) is not None), None)
    if node is None:
        return None
    try:
        return node.register_prehook(hook)
    except Exception:  # a node that takes no hook: this backward is not split
        return None


_tracker: Tracker | None = None
_lock = threading.Lock()


def install() -> None:
    """Follow this rank's DataLoader iterators, backward passes, optimizer steps and
    collectives, as soon as torch imports them (at once if it has). Once per process.
    A rank alone has nobody to wait for nor to be compared with: its backward passes are
    left alone (their split costs the most: a hook and a callback each) and no notes."""
    global _tracker
    with _lock:
        if _tracker is not None:
            return
        several = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
        _tracker = tracker = Tracker(notes=several)
    when_imported("torch.utils.data.dataloader", lambda m: _patch_dataloader(m, tracker))
    if several:
        when_imported("torch.autograd", lambda m: _patch_autograd(m, tracker))
    when_imported("torch.optim.optimizer", lambda m: _patch_optimizer(m, tracker))
    when_imported("torch.distributed", lambda m: _patch_distributed(m, tracker))


def _patch_dataloader(module: ModuleType, tracker: Tracker) -> None:
    cls = module._BaseDataLoaderIter
    if not getattr(cls.__next__, WRAPPED, False):
        cls.__next__ = tracker.waiting(Place.DATA, cls.__next__)


def _patch_autograd(module: ModuleType, tracker: Tracker) -> None:
    if not getattr(module.backward, WRAPPED, False):
        engine = module.variable.Variable
        wrapped = tracker.backward(module.backward, lambda: engine._execution_engine)
        module.__dict__["backward"] = wrapped  # Tensor.backward calls it from there


def _patch_optimizer(module: ModuleType, tracker: Tracker) -> None:
    module.register_optimizer_step_pre_hook(tracker.optimizer_began)
    module.register_optimizer_step_post_hook(tracker.optimizer_ended)


def _patch_distributed(module: ModuleType, tracker: Tracker) -> None:
    """``torch.distributed``'s collectives, and the same in ``distributed_c10d``, whose
    own functions call each other through it (a nested call counts once)."""
    if not module.is_available():
        return
    c10d = module.distributed_c10d

    def compiling() -> bool:  # dynamo sees the collective itself, as if we were not here
        return bool(sys.modules["torch"].compiler.is_compiling())

    for name in COLLECTIVES:
        call = getattr(module, name, None)
        if call is None or getattr(call, WRAPPED, False):
            continue
        timed = tracker.waiting(Place.COMM, call, compiling)
        setattr(module, name, timed)
        if getattr(c10d, name, None) is call:
            setattr(c10d, name, timed)
