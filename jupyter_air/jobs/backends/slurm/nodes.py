"""The slurm backend: one attempt's ranks across the nodes of a Slurm allocation.

The supervisor listens on this machine's address that faces the cluster (one address,
never all), then runs one ``srun``: a task per node, each a node agent
(``slurm.agent``) that calls back with the attempt's secret. Outside an allocation that
``srun`` asks for the job's own (it waits in the queue: the job says PENDING with
Slurm's reason meanwhile); inside one (``salloc``, a server started by ``sbatch``) it
runs as a step there. The rest (the shape, the polls, the stop rule) is
``AgentNodes``': a node lost is the supervisor's to act on (it names the node first,
then stops the others), so Slurm is not asked to kill a step's tasks when one exits
(no ``--kill-on-bad-exit``). When a node fails as a whole, Slurm is asked what it did
(``sinfo``, ``scontrol show job``): a node it took away (down, drained, failing, not
responding) is named with its state and Slurm's reason, whichever node's agent went
first; a job it ended (preempted, its time limit) is said so. At the end the agents
are told to finish, the connections close, and ``srun`` ends with them; one that does
not is cancelled with ``scancel``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from ....paths import private_opener
from ...node.ranks import terminate_with_parent
from ...sessions.wire import Channel, Refused, Ticket, accept, listen_tcp
from ..agents import (
    AGENT_START_TIMEOUT,
    ASK_TIMEOUT,
    AgentNodes,
    Cancelled,
    ClusterError,
    ClusterWord,
)
from . import commands
from .agent import MAIN, TICKET_ENV, AgentOp
from .settings import SlurmSettings

METRICS_INTERVAL = float(os.environ.get("AIR_SYSTEM_METRICS_INTERVAL", "10"))
#: Seconds between two looks at the queue while the allocation waits.
QUEUE_POLL = 1.0
#: Seconds between two looks for agents that called back (each handshake has a thread).
ACCEPT_POLL = 0.05
#: Seconds ``srun`` gets to end once its agents were told, before ``scancel``: more
#: than an orphaned agent's wait for its ranks (``agent.ORPHAN_WAIT``).
SRUN_EXIT_WAIT = 20.0
#: Settings the backend adds to the submitter's (``SlurmBackend.prepare``).
PLACED = ("within", "host")


class AgentGone(RuntimeError):
    """A node agent's connection closed before it answered."""


class _Link:
    """One node agent's connection: calls go out in order, a reader thread hands each
    answer to the oldest call waiting (the agent answers one call at a time).

    Two locks: ``_sending`` keeps a call's place in line and its frame together (across
    the socket's write, which may block on a large payload); ``_state`` guards the line
    and is never held across I/O, so the reader always drains answers meanwhile (were it
    held, an agent blocked writing a large answer would never read our frame)."""

    def __init__(self, node: int, channel: Channel) -> None:
        self.node = node
        self._channel = channel
        self._waiting: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        self._sending = threading.Lock()
        self._state = threading.Lock()
        self._gone: str | None = None
        threading.Thread(target=self._read, name=f"air-slurm-node-{node}", daemon=True).start()

    def call(self, method: str, args: tuple[Any, ...]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._sending:
            with self._state:
                gone = self._gone
                if gone is None:
                    self._waiting.append(future)
            if gone is None:
                try:
                    self._channel.send(AgentOp.CALL, method=method, args=args)
                    return future
                except BaseException as err:  # nothing sent: no answer may come for it
                    with self._state:
                        if future in self._waiting:
                            self._waiting.remove(future)
                        self._gone = gone = self._gone or f"a call could not be sent: {err!r}"
        _fail(future, AgentGone(gone))
        return future

    def _read(self) -> None:
        why = "its agent exited"
        try:
            while (message := self._channel.receive()) is not None:
                with self._state:
                    future = self._waiting.popleft() if self._waiting else None
                if future is None:
                    continue  # nothing asked for it: ignored
                if "error" in message:
                    _fail(future, RuntimeError(str(message["error"])))
                else:
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        future.set_result(message.get("value"))
        except Refused as err:
            why = str(err)
        except Exception as err:
            why = f"its answer could not be read: {err!r}"
        with self._state:
            self._gone = self._gone or why
            waiting, self._waiting = self._waiting, collections.deque()
        for future in waiting:
            _fail(future, AgentGone(self._gone))

    def close(self) -> None:
        with self._state:
            self._gone = self._gone or "closed by the supervisor"
        with contextlib.suppress(OSError):
            self._channel.sock.shutdown(socket.SHUT_RDWR)
        self._channel.close()


def _fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Fail a call not yet settled (a send that failed and the reader's end may race)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)


class SlurmNodes(AgentNodes):
    """One ``srun`` task per node, calling back; ``srun`` and its allocation go at
    ``close``."""

    def __init__(self, *args: Any, on_queued: Callable[[str | None], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_queued = on_queued
        settings = dict(self._spec.backend.settings)
        self._within: str | None = settings.get("within")
        self._host = str(settings.get("host") or "127.0.0.1")
        self._settings = SlurmSettings.model_validate(
            {k: v for k, v in settings.items() if k not in PLACED}
        )
        self._links: list[_Link] = []
        self._srun: subprocess.Popen[bytes] | None = None
        self._launcher_log: IO[bytes] | None = None
        self._slurm_job: str | None = None
        self._step: str | None = None
        self._name = f"air-{self._job_id}-{self._attempt}"

    # -- placing -------------------------------------------------------------------

    def _place(self) -> int:
        nnodes = self._spec.compute.nnodes
        server, address = listen_tcp(self._host)
        ticket = Ticket.new(address)
        try:
            self._launch(ticket)
            channels = self._wait_for_agents(server, ticket, nnodes)
        finally:
            server.close()
        self._links = [_Link(node, channels[node]) for node in range(nnodes)]
        return nnodes

    def _launch(self, ticket: Ticket) -> None:
        nnodes, nproc = self._spec.compute.nnodes, self._spec.compute.nproc_per_node
        argv = [
            "srun",
            f"--nodes={nnodes}",
            f"--ntasks={nnodes}",
            "--ntasks-per-node=1",
            f"--job-name={self._name}",
            "--input=none",
            *self._settings.srun_args(nproc),
        ]
        if self._within is not None:
            argv += [f"--jobid={self._within}", "--overlap"]
        argv += [sys.executable, "-m", MAIN, repr(METRICS_INTERVAL)]
        env = commands.clean_env(os.environ, keep_allocation=self._within is not None)
        env[TICKET_ENV] = ticket.dumps()
        cwd = self._spec.program.working_dir
        self._launcher_log = open(  # noqa: SIM115  (open while srun runs)
            self._dir.launcher_log, "ab", opener=private_opener
        )
        try:
            self._srun = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd if cwd and os.path.isdir(cwd) else None,
                stdin=subprocess.DEVNULL,
                stdout=self._launcher_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal to the supervisor's group is not srun's
                preexec_fn=terminate_with_parent,
            )
        except OSError as err:
            raise ClusterError(
                f"srun: {err.strerror}: {commands.INSTALL_HINT}", final=True
            ) from None

    def _wait_for_agents(
        self, server: socket.socket, ticket: Ticket, nnodes: int
    ) -> dict[int, Channel]:
        """Each node's agent, once it called back; the queue's word meanwhile."""
        channels: dict[int, Channel] = {}
        greeted: queue.Queue[tuple[int, Channel]] = queue.Queue()
        running_since: float | None = None
        said: str | None = None
        looked = time.monotonic()  # most allocations are granted within the first look's wait
        try:
            while len(channels) < nnodes:
                if self._cancel.is_set():
                    raise Cancelled("cancelled while waiting for Slurm")
                assert self._srun is not None
                if self._srun.poll() is not None:
                    raise self._srun_failed()
                if time.monotonic() - looked > QUEUE_POLL:
                    looked = time.monotonic()
                    state = self._queue_state()
                    line = state.line() if state is not None and state.waiting else None
                    if line != said:
                        said = line
                        self._on_queued(line)
                    if state is not None and not state.waiting and running_since is None:
                        running_since = time.monotonic()
                if running_since and time.monotonic() - running_since > AGENT_START_TIMEOUT:
                    raise ClusterError(
                        f"Slurm job {self._slurm_job or '?'} runs, but {nnodes - len(channels)} "
                        f"of its node agents did not call back to {ticket.address} in "
                        f"{AGENT_START_TIMEOUT:g} s: can the nodes reach this machine there?"
                    )
                if select.select([server], [], [], ACCEPT_POLL)[0]:
                    sock, _ = server.accept()  # its handshake on a thread: a silent
                    threading.Thread(  # caller must not hold up the agents
                        target=self._greet, args=(sock, ticket, greeted), daemon=True
                    ).start()
                while not greeted.empty():
                    node, channel = greeted.get()
                    channels[node] = channel
        except BaseException:
            for channel in channels.values():
                channel.close()
            raise
        finally:
            if said is not None:
                self._on_queued(None)
        return channels

    def _greet(
        self, sock: socket.socket, ticket: Ticket, greeted: queue.Queue[tuple[int, Channel]]
    ) -> None:
        """One caller's handshake and hello: an agent of this attempt, or closed."""
        try:
            channel = accept(sock, ticket.token)
            sock.settimeout(AGENT_START_TIMEOUT)
            hello = channel.receive()
            sock.settimeout(None)
        except (Refused, OSError):
            sock.close()  # not one of ours: the attempt's agents still may call
            return
        if hello is None or hello.get("op") != AgentOp.HELLO:
            sock.close()
            return
        self._slurm_job = hello.get("slurm_job") or self._slurm_job
        self._step = hello.get("step") or self._step
        greeted.put((int(hello["node"]), channel))

    def _queue_state(self) -> commands.QueueState | None:
        try:
            state = commands.queue_state(self._name, self._slurm_env())
        except commands.SlurmError:
            return None  # slurmctld busy: srun itself says if it gives up
        if state is not None:
            self._slurm_job = state.job_id
        return state

    def _srun_failed(self) -> ClusterError:
        assert self._srun is not None
        reason = commands.said(self._launcher_output()) or f"exited with {self._srun.returncode}"
        # Slurm refused the request itself: another attempt would be refused the same.
        refused = "Unable to allocate resources" in reason or "invalid" in reason.lower()
        return ClusterError(f"Slurm: {reason}", final=refused)

    def _launcher_output(self) -> str:
        with contextlib.suppress(OSError):
            return self._dir.launcher_log.read_text(errors="replace")[-4000:]
        return ""

    def _slurm_env(self) -> dict[str, str]:
        return commands.clean_env(os.environ, keep_allocation=self._within is not None)

    # -- the channel ---------------------------------------------------------------

    def _call(self, node: int, method: str, *args: Any) -> Any:
        return self._links[node].call(method, args)

    def _ready(self, calls: list[Any], timeout: float) -> list[int]:
        done, _ = concurrent.futures.wait(calls, timeout)
        return [i for i, call in enumerate(calls) if call in done]

    def _answer(self, call: Any) -> Any:
        try:
            return call.result(timeout=0)
        except AgentGone as err:
            said = commands.said(self._launcher_output())
            raise AgentGone(f"{err} (srun: {said})" if said else str(err)) from None

    def _kill(self, node: int) -> None:
        self._links[node].close()  # its agent reads the end, and stops its ranks

    def _describe(self, node: int) -> str:
        info = self._nodes[node]
        return f"node {node} ({info['node_id']}, {info['ip']}, Slurm job {self._slurm_job})"

    def _cluster_error(self, err: Exception) -> str:
        return f"Slurm: {err}"

    def _label(self, info: dict[str, Any]) -> str:
        return f"Slurm node {info['node_id']}"

    def _cluster_word(self) -> ClusterWord | None:
        """The nodes Slurm took away (down, drained, failing) or that stopped answering
        it, with its reasons; else how it ended the job (preempted, its time limit)."""
        deadline = time.monotonic() + ASK_TIMEOUT
        env = self._slurm_env()
        names = [str(info["node_id"]) for info in self._nodes]
        states = commands.node_states(names, env, ASK_TIMEOUT)
        seen = {node: states[name] for node, name in enumerate(names) if name in states}
        for chosen, verb in (
            ([n for n, state in seen.items() if state.taken], "was taken away by Slurm"),
            ([n for n, state in seen.items() if state.silent], "stopped answering Slurm"),
        ):
            if chosen:
                said = [f"{self._describe(n)} {verb} ({seen[n].words()})" for n in chosen]
                return ClusterWord(chosen, "; ".join(said))
        ended = self._job_ended(env, deadline) or commands.step_cancelled(self._launcher_output())
        if ended is None:
            return None
        return ClusterWord([], f"Slurm ended Slurm job {self._slurm_job or '?'}: {ended}")

    def _job_ended(self, env: dict[str, str], deadline: float) -> str | None:
        """How Slurm ended the job, as ``scontrol`` says while it has it."""
        if self._slurm_job is None:
            return None
        try:
            return commands.ended_job(self._slurm_job, env, max(0.1, deadline - time.monotonic()))
        except commands.SlurmError as err:
            if "invalid job id" in str(err).lower():  # gone already: its step's output says
                return None
            raise

    # -- releasing -----------------------------------------------------------------

    def _release(self) -> None:
        for link in self._links:
            link.close()
        srun = self._srun
        if srun is not None:
            if not self._links:  # its request, queued or not, is withdrawn
                srun.terminate()
            if not _ended(srun, SRUN_EXIT_WAIT):
                self._scancel()
                if not _ended(srun, SRUN_EXIT_WAIT):
                    srun.kill()
                    srun.wait()
        if srun is None or srun.returncode != 0:
            self._scancel()  # a job still queued, or left behind by an srun that died
        if self._launcher_log is not None:
            self._launcher_log.close()

    def _scancel(self) -> None:
        target = self._slurm_job
        if target is None:
            state = self._queue_state()
            target = state.job_id if state is not None else None
        if target is None:
            return
        if self._within is not None:  # a step of the notebook's own allocation: only it
            if self._step is None:
                return
            target = f"{target}.{self._step}"
        with contextlib.suppress(commands.SlurmError):
            commands.cancel(target, self._slurm_env())


def _ended(process: subprocess.Popen[bytes], wait: float) -> bool:
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        return False
    return True
