"""The ray backend: one attempt's ranks across the nodes of a Ray cluster.

The supervisor is the Ray driver. It reserves one bundle per node (a placement group,
STRICT_SPREAD), places a node agent on each, tells each agent the job's shape (node 0's
address and port are MASTER_ADDR/MASTER_PORT for every rank), then polls the agents:
their records go to ``logs/node_N/rank_R.log``, their GPU samples to the panel's node
files, their system metrics to the supervisor's feed (``system_feed``), as the local
node's do. A failure on any node stops every node; so do
cancel and timeout. Whatever happens, the agents and the placement group are released.
It has ``LocalNode``'s interface (the local backend's in-process node agent): ``run``,
``cancel``, ``sample_now``, ``close``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .... import __version__
from ....job_dir import AttemptDir, JobDir
from ....paths import private_opener, write_private
from ....status import Outcome
from ....tracking.sampling import Sample
from ...sessions.wire import TICKET_ENV
from ...spec import JobKind, JobSpec
from ...supervision.hints import HintRecorder
from ...supervision.node_launch import NodeLaunch
from ...supervision.outcome import AttemptEnd, StopRule
from ...supervision.stacks import RankStacks
from .agent import NodeAgent
from .cluster import (
    Cancelled,
    ClusterError,
    alive_nodes,
    check_capacity,
    connect,
    node_shape,
    reserve,
    resolve_address,
)

log = logging.getLogger("jupyter_air.ray")

#: Seconds between two polls of the agents.
POLL_INTERVAL = 0.2
#: Seconds for the agents to start and answer their first call.
AGENT_START_TIMEOUT = 120.0
#: An agent silent this long is taken for dead (Ray may take longer to say so).
SILENCE_TIMEOUT = 30.0
#: Seconds the nodes get to stop (SIGINT 5 s, SIGTERM 3 s, then SIGKILL) before their
#: agents are killed, which kills their ranks too.
STOP_TIMEOUT = 15.0
METRICS_INTERVAL = float(os.environ.get("AIR_SYSTEM_METRICS_INTERVAL", "10"))


class RayNodes:
    """Start, watch and stop one attempt's node agents."""

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
        self._agents: list[Any] = []
        self._nodes: list[dict[str, Any]] = []
        self._group: Any = None
        self._logs: dict[tuple[int, int], Any] = {}

    def cancel(self) -> None:
        self._cancel.set()
        self._rule.cancel()

    def run(self, timeout: float | None = None) -> AttemptEnd:
        address = resolve_address(self._spec.backend.settings.get("address"))
        try:
            self._place(address)
            self._start_all()
        except Cancelled as err:
            return AttemptEnd(Outcome.CANCELLED, message=str(err))
        except ClusterError as err:
            return AttemptEnd(Outcome.FAILED, message=str(err), final=err.final)
        except Exception as err:  # Ray's own errors, named as Ray's
            return AttemptEnd(Outcome.FAILED, message=f"Ray: {_reason(err)}")
        try:
            self._rule.begin(timeout)
            return self._watch()
        finally:
            self._fetch_results()
            for f in self._logs.values():
                f.close()

    # -- placing -------------------------------------------------------------------

    def _place(self, address: str) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        compute = self._spec.compute
        if not ray.is_initialized():
            connect(address)
        nodes = alive_nodes()
        shape = node_shape(compute.nproc_per_node, nodes)
        check_capacity(address, compute.nnodes, shape, nodes)
        name = f"air-{self._job_id}-{self._attempt}"
        self._group = reserve(compute.nnodes, shape, name, self._cancel)
        agent_class = ray.remote(NodeAgent)
        bundle = shape.bundle()
        for node in range(compute.nnodes):
            strategy = PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=node
            )
            self._agents.append(
                agent_class.options(
                    num_cpus=bundle["CPU"],
                    num_gpus=bundle.get("GPU", 0),
                    scheduling_strategy=strategy,
                    max_restarts=0,
                    name=f"air-{self._job_id}-{self._attempt}-node-{node}",
                ).remote(METRICS_INTERVAL)
            )
        infos = self._gather([a.describe.remote() for a in self._agents], "did not start")
        sent = time.time()  # the agents are up: a round trip now takes milliseconds
        clocks = self._gather([a.clock.remote() for a in self._agents], "did not answer")
        received = time.time()
        for info, clock in zip(infos, clocks, strict=True):
            if info["version"] != __version__:
                raise ClusterError(
                    f"jupyter_air {info['version']} on Ray node {info['node_id'][:12]}, "
                    f"{__version__} here: install the same version on every node",
                    final=True,
                )
            # The node's clock against this one's, to compare failure times across nodes.
            info["clock_offset"] = clock - (sent + received) / 2
        self._nodes = [{"node": i, **info} for i, info in enumerate(infos)]
        shown = ("node", "node_id", "ip", "hostname")
        self._dir.write_nodes([{k: n[k] for k in shown} for n in self._nodes])

    def _start_all(self) -> None:
        spec, head = self._spec, self._nodes[0]
        env = self._extra_env
        if spec.kind is JobKind.SESSION:
            env = {**env, TICKET_ENV: self._session_ticket()}
        launches = [
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
            )
            for node in range(spec.compute.nnodes)
        ]
        calls = [a.start.remote(launch) for a, launch in zip(self._agents, launches, strict=True)]
        self._gather(calls, "could not start its ranks")

    def _session_ticket(self) -> str:
        """A warm session's ticket (where its ranks reach the kernel, and its secret),
        which the kernel leaves in the job's directory as it starts listening, right
        after submitting: the nodes cannot read that directory, so it goes with them."""
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
        import ray

        deadline = time.monotonic() + AGENT_START_TIMEOUT
        pending = list(calls)
        while pending and time.monotonic() < deadline:
            if self._cancel.is_set():
                raise Cancelled("cancelled while the node agents started")
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        answers = []
        for node, call in enumerate(calls):
            where = self._describe(node) if node < len(self._nodes) else f"node {node}"
            if call in pending:
                raise ClusterError(f"{where}: its agent {failing} in {AGENT_START_TIMEOUT:g} s")
            try:
                answers.append(ray.get(call, timeout=SILENCE_TIMEOUT))
            except Exception as err:
                raise ClusterError(f"{where}: its agent {failing}: {_reason(err)}") from err
        return answers

    # -- watching ------------------------------------------------------------------

    def _watch(self) -> AttemptEnd:
        import ray

        rule = self._rule
        ends: dict[int, AttemptEnd] = {}
        pending: dict[int, tuple[Any, float]] = {}  # node -> (poll in flight, sent at)
        stop_sent = 0.0
        answered = dict.fromkeys(range(len(self._agents)), time.time())  # last answer, by node
        while len(ends) < len(self._agents):
            round_started = time.monotonic()
            for node, agent in enumerate(self._agents):
                if node not in ends and node not in pending:
                    pending[node] = (agent.poll.remote(), time.monotonic())
            refs = {ref.hex(): node for node, (ref, _) in pending.items()}
            ready, _ = ray.wait(
                [ref for ref, _ in pending.values()],
                num_returns=len(pending),
                timeout=POLL_INTERVAL,
            )
            for ref in ready:
                node = refs[ref.hex()]
                del pending[node]
                try:
                    report = ray.get(ref, timeout=SILENCE_TIMEOUT)
                except Exception as err:
                    ends[node] = self._node_lost(node, f"died: {_reason(err)}", answered)
                    rule.failed(ends[node])
                    continue
                answered[node] = time.time()
                self._absorb(node, report)
                if report["outcome"] is not None:
                    ends[node] = self._located(node, AttemptEnd(**report["outcome"]))
                    if ends[node].status is Outcome.FAILED:
                        rule.failed(ends[node])
                elif report["failing"] is not None:
                    rule.failed(self._located(node, AttemptEnd(**report["failing"])))
            now = time.monotonic()
            for node, (_, sent) in list(pending.items()):
                if now - sent > SILENCE_TIMEOUT:
                    del pending[node]
                    silent = f"stopped answering for {SILENCE_TIMEOUT:g} s"
                    ends[node] = self._node_lost(node, silent, answered)
                    rule.failed(ends[node])
                    ray.kill(self._agents[node])  # its ranks die with it
            stop = rule.due()
            if stop is not None:
                failure = rule.failure
                why = f"stopped: {failure.message}" if failure is not None else str(stop.value)
                self._stop_nodes(ends, stop.interrupts, why)
                stop_sent = now
            elif rule.stop is not None and now - stop_sent > STOP_TIMEOUT:
                for node in range(len(self._agents)):
                    if node not in ends:
                        ends[node] = self._node_lost(node, "did not stop in time", answered)
                        ray.kill(self._agents[node])
            # Agents answer in milliseconds: without this pause the loop would poll
            # hundreds of times a second, taking the CPU from the ranks.
            time.sleep(max(0.0, round_started + POLL_INTERVAL - time.monotonic()))
        return rule.end([code for node in sorted(ends) for code in ends[node].exit_codes])

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
        calls = [agent.stacks.remote(node) for node, agent in enumerate(self._agents)]
        found = self._gather(calls, "did not take its ranks' stacks")
        return [RankStacks(**entry) for node_stacks in found for entry in node_stacks]

    def sample_now(self) -> None:
        """Every node takes a metrics sample at once, sent with its next poll."""
        for agent in self._agents:
            agent.sample_now.remote()

    def _stop_nodes(self, outcomes: dict[int, AttemptEnd], interrupt_first: bool, why: str) -> None:
        """Every node still running (a failing node is stopping already: no harm)."""
        for node, agent in enumerate(self._agents):
            if node not in outcomes:
                agent.stop.remote(interrupt_first, why)

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
        """A node's end, on this machine's clock, a rank's failure saying where it ran."""
        if end.failed_at is not None:
            end.failed_at -= self._nodes[node]["clock_offset"]
        if end.status is Outcome.FAILED and end.failed_rank is not None:
            end.message = f"{end.message or 'failed'} on {self._describe(node)}"
        return end

    def _describe(self, node: int) -> str:
        info = self._nodes[node]
        return f"node {node} ({info['hostname']}, {info['ip']}, Ray node {info['node_id'][:12]})"

    # -- releasing -----------------------------------------------------------------

    def _fetch_results(self) -> None:
        """Rank 0's value and the tracebacks, from nodes that may not share this disk."""
        import ray

        for node, agent in enumerate(self._agents):
            try:
                files = ray.get(agent.result_files.remote(), timeout=SILENCE_TIMEOUT)
            except Exception as err:  # a dead node's message says so already
                log.warning("no result files from node %d: %s", node, _reason(err))
                continue
            for name, data in files.items():
                write_private(self._dir.path / name, data)

    def close(self) -> None:
        """The nodes' last metrics, then the agents and the placement group go."""
        import ray
        from ray.util.placement_group import remove_placement_group

        finishing = {node: agent.finish.remote() for node, agent in enumerate(self._agents)}
        for node, ref in finishing.items():
            try:
                samples = ray.get(ref, timeout=SILENCE_TIMEOUT)
            except Exception as err:
                log.warning("node %d: last metrics not read: %s", node, _reason(err))
                continue
            if samples:
                self._on_metrics(node, self._on_this_clock(node, samples))
        for agent in self._agents:
            ray.kill(agent)
        self._agents = []
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None


def _reason(err: BaseException, limit: int = 400) -> str:
    """Ray's error on one line: its first lines say what died and why (node died, out
    of memory, an import that failed on the node)."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    text = text or type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
