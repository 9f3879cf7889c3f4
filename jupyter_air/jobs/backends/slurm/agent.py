"""The node agent as a Slurm task: the job's ``srun`` starts one on each node, and it
calls the supervisor back over TCP (the session channel's sealed frames: both ends
prove they hold the attempt's secret before anything is unpickled), then answers its
calls one at a time. No shared disk is needed: the calls carry the payload, the
answers carry the ranks' records and results, as a Ray actor's do.

When the supervisor goes (its end of the connection closes), the agent stops its ranks
and exits: nothing of an attempt outlives its supervisor, even if Slurm's step does.

When Slurm ends the step (a node taken away, a preemption, ``scancel``), the agent's
SIGTERM is passed on to its ranks (they run in sessions of their own, which Slurm's
process tracking may not reach), and the agent stays to tell the supervisor so, with
their exit codes, until Slurm's SIGKILL (``KillWait`` later).
"""

from __future__ import annotations

import enum
import os
import signal
import socket
import sys
import time
from dataclasses import asdict
from typing import Any

from ....status import Outcome
from ...node.agent import NodeAgent
from ...node.launch import NodeLaunch
from ...node.outcome import AttemptEnd
from ...sessions.wire import Channel, Refused, Ticket, connect
from .commands import rank_env

#: The variable that gives an agent its ticket; removed from its environment at once.
TICKET_ENV = "AIR_SLURM_AGENT_TICKET"
#: Seconds an agent tries to reach its supervisor (a node's first start may be slow).
CONNECT_WAIT = 120.0
#: Seconds the ranks get to end once the supervisor is gone.
ORPHAN_WAIT = 15.0
MAIN = "jupyter_air.jobs.backends.slurm.agent"


class AgentOp(enum.StrEnum):
    """What a frame between a supervisor and a node agent says."""

    HELLO = "hello"  # agent -> supervisor: {"node", "slurm_job", "step"}
    CALL = "call"  # supervisor -> agent: {"method", "args"}
    ANSWER = "answer"  # agent -> supervisor: {"value"} or {"error"}


#: The calls an agent answers: ``NodeAgent``'s methods, nothing else.
METHODS = frozenset(
    {"describe", "clock", "start", "poll", "stacks", "sample_now", "stop", "result_files", "finish"}
)


class SlurmNodeAgent(NodeAgent):
    """``NodeAgent``, naming its node as Slurm does (``SLURMD_NODENAME``), and saying
    when Slurm ended its task."""

    def __init__(self, metrics_interval: float, name: str, ip: str) -> None:
        super().__init__(metrics_interval)
        self._name, self._ip = name, ip
        #: Set by the SIGTERM handler, which runs on the thread that serves the calls.
        self._ended: AttemptEnd | None = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "node_id": self._name, "ip": self._ip}

    def ended_by_slurm(self, sig: signal.Signals) -> None:
        """Slurm signalled this task to end: the ranks go, as after a peer's failure."""
        message = f"its task was ended by Slurm ({sig.name})"
        if self._ended is None:
            self._ended = AttemptEnd(Outcome.FAILED, message=message, failed_at=time.time())
        self.stop(False, message)

    def start(self, launch: NodeLaunch) -> None:
        if self._ended is not None:
            raise RuntimeError(f"{self._ended.message} before its ranks started")
        super().start(launch)
        if self._ended is not None:  # signalled while they started: they go at once
            self.stop(False, str(self._ended.message))

    def poll(self) -> dict[str, Any]:
        """``NodeAgent.poll``; once Slurm ended the task, that is this node's failure at
        once, and its outcome once the ranks have exited, with their codes."""
        report = super().poll()
        ended = self._ended
        if ended is not None:
            report["failing"] = asdict(ended)
            if report["outcome"] is not None:
                codes = report["outcome"]["exit_codes"]
                report["outcome"] = {**asdict(ended), "exit_codes": codes}
        return report


def serve(channel: Channel, agent: NodeAgent) -> bool:
    """Answer the supervisor's calls until it closes the connection; whether it asked
    for ``finish`` (the attempt's normal end)."""
    finished = False
    while (message := channel.receive()) is not None:
        method = message.get("method")
        if message.get("op") != AgentOp.CALL or method not in METHODS:
            channel.send(AgentOp.ANSWER, error=f"not a call of a node agent: {method!r}")
            continue
        try:
            value = getattr(agent, method)(*message.get("args", ()))
        except Exception as err:
            channel.send(AgentOp.ANSWER, error=f"{type(err).__name__}: {err}")
        else:
            channel.send(AgentOp.ANSWER, value=value)
        finished = finished or method == "finish"
    return finished


def _reach(ticket: Ticket) -> Channel:
    deadline = time.monotonic() + CONNECT_WAIT
    while True:
        try:
            return connect(ticket)
        except (OSError, Refused):  # not listening yet, or a caller ahead of us was slow
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    """``python -m jupyter_air.jobs.backends.slurm.agent METRICS_INTERVAL``, as a task
    of the job's ``srun``."""
    ticket = Ticket.loads(os.environ.pop(TICKET_ENV))
    slurm = dict(os.environ)
    os.environ.clear()
    os.environ.update(rank_env(slurm))
    try:
        channel = _reach(ticket)
    except (OSError, Refused) as err:
        print(f"[air] node agent: cannot reach the supervisor: {err}", file=sys.stderr)
        return 1
    here = channel.sock.getsockname()[0]  # this node's address on the supervisor's route
    name = slurm.get("SLURMD_NODENAME") or socket.gethostname()
    agent = SlurmNodeAgent(float(argv[0]), name, here)
    signal.signal(signal.SIGTERM, lambda signum, _: agent.ended_by_slurm(signal.Signals(signum)))
    channel.send(
        AgentOp.HELLO,
        node=int(slurm.get("SLURM_NODEID", "0")),
        slurm_job=slurm.get("SLURM_JOB_ID"),
        step=slurm.get("SLURM_STEP_ID"),
    )
    finished = False
    try:
        finished = serve(channel, agent)
    except Refused as err:
        print(f"[air] node agent: {err}", file=sys.stderr)
    finally:
        channel.close()
        if not finished:  # the supervisor is gone: so are its ranks
            agent.stop(False, "the supervisor is gone")
            deadline = time.monotonic() + ORPHAN_WAIT
            while agent.started and agent.poll()["outcome"] is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            agent.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
