"""One attempt's nodes driven through their node agents, whatever carries the calls.

The supervisor places one node agent (``node.agent``) per node, tells each
the job's shape (node 0's address and port are MASTER_ADDR/MASTER_PORT for every rank),
then polls them: their records go to ``logs/node_N/rank_R.log``, their GPU samples to
the panel's node files, their system metrics to the supervisor's feed, their GPU
readings to the hints, as the local node's do. A failure on any node stops every node;
so do cancel and timeout. Whatever happens, the agents and what holds them are released.

A backend gives the placing and the channel: Ray's actors (``ray.nodes``), Slurm's
tasks that call back (``slurm.nodes``). This is the rest, once for both.

A node that fails as a whole (its agent gone or silent, or ended by the cluster) may be
the cluster's doing, and whichever node's agent went first is no clue: a cluster that
takes one node away ends its peers at the same moment. So the cluster is asked, within
seconds, what it did (``_cluster_word``), and a node it says it took is the attempt's
failure, its peers ended with it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import __version__
from ...job_dir import AttemptDir, JobDir
from ...paths import private_opener, write_private
from ...status import Outcome
from ...tracking.sampling import Sample
from ..node.hints import HintRecorder
from ..node.launch import NodeLaunch
from ..node.outcome import AttemptEnd, StopRule
from ..node.stacks import RankStacks
from ..sessions.wire import TICKET_ENV
from ..spec import JobKind, JobSpec
from .base import AttemptContext

log = logging.getLogger("jupyter_air.nodes")

#: Seconds between two polls of the agents.
POLL_INTERVAL = 0.2
#: Seconds for the agents to start and answer their first call.
AGENT_START_TIMEOUT = 120.0
#: An agent silent this long is taken for dead (a cluster may take longer to say so).
SILENCE_TIMEOUT = 30.0
#: Seconds the nodes get to stop (SIGINT 5 s, SIGTERM 3 s, then SIGKILL) before their
#: agents are killed, which kills their ranks too.
STOP_TIMEOUT = 15.0
#: Seconds the cluster gets to say what it did to the nodes (the user waits for it).
ASK_TIMEOUT = 2.0


class ClusterError(RuntimeError):
    """The cluster cannot run this attempt; the message says why."""

    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        #: Another attempt would meet the same refusal (unreachable, too small).
        self.final = final


class Cancelled(ClusterError):
    """The job was cancelled while waiting for the cluster."""


@dataclasses.dataclass(frozen=True)
class ClusterWord:
    """What a cluster says it did to an attempt: the nodes it took away (none when it
    ended the whole job: a preemption, its time limit), in its own words."""

    taken: list[int]
    said: str


class AgentNodes(abc.ABC):
    """Start, watch and stop one attempt's node agents (the backend's ``Nodes``)."""

    def __init__(
        self,
        spec: JobSpec,
        job_id: str,
        attempt: int,
        attempt_dir: Path,
        *,
        payload: bytes | None,
        extra_env: dict[str, str],
        on_metrics: Callable[[int, list[Sample]], None],
        hints: HintRecorder | None = None,
    ) -> None:
        self._spec = spec
        self._job_id = job_id
        self._attempt = attempt
        self._dir = AttemptDir(attempt_dir)
        self._payload = payload
        self._extra_env = extra_env
        self._on_metrics = on_metrics
        self._hints = hints
        self._hints_started: set[int] = set()
        self._last_output: dict[int, dict[int, float]] = {}
        self._cancel = threading.Event()
        self._rule = StopRule()
        #: What each agent said of its node (``NodeAgent.describe``), by node.
        self._nodes: list[dict[str, Any]] = []
        self._logs: dict[tuple[int, int], Any] = {}
        #: Whether the cluster was asked about a node's failure, and said nothing of it
        #: (it is asked once more when every node has ended).
        self._asked = False
        self._ask_again = False

    @classmethod
    def for_attempt(cls, attempt: AttemptContext, **extra: Any) -> AgentNodes:
        """The attempt's nodes, as the supervisor describes it to the backend."""
        spec = attempt.spec
        return cls(
            spec,
            attempt.job_id,
            attempt.attempt,
            attempt.files.attempt(attempt.attempt).path,
            payload=attempt.files.payload.read_bytes() if spec.kind is JobKind.PYTHON else None,
            extra_env=dict(attempt.env),
            on_metrics=attempt.on_metrics,
            hints=attempt.hints,
            **extra,
        )

    # -- what a backend gives ------------------------------------------------------

    @abc.abstractmethod
    def _place(self) -> int:
        """Bring up one agent per node (``Cancelled`` on a cancel, ``ClusterError`` when
        the cluster cannot); how many there are."""

    @abc.abstractmethod
    def _call(self, node: int, method: str, *args: Any) -> Any:
        """Ask the node's agent to run ``method``; a handle on its answer, at once."""

    @abc.abstractmethod
    def _ready(self, calls: list[Any], timeout: float) -> list[int]:
        """The indexes of the calls answered, waiting up to ``timeout`` for the first."""

    @abc.abstractmethod
    def _answer(self, call: Any) -> Any:
        """An answered call's value; an agent's failure or loss raises."""

    @abc.abstractmethod
    def _kill(self, node: int) -> None:
        """End the node's agent now (its ranks die with it)."""

    @abc.abstractmethod
    def _describe(self, node: int) -> str:
        """The node, as a user finds it on the cluster: ``node 1 (host-b, 10.0.0.2, …)``."""

    @abc.abstractmethod
    def _label(self, info: dict[str, Any]) -> str:
        """A node (what its agent said of it) in its cluster's words: ``Slurm node
        gpu-b``, ``Ray node 8c1e…``."""

    @abc.abstractmethod
    def _cluster_word(self) -> ClusterWord | None:
        """What the cluster says it did to this attempt's nodes, asked now, within
        ``ASK_TIMEOUT`` (an error when it does not answer); None when it took none."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Give back what holds the agents (a placement group, an allocation)."""

    # -- the attempt ---------------------------------------------------------------

    def cancel(self) -> None:
        self._cancel.set()
        self._rule.cancel()

    def run(self, timeout: float | None = None) -> AttemptEnd:
        try:
            self._introduce(self._place())
            self._start_all()
        except Cancelled as err:
            return AttemptEnd(Outcome.CANCELLED, message=str(err))
        except ClusterError as err:
            return AttemptEnd(Outcome.FAILED, message=str(err), final=err.final)
        except Exception as err:  # the cluster's own errors, named as its
            return AttemptEnd(Outcome.FAILED, message=self._cluster_error(err))
        try:
            self._rule.begin(timeout)
            return self._watch()
        finally:
            self._fetch_results()
            for f in self._logs.values():
                f.close()

    def _cluster_error(self, err: Exception) -> str:
        return reason(err)

    def _introduce(self, count: int) -> None:
        """Who each node is, its clock against this one's, the same version everywhere."""
        infos = self._gather([self._call(n, "describe") for n in range(count)], "did not start")
        sent = time.time()  # the agents are up: a round trip now takes milliseconds
        clocks = self._gather([self._call(n, "clock") for n in range(count)], "did not answer")
        received = time.time()
        for node, (info, clock) in enumerate(zip(infos, clocks, strict=True)):
            if info["version"] != __version__:
                raise ClusterError(
                    f"jupyter_air {info['version']} on node {node} ({info['hostname']}), "
                    f"{__version__} here: install the same version on every node",
                    final=True,
                )
            # The node's clock against this one's, to compare failure times across nodes.
            info["clock_offset"] = clock - (sent + received) / 2
        self._nodes = [
            {"node": i, **info, "label": self._label(info)} for i, info in enumerate(infos)
        ]
        shown = ("node", "node_id", "ip", "hostname", "label")
        self._dir.write_nodes([{k: n[k] for k in shown} for n in self._nodes])

    def _start_all(self) -> None:
        spec, head = self._spec, self._nodes[0]
        env = self._extra_env
        if spec.kind is JobKind.SESSION:
            env = {**env, TICKET_ENV: self._session_ticket()}
        calls = [
            self._call(
                node,
                "start",
                NodeLaunch(
                    job_id=self._job_id,
                    attempt=self._attempt,
                    node_rank=node,
                    nnodes=spec.compute.nnodes,
                    nproc_per_node=spec.compute.nproc_per_node,
                    master_addr=head["ip"],
                    master_port=head["port"],
                    max_restarts=spec.policy.max_retries,
                    env=env,
                    command=list(spec.program.command),
                    payload=self._payload,
                    working_dir=spec.program.working_dir,
                ),
            )
            for node in range(spec.compute.nnodes)
        ]
        self._gather(calls, "could not start its ranks")

    def _session_ticket(self) -> str:
        """A warm session's ticket (where its ranks reach the kernel, and its secret),
        which the kernel leaves in the job's directory as it starts listening, right
        after submitting: the nodes may not read that directory, so it goes with them."""
        path = JobDir(self._dir.path.parent).session_ticket
        deadline = time.monotonic() + AGENT_START_TIMEOUT
        while True:
            with contextlib.suppress(OSError):
                return path.read_text()
            if self._cancel.is_set():
                raise Cancelled("cancelled before the session's kernel listened")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the session's kernel did not listen in {AGENT_START_TIMEOUT:g} s"
                )
            time.sleep(0.05)

    def _gather(self, calls: list[Any], failing: str) -> list[Any]:
        """One answer per node, waiting at most AGENT_START_TIMEOUT, giving up at once
        on a cancel, and naming the node whose agent failed."""
        deadline = time.monotonic() + AGENT_START_TIMEOUT
        answered: set[int] = set()
        while len(answered) < len(calls) and time.monotonic() < deadline:
            if self._cancel.is_set():
                raise Cancelled("cancelled while the node agents started")
            waiting = [i for i in range(len(calls)) if i not in answered]
            found = self._ready([calls[i] for i in waiting], 0.5)
            answered.update(waiting[i] for i in found)
        answers = []
        for node, call in enumerate(calls):
            where = self._describe(node) if node < len(self._nodes) else f"node {node}"
            if node not in answered:
                raise ClusterError(f"{where}: its agent {failing} in {AGENT_START_TIMEOUT:g} s")
            try:
                answers.append(self._answer(call))
            except Exception as err:
                raise ClusterError(f"{where}: its agent {failing}: {reason(err)}") from err
        return answers

    # -- watching ------------------------------------------------------------------

    def _watch(self) -> AttemptEnd:
        rule = self._rule
        count = len(self._nodes)
        ends: dict[int, AttemptEnd] = {}
        pending: dict[int, tuple[Any, float]] = {}  # node -> (poll in flight, sent at)
        stop_sent = 0.0
        answered = dict.fromkeys(range(count), time.time())  # last answer, by node
        while len(ends) < count:
            round_started = time.monotonic()
            for node in range(count):
                if node not in ends and node not in pending:
                    pending[node] = (self._call(node, "poll"), time.monotonic())
            polled = list(pending)
            for index in self._ready([pending[n][0] for n in polled], POLL_INTERVAL):
                node = polled[index]
                call, _ = pending.pop(node)
                try:
                    report = self._answer(call)
                except Exception as err:
                    ends[node] = self._node_lost(node, f"died: {reason(err)}", answered)
                    self._failed(ends[node])
                    continue
                answered[node] = time.time()
                self._absorb(node, report)
                if report["outcome"] is not None:
                    ends[node] = self._located(node, AttemptEnd(**report["outcome"]))
                    if ends[node].status is Outcome.FAILED:
                        self._failed(ends[node])
                elif report["failing"] is not None:
                    self._failed(self._located(node, AttemptEnd(**report["failing"])))
            now = time.monotonic()
            for node, (_, sent) in list(pending.items()):
                if now - sent > SILENCE_TIMEOUT:
                    del pending[node]
                    silent = f"stopped answering for {SILENCE_TIMEOUT:g} s"
                    ends[node] = self._node_lost(node, silent, answered)
                    self._failed(ends[node])
                    self._kill(node)
            stop = rule.due()
            if stop is not None:
                failure = rule.failure
                why = f"stopped: {failure.message}" if failure is not None else str(stop.value)
                for node in range(count):  # a failing node is stopping already: no harm
                    if node not in ends:
                        self._call(node, "stop", stop.interrupts, why)
                stop_sent = now
            elif rule.stop is not None and now - stop_sent > STOP_TIMEOUT:
                for node in range(count):
                    if node not in ends:
                        ends[node] = self._node_lost(node, "did not stop in time", answered)
                        self._kill(node)
            # Agents answer in milliseconds: without this pause the loop would poll
            # hundreds of times a second, taking the CPU from the ranks.
            time.sleep(max(0.0, round_started + POLL_INTERVAL - time.monotonic()))
        if self._ask_again:  # its word may have come late: a node's death takes seconds to see
            self._ask_cluster()
        return rule.end([code for node in sorted(ends) for code in ends[node].exit_codes])

    def _failed(self, end: AttemptEnd) -> None:
        """A failure, for the stop rule; one of a whole node (no rank of its own failed:
        its agent went, or the cluster ended it) may be the cluster's doing: asked."""
        self._rule.failed(end)
        if end.failed_rank is None and not self._asked:
            self._ask_cluster()

    def _ask_cluster(self) -> None:
        """The cluster's word on the nodes, which, when it took some, is the attempt's
        failure: those nodes named, their peers ended with them."""
        self._asked, self._ask_again = True, False
        try:
            word = self._cluster_word()
        except Exception as err:  # a cluster that does not answer is not asked again
            log.warning("the cluster did not say what became of the nodes: %s", reason(err))
            return
        if word is None:
            self._ask_again = True
            return
        said, peers = word.said, [n for n in range(len(self._nodes)) if n not in word.taken]
        if word.taken and peers:
            said += f"; {_ended_with(peers, self._nodes, len(word.taken))}"
        self._rule.blame(AttemptEnd(Outcome.FAILED, message=said, failed_at=time.time()))

    def _absorb(self, node: int, report: dict[str, Any]) -> None:
        for rank, data in report["logs"].items():
            key = (node, rank)
            if key not in self._logs:
                path = self._dir.rank_log(node, rank)
                path.parent.mkdir(parents=True, exist_ok=True)
                self._logs[key] = open(path, "ab", opener=private_opener)  # noqa: SIM115
            self._logs[key].write(data)
            self._logs[key].flush()
        if report["gpu"] is not None:
            self._dir.write_gpu(node, report["gpu"])
        if report["metrics"]:
            self._on_metrics(node, self._on_this_clock(node, report["metrics"]))
        self._feed_hints(node, report["hints"])

    def _feed_hints(self, node: int, report: dict[str, Any]) -> None:
        """The node's GPU readings into the attempt's hints, as the local backend's."""
        if self._hints is None:
            return
        offset = self._nodes[node]["clock_offset"]
        self._last_output[node] = {r: t - offset for r, t in report["last_output"].items()}
        if node not in self._hints_started:
            self._hints_started.add(node)
            self._hints.start(report["rank_gpus"], lambda: self._last_output[node], node)
        for readings in report["samples"]:
            self._hints.on_sample(readings, node)

    def _on_this_clock(self, node: int, samples: list[Sample]) -> list[Sample]:
        """A node's samples at this machine's times (a session's cells are timed here)."""
        offset = self._nodes[node]["clock_offset"]
        return [sample.shifted(offset) for sample in samples]

    def stacks(self) -> list[RankStacks]:
        """Every node's running ranks' stacks, taken by its node agent at once."""
        calls = [self._call(node, "stacks", node) for node in range(len(self._nodes))]
        found = self._gather(calls, "did not take its ranks' stacks")
        return [RankStacks(**entry) for node_stacks in found for entry in node_stacks]

    def sample_now(self) -> None:
        """Every node takes a metrics sample at once, sent with its next poll."""
        for node in range(len(self._nodes)):
            self._call(node, "sample_now")

    def _node_lost(self, node: int, what: str, answered: dict[int, float]) -> AttemptEnd:
        """A node gone: it went after its last answer, before its peers' collectives broke
        (their failures are its consequence, so they must not come first)."""
        nproc = self._spec.compute.nproc_per_node
        return AttemptEnd(
            Outcome.FAILED,
            [None] * nproc,
            message=f"{self._describe(node)} {what}",
            failed_at=answered[node],
        )

    def _located(self, node: int, end: AttemptEnd) -> AttemptEnd:
        """A node's end, on this machine's clock, its failure saying where: a rank's
        where it ran, the node's own (its agent's) which node."""
        if end.failed_at is not None:
            end.failed_at -= self._nodes[node]["clock_offset"]
        if end.status is Outcome.FAILED and end.failed_rank is not None:
            end.message = f"{end.message or 'failed'} on {self._describe(node)}"
        elif end.status is Outcome.FAILED:
            end.message = f"{self._describe(node)}: {end.message or 'failed'}"
        return end

    # -- releasing -----------------------------------------------------------------

    def _fetch_results(self) -> None:
        """Rank 0's value and the tracebacks, from nodes that may not share this disk."""
        for node in range(len(self._nodes)):
            try:
                files = self._wait_one(self._call(node, "result_files"))
            except Exception as err:  # a dead node's message says so already
                log.warning("no result files from node %d: %s", node, reason(err))
                continue
            for name, data in files.items():
                write_private(self._dir.path / name, data)

    def _wait_one(self, call: Any) -> Any:
        """One call's answer, or ``TimeoutError`` after SILENCE_TIMEOUT."""
        if not self._ready([call], SILENCE_TIMEOUT):
            raise TimeoutError(f"no answer in {SILENCE_TIMEOUT:g} s")
        return self._answer(call)

    def close(self) -> None:
        """The nodes' last metrics, then the agents and what holds them go."""
        finishing = {node: self._call(node, "finish") for node in range(len(self._nodes))}
        for node, call in finishing.items():
            try:
                samples = self._wait_one(call)
            except Exception as err:
                log.warning("node %d: last metrics not read: %s", node, reason(err))
                continue
            if samples:
                self._on_metrics(node, self._on_this_clock(node, samples))
        self._release()


def _ended_with(peers: list[int], nodes: list[dict[str, Any]], taken: int) -> str:
    """``node 0 (Slurm node gpu-a) was ended with it``: the peers of the nodes taken."""
    named = ", ".join(f"{n} ({nodes[n]['label']})" for n in peers)
    them = "it" if taken == 1 else "them"
    if len(peers) == 1:
        return f"node {named} was ended with {them}"
    return f"nodes {named} were ended with {them}"


def reason(err: BaseException, limit: int = 400) -> str:
    """An error on one line: a cluster's first lines say what died and why (node died,
    out of memory, an import that failed on the node)."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    text = text or type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
