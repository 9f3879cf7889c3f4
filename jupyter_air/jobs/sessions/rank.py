"""One warm rank of a session: run the cells (and functions) the kernel sends, in one
namespace.

``python -m jupyter_air.jobs.sessions.rank``, started by the job's node agent like any
rank (the torchrun environment, its output captured into its rank log). It connects to
the kernel with the session's ticket (``session_wire``: from the job's directory on the
kernel's machine, from ``AIR_SESSION_TICKET`` on a Ray node) and runs each cell in
the same fresh ``__main__``, so names, models and the process group stay between cells.
``MLFLOW_RUN_ID`` is the cell's own run while it runs; for a cell run before its run
could be made (``--tracking deferred``, the server down) it is empty, and rank 0's
points go to the cell's own journal, for the run made later. The kernel's interrupt raises
``KeyboardInterrupt`` in the running cell only; a SIGINT from outside while no cell runs
(a cancel) ends the rank. The kernel's channel closing with no stop (its kernel died)
ends it too, through the cancel that the supervisor's watch over the kernel sends.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

import cloudpickle

from ...job_dir import AttemptDir, JobDir
from ...paths import air_home
from ...perf import hooks
from ...perf.marks import PERF_DIR_ENV
from ...tracking.journal import JOURNAL_ENV
from ..node import rank_debugger, rank_main
from ..node.rank_main import exit_now, keep_run_in_environment, run_cell
from . import wire

#: A rank's arguments to its interpreter (on a Ray node, the node's own interpreter).
ARGS = ["-u", "-m", "jupyter_air.jobs.sessions.rank"]
#: Seconds a rank tries to reach its kernel before giving up.
CONNECT_WAIT = 300.0
#: Seconds a rank whose kernel died waits for the supervisor's cancel.
KERNEL_GONE_WAIT = 10.0
#: MLflow's switch for the links it prints as it ends a run on a tracking server.
NO_LINKS = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"


class _Cells:
    """Whether a cell runs now, so that an interrupt reaches only a running cell."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = False
        self.asked = False  # the kernel asked for an interrupt (a late one is ignored)

    def interrupt(self) -> None:
        with self.lock:
            self.asked = True
            if self.running:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        if self.running or not self.asked:
            raise KeyboardInterrupt  # in the cell; or, between cells, a cancel: leave


class _CountingStream:
    """``sys.stdout``/``sys.stderr`` as they were, counting the lines written through
    them, so the kernel knows how many of a cell's lines to wait for in the logs."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def user_traceback(err: BaseException) -> str:
    """The traceback from the user's code on, without the frames that ran the cell."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, rank_main.__file__):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(err), err, tb or err.__traceback__))


def interrupted(err: BaseException) -> bool:
    """Whether a cell ended by an interrupt: the ``KeyboardInterrupt`` itself, or a
    library's way out of one (Lightning's ``fit`` catches it, tears down and calls
    ``sys.exit(1)``), which would otherwise read as the rank failing the cell."""
    return isinstance(err, KeyboardInterrupt) or (
        isinstance(err, SystemExit) and isinstance(err.__context__, KeyboardInterrupt)
    )


def _result(value: Any, outputs: dict[str, Any]) -> bytes:
    """Rank 0's value and requested names; what cannot be pickled comes back as its repr."""
    try:
        return bytes(cloudpickle.dumps({"value": value, "outputs": outputs, "unpicklable": {}}))
    except Exception as err:
        reprs = {"value": repr(value), **{n: repr(v) for n, v in outputs.items()}}
        data = {"value": None, "outputs": {}, "unpicklable": reprs, "why": str(err)}
        return bytes(cloudpickle.dumps(data))


def _in_namespace(function: Any, namespace: dict[str, Any]) -> Any:
    """A function from the kernel (``@distributed(session=True)``) made to read and write
    the rank's namespace, as a cell does: the kernel names it reads (shipped with it by
    cloudpickle, in globals of their own) are set there first, and it and the notebook
    functions shipped with it see the names earlier session cells made."""
    if not isinstance(function, types.FunctionType):
        return function  # a callable object: it keeps its own state
    shipped = function.__globals__
    for name, value in shipped.items():
        if not name.startswith("__"):
            namespace[name] = _rebound(value, namespace) if _shares(value, shipped) else value
    return _rebound(function, namespace)


def _shares(value: Any, shipped: dict[str, Any]) -> bool:
    return isinstance(value, types.FunctionType) and value.__globals__ is shipped


def _rebound(function: types.FunctionType, namespace: dict[str, Any]) -> types.FunctionType:
    code, closure = function.__code__, function.__closure__
    rebound = types.FunctionType(code, namespace, function.__name__, function.__defaults__, closure)
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    rebound.__dict__.update(function.__dict__)
    return rebound


def _end_cell_run(run_id: str) -> None:
    """A run the cell's code made active (``mlflow.log_metric`` starts one from
    ``MLFLOW_RUN_ID``) is left at the cell's end, so the next cell logs into its own."""
    fluent = sys.modules.get("mlflow.tracking.fluent")
    if fluent is None:
        return
    active = fluent.active_run()
    if active is not None and active.info.run_id == run_id:
        # The kernel sets the run's real status after the cell, and its header has the
        # run's links: MLflow's "View run" lines would only repeat them in the output.
        said = os.environ.get(NO_LINKS)
        os.environ[NO_LINKS] = "true"
        try:
            fluent.end_run()
        finally:
            if said is None:
                os.environ.pop(NO_LINKS, None)
            else:
                os.environ[NO_LINKS] = said


def _ticket() -> wire.Ticket:
    """The session's ticket: given in the environment (taken out of it at once, so the
    cells and what they start do not inherit the secret), or left by the kernel in the
    job's directory, waiting for it while the kernel starts listening."""
    given = os.environ.pop(wire.TICKET_ENV, None)
    if given is not None:
        return wire.Ticket.loads(given)
    path = JobDir.under(air_home(), os.environ["AIR_JOB_ID"]).session_ticket
    deadline = time.monotonic() + CONNECT_WAIT
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError):
            return wire.Ticket.loads(path.read_text())
        if time.monotonic() > deadline:
            raise TimeoutError(f"no session ticket at {path} after {CONNECT_WAIT:g} s")
        time.sleep(0.02)


def _connect(ticket: wire.Ticket) -> wire.Channel:
    """The kernel's channel (``Refused`` at once if what answers is not the kernel)."""
    deadline = time.monotonic() + CONNECT_WAIT
    while True:
        try:
            return wire.connect(ticket)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main() -> int:
    rank = int(os.environ["RANK"])
    channel = _connect(_ticket())
    channel.send(wire.Op.HELLO, rank=rank, pid=os.getpid(), host=socket.gethostname())
    keep_run_in_environment()
    hooks.install()
    rank_debugger.install()  # pdb.set_trace() as breakpoint()
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    namespace["__builtins__"] = __builtins__
    cells = _Cells()
    attempt_journal = os.environ.get(JOURNAL_ENV)
    attempt_perf = os.environ.get(PERF_DIR_ENV)
    out, err = _CountingStream(sys.stdout), _CountingStream(sys.stderr)
    sys.stdout, sys.stderr = out, err
    signal.signal(signal.SIGINT, cells.on_sigint)
    inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        while (message := _receive(channel)) is not None:
            if message["op"] == wire.Op.INTERRUPT.value:
                cells.interrupt()
            else:
                inbox.put(message)
        inbox.put(None)  # the kernel is gone

    threading.Thread(target=read, name="air-session-channel", daemon=True).start()
    try:
        while (message := inbox.get()) is not None and message["op"] == wire.Op.CELL.value:
            before = out.lines + err.lines
            _use_journal(message.get("journal") or attempt_journal)
            _use_perf(attempt_perf, message["number"])
            reply = _run(message, namespace, rank, cells)
            sys.stdout.flush()
            sys.stderr.flush()
            reply["lines"] = out.lines + err.lines - before
            with contextlib.suppress(OSError):  # the kernel is gone: the next get says so
                channel.send(wire.Op.DONE, **reply)
        if message is None:
            return _kernel_gone()
    except KeyboardInterrupt:
        return 130
    return 0


def _use_journal(path: str | None) -> None:
    """Where the cell's ``log_metrics`` go: the attempt's journal, or a cell's own."""
    if path is None:
        os.environ.pop(JOURNAL_ENV, None)
    else:
        os.environ[JOURNAL_ENV] = path


def _use_perf(attempt_perf: str | None, cell: int) -> None:
    """Each cell marks its steps in its own folder (its ``AttemptDir.late_cell``'s
    ``perf``), so its progress is its own; none where the attempt's is not here."""
    if not attempt_perf:
        return
    folder = AttemptDir(Path(attempt_perf).parent).late_cell(cell).perf
    try:
        folder.parent.mkdir(mode=0o700, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:  # a node without the attempt's directory: no marks
        os.environ.pop(PERF_DIR_ENV, None)
        return
    os.environ[PERF_DIR_ENV] = str(folder)


def _receive(channel: wire.Channel) -> dict[str, Any] | None:
    """The kernel's next message; None once it is gone, or once a frame that is not its
    own arrives (the channel cannot be trusted any more)."""
    try:
        return channel.receive()
    except wire.Refused as err:
        print(f"session channel: {err}; leaving", file=sys.stderr)
        return None


def _kernel_gone() -> int:
    """The kernel's channel closed with no stop: the kernel died. Leaving now would read as
    a job that succeeded; the supervisor, which watches the kernel, cancels the job within
    a second or so (a SIGINT here). Should it not, the rank leaves as failed."""
    time.sleep(KERNEL_GONE_WAIT)
    print("the kernel's channel closed without a stop; leaving", file=sys.stderr)
    return 1


def _run(message: dict[str, Any], namespace: dict[str, Any], rank: int, cells: _Cells) -> Any:
    number: int = message["number"]
    payload: dict[str, Any] = cloudpickle.loads(message["payload"])
    os.environ["MLFLOW_RUN_ID"] = message["run_id"]
    os.environ["AIR_CELL"] = str(number)
    reply: dict[str, Any] = {"number": number, "rank": rank, "ok": True, "interrupted": False}
    reply.update(error=None, result=None)
    with cells.lock:
        cells.running, cells.asked = True, False
    try:
        if payload["kind"] == "function":
            function = _in_namespace(payload["function"], namespace)
            value = function(*payload["args"], **payload["kwargs"])
        else:
            for alias, module in payload.get("modules", {}).items():
                namespace[alias] = importlib.import_module(module)
            namespace.update(payload.get("names", {}))
            value = run_cell(payload["source"], namespace, f"<air_session cell {number}>")
    except BaseException as err:  # the cell fails; the rank and its namespace stay
        with cells.lock:
            cells.running = False
        reply["ok"] = False
        reply["interrupted"] = interrupted(err)
        reply["error"] = user_traceback(err)
        sys.stderr.write("KeyboardInterrupt\n" if reply["interrupted"] else reply["error"])
        return reply
    finally:
        with cells.lock:
            cells.running = False
        # Ours again, should the cell have left SIGINT ignored (Lightning ignores it while
        # it shuts down after an interrupt): the next interrupt, or a cancel, must arrive.
        signal.signal(signal.SIGINT, cells.on_sigint)
        _end_cell_run(message["run_id"])
    if rank == 0:
        outputs = {n: namespace[n] for n in payload.get("outputs", []) if n in namespace}
        reply["result"] = _result(value, outputs)
    return reply


if __name__ == "__main__":
    exit_now(main())
