"""A job's directory, ``AIR_HOME/jobs/<id>/``: the one module that names its files.

::

    jobs/<id>/payload.pkl                 the pickled cell or function (python jobs)
    jobs/<id>/supervisor.log              the supervisor's own log
    jobs/<id>/session.sock                a warm session's channel (the kernel listens)
    jobs/<id>/session.ticket              where its ranks reach the kernel, and its secret
    jobs/<id>/session_cells.jsonl         a warm session's cells: number, run, start, end
    jobs/<id>/session_cell.json           its latest cell: running (no end yet) or ended
    jobs/<id>/attempt_K/result.pkl        rank 0's value (written whole: .tmp, then renamed)
    jobs/<id>/attempt_K/error_rank_R.txt  a failing rank's traceback
    jobs/<id>/attempt_K/hints.json        the efficiency hints now raised
    jobs/<id>/attempt_K/nodes.json        the nodes of a multi-node attempt
    jobs/<id>/attempt_K/gpu/node_N.json   node N's GPU sampler snapshot (multi-node)
    jobs/<id>/attempt_K/metrics.jsonl     rank 0's ``log_metrics`` journal (``tracking.journal``)
    jobs/<id>/attempt_K/metrics.shipped   how many bytes of it have landed in MLflow
    jobs/<id>/attempt_K/perf/rank-R.jsonl  rank R's step marks (``perf.marks``, AIR_PERF_DIR)
    jobs/<id>/attempt_K/flight/           the ranks' flight recorders, asked for (AIR_FLIGHT_DIR)
    jobs/<id>/attempt_K/tracking.json     what of the run waits for its tracking server, and why
    jobs/<id>/attempt_1/tracking_cell_N.json  the same for a warm session's cell N's own run
    jobs/<id>/attempt_K/late_run.json     a deferred attempt's run, made by its tail process
    jobs/<id>/attempt_1/cell_N/           a session's cell N run without its run (deferred):
                                          its journal, and its run once made; a
                                          warm session's cell N's step marks (perf/)
    jobs/<id>/attempt_K/logs/node_N/rank_R.log   rank R's records

A Ray node agent lays out its node's scratch directory the same way. The JSON files
are replaced whole (written beside, then renamed), so readers never see half of one;
a missing or unreadable file reads as "nothing yet".
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import write_private

PAYLOAD = "payload.pkl"
SUPERVISOR_LOG = "supervisor.log"
SESSION_SOCKET = "session.sock"
SESSION_TICKET = "session.ticket"
SESSION_CELLS = "session_cells.jsonl"
SESSION_CELL = "session_cell.json"
RESULT = "result.pkl"
HINTS = "hints.json"
NODES = "nodes.json"
#: What the cluster's own launcher said (a Slurm job's ``srun``).
LAUNCHER_LOG = "launcher.log"
LOGS = "logs"
GPU = "gpu"
METRICS_JOURNAL = "metrics.jsonl"
METRICS_SHIPPED = "metrics.shipped"
PERF = "perf"
TRACKING_BACKLOG = "tracking.json"
LATE_RUN = "late_run.json"
#: The checkpoint an attempt resumed from (``jobs.checkpoints``).
RESUMED = "resumed.json"
#: The complete checkpoints an attempt saved (``jobs.checkpoints.listing``).
CHECKPOINTS = "checkpoints.json"
#: ``stacks/<set>/``: a set of the ranks' stacks, its index and a file per rank.
STACKS = "stacks"
STACKS_INDEX = "stacks.json"


def stacks_file(rank: int) -> str:
    """The name of one rank's stacks in a set's folder."""
    return f"rank_{rank}.txt"


#: ``flight/``: a node's request for its ranks' flight recorders (``jobs.node.flight_recorder``),
#: each rank's mark that it answers, the answers by request; torch's own dump at a timeout.
FLIGHT = "flight"
FLIGHT_REQUEST = "request.json"
FLIGHT_TIMEOUT_DUMP = "timeout_dump_rank_"


def recorder_file(rank: int) -> str:
    """One rank's flight recorder, in a request's folder and in a set of stacks."""
    return f"rank_{rank}.fr.json"


def recorder_ready(rank: int) -> str:
    """The mark of a rank that answers requests for its flight recorder."""
    return f"rank_{rank}.ready"


_ATTEMPT = re.compile(r"attempt_(\d+)")
_CELL = re.compile(r"cell_(\d+)")
_NODE = re.compile(r"node_(\d+)")
_RANK_LOG = re.compile(r"rank_(\d+)\.log")
_ERROR = re.compile(r"error_rank_(\d+)\.txt")


@dataclass(frozen=True)
class RankLogFile:
    """One rank's log file of an attempt."""

    node: int
    rank: int
    path: Path


class AttemptDir:
    """``attempt_K/``: one attempt's logs, result, tracebacks, hints and nodes."""

    def __init__(self, path: Path, cell: int | None = None) -> None:
        self.path = path
        #: A warm session's cell whose own run this view records what waits of (its
        #: backlog); the attempt's files otherwise.
        self.cell = cell

    def __repr__(self) -> str:
        return f"AttemptDir({str(self.path)!r})"

    def for_cell(self, cell: int) -> AttemptDir:
        """The attempt's files, with cell ``cell``'s own backlog record."""
        return AttemptDir(self.path, cell)

    def late_cell(self, cell: int) -> AttemptDir:
        """A warm session's cell that ran before its run could be made (``tracking:
        deferred``, its server down): a journal of its own, whose lines are that run's,
        and the run once made (``late_run.json``), apart from the session's."""
        return AttemptDir(self.path / f"cell_{cell}", cell)

    def late_cells(self) -> list[AttemptDir]:
        """The ``late_cell`` folders there are (a warm session's cells' own), in order."""
        found = [
            (int(m.group(1)), p) for p in self.path.glob("cell_*") if (m := _CELL.fullmatch(p.name))
        ]
        return [AttemptDir(p, cell) for cell, p in sorted(found)]

    @property
    def number(self) -> int:
        match = _ATTEMPT.fullmatch(self.path.name)
        return int(match[1]) if match else 0

    def make(self) -> AttemptDir:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self

    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def result_partial(self) -> Path:
        """Where rank 0 writes its value before renaming it to ``result``."""
        return self.path / f"{RESULT}.tmp"

    def error(self, rank: int) -> Path:
        return self.path / f"error_rank_{rank}.txt"

    def result_files(self) -> list[Path]:
        """What the ranks leave for the kernel: rank 0's value and any traceback."""
        found = [p for p in self.path.glob("error_rank_*.txt") if _ERROR.fullmatch(p.name)]
        return ([self.result] if self.result.is_file() else []) + sorted(found)

    @property
    def hints(self) -> Path:
        return self.path / HINTS

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def node_logs(self, node: int) -> Path:
        return self.logs / f"node_{node}"

    def rank_log(self, node: int, rank: int) -> Path:
        return self.node_logs(node) / self.rank_log_name(rank)

    @staticmethod
    def rank_log_name(rank: int) -> str:
        return f"rank_{rank}.log"

    def rank_logs(self) -> list[RankLogFile]:
        """Every rank log of the attempt, by node, then rank."""
        found = []
        for path in self.logs.glob("node_*/rank_*.log"):
            node, rank = _NODE.fullmatch(path.parent.name), _RANK_LOG.fullmatch(path.name)
            if node and rank:
                found.append(RankLogFile(int(node[1]), int(rank[1]), path))
        return sorted(found, key=lambda f: (f.node, f.rank))

    def gpu(self, node: int) -> Path:
        return self.path / GPU / f"node_{node}.json"

    @property
    def metrics_journal(self) -> Path:
        return self.path / METRICS_JOURNAL

    @property
    def metrics_shipped(self) -> Path:
        return self.path / METRICS_SHIPPED

    @property
    def perf(self) -> Path:
        """The ranks' step marks, a file per rank (``AIR_PERF_DIR``; ``perf.marks``)."""
        return self.path / PERF

    @property
    def flight(self) -> Path:
        """Where the ranks of this node answer for their flight recorders (AIR_FLIGHT_DIR)."""
        return self.path / FLIGHT

    @property
    def tracking_backlog(self) -> Path:
        if self.cell is not None:
            return self.path / f"tracking_cell_{self.cell}.json"
        return self.path / TRACKING_BACKLOG

    def write_resumed(self, path: str, step: int | None) -> None:
        """The checkpoint this attempt starts from, for ``air get`` and the jobs API."""
        replace_json(self.path / RESUMED, {"path": path, "step": step})

    def read_resumed(self) -> tuple[str, int | None] | None:
        """(checkpoint, step) the attempt resumed from, if it did."""
        doc = read_json(self.path / RESUMED)
        if isinstance(doc, dict) and isinstance(doc.get("path"), str):
            step = doc.get("step")
            return doc["path"], step if isinstance(step, int) else None
        return None

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def write_late_run(self, run_id: str, experiment_id: str) -> None:
        """The run a deferred attempt's tail made (the job store adopts it when read)."""
        replace_json(self.path / LATE_RUN, {"run_id": run_id, "experiment_id": experiment_id})

    def read_late_run(self) -> tuple[str, str] | None:
        """(run id, experiment id) of the run made late, if one was."""
        doc = read_json(self.path / LATE_RUN)
        if isinstance(doc, dict) and isinstance(doc.get("run_id"), str):
            return doc["run_id"], str(doc.get("experiment_id") or "")
        return None

    @property
    def nodes(self) -> Path:
        return self.path / NODES

    @property
    def launcher_log(self) -> Path:
        return self.path / LAUNCHER_LOG

    # -- the JSON files --------------------------------------------------------------

    def write_nodes(self, nodes: list[dict[str, Any]]) -> None:
        replace_json(self.nodes, nodes)

    def read_nodes(self) -> list[dict[str, Any]]:
        """The attempt's nodes, ``[]`` for a single-machine attempt (no file)."""
        nodes = read_json(self.nodes)
        return nodes if isinstance(nodes, list) else []

    def write_gpu(self, node: int, snapshot: dict[str, Any]) -> None:
        replace_json(self.gpu(node), snapshot)

    def read_gpu(self, node: int) -> dict[str, Any] | None:
        """Node ``node``'s last GPU snapshot, or None if it never sent one."""
        doc = read_json(self.gpu(node))
        return doc if isinstance(doc, dict) else None


class JobDir:
    """``jobs/<id>/``: the payload, the supervisor's log and the attempts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def under(cls, home: Path, job_id: str) -> JobDir:
        """The directory of job ``job_id`` in the store at ``home`` (an id already checked)."""
        return cls(home / "jobs" / job_id)

    def __repr__(self) -> str:
        return f"JobDir({str(self.path)!r})"

    @property
    def payload(self) -> Path:
        return self.path / PAYLOAD

    @property
    def supervisor_log(self) -> Path:
        return self.path / SUPERVISOR_LOG

    @property
    def session_socket(self) -> Path:
        return self.path / SESSION_SOCKET

    @property
    def session_ticket(self) -> Path:
        return self.path / SESSION_TICKET

    @property
    def session_cells(self) -> Path:
        return self.path / SESSION_CELLS

    @property
    def session_cell(self) -> Path:
        return self.path / SESSION_CELL

    def attempt(self, number: int) -> AttemptDir:
        return AttemptDir(self.path / f"attempt_{number}")

    def attempts(self) -> list[AttemptDir]:
        """The attempts that have a directory, in order."""
        found = [AttemptDir(p) for p in self.path.glob("attempt_*") if _ATTEMPT.fullmatch(p.name)]
        return sorted(found, key=lambda a: a.number)


def replace_json(path: Path, value: Any) -> None:
    """Write ``value`` private and whole: beside the file, then renamed over it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_private(tmp, json.dumps(value, separators=(",", ":")))
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The file's document, or None if it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
