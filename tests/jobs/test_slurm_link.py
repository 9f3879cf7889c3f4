"""The supervisor's end of a Slurm node agent's connection (``slurm.nodes._Link``),
against a fake agent on a socket pair: answers reach their calls in order, a large
call and a large answer cross without a deadlock, and a lost agent fails what waits."""

from __future__ import annotations

import concurrent.futures
import socket
import threading
from collections.abc import Iterator

import pytest

from jupyter_air.jobs.backends.slurm.agent import AgentOp
from jupyter_air.jobs.backends.slurm.nodes import AgentGone, _Link
from jupyter_air.jobs.sessions.wire import Channel

KEY = b"k" * 32
WAIT = 60.0


@pytest.fixture
def ends() -> Iterator[tuple[_Link, Channel]]:
    ours, theirs = socket.socketpair()
    link = _Link(0, Channel(ours, KEY, b"kernel", b"rank"))
    agent = Channel(theirs, KEY, b"rank", b"kernel")
    yield link, agent
    link.close()
    agent.close()


def serve(agent: Channel, answer: object = None) -> threading.Thread:
    """A fake agent: answers every call with (method, args) or ``answer``, in order."""

    def loop() -> None:
        while (call := agent.receive()) is not None:
            value = answer if answer is not None else (call["method"], call["args"])
            try:
                agent.send(AgentOp.ANSWER, value=value)
            except OSError:
                return

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_each_answer_reaches_its_own_call_in_order(ends: tuple[_Link, Channel]) -> None:
    link, agent = ends
    serve(agent)
    calls = [link.call("poll", (n,)) for n in range(50)]
    assert [c.result(WAIT) for c in calls] == [("poll", (n,)) for n in range(50)]


def test_a_large_call_and_a_large_answer_cross_without_a_deadlock(
    ends: tuple[_Link, Channel],
) -> None:
    link, agent = ends
    serve(agent, answer=b"x" * (32 << 20))  # every answer bigger than the socket's buffers
    payload = b"y" * (32 << 20)
    calls = [link.call("start", (payload,)) for _ in range(3)]
    for call in calls:
        assert len(call.result(WAIT)) == 32 << 20


def test_a_lost_agent_fails_what_waits_and_what_comes_after(
    ends: tuple[_Link, Channel],
) -> None:
    link, agent = ends
    waiting = link.call("poll", ())
    agent.close()
    with pytest.raises(AgentGone, match="its agent exited"):
        waiting.result(WAIT)
    later = link.call("poll", ())
    assert isinstance(later.exception(WAIT), AgentGone)


def test_an_error_the_agent_reports_fails_only_its_call(ends: tuple[_Link, Channel]) -> None:
    link, agent = ends

    def answer() -> None:
        agent.receive()
        agent.send(AgentOp.ANSWER, error="ValueError: bad")
        agent.receive()
        agent.send(AgentOp.ANSWER, value=1)

    threading.Thread(target=answer, daemon=True).start()
    first, second = link.call("stacks", (0,)), link.call("poll", ())
    with pytest.raises(RuntimeError, match="ValueError: bad"):
        first.result(WAIT)
    assert second.result(WAIT) == 1
    assert concurrent.futures.wait([first, second], WAIT).not_done == set()
