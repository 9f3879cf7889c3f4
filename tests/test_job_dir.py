"""A job's directory: one module names every file under ``AIR_HOME/jobs/<id>/``."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

import jupyter_air
from jupyter_air.job_dir import AttemptDir, JobDir, RankLogFile
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec

PACKAGE = Path(jupyter_air.__file__).parent
#: The names of a job directory's files, as literals, and their patterns.
NAMES = ("payload.pkl", "result.pkl", "supervisor.log", "nodes.json", "hints.json", "error_rank_")
PATTERNS = ("attempt_", "node_*", "rank_*", "rank_{")
#: How the names of a run's metrics start (MLflow's system metrics, ours of issue 38).
METRICS = ("system/", "perf/")


def test_the_store_lays_out_jobs_through_job_dir(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = store.create(job_spec("command", command=["true"]))
    files = JobDir(store.job_dir(job.id))
    assert files.path == tmp_path / "jobs" / job.id
    assert files.attempt(2).path == store.attempt_dir(job.id, 2)
    assert files.payload.parent == files.path
    assert files.supervisor_log.parent == files.path


def test_attempts_and_rank_logs_are_listed_in_order_and_strangers_ignored(tmp_path: Path) -> None:
    files = JobDir(tmp_path)
    for attempt, node, rank in [(10, 1, 3), (2, 0, 1), (2, 0, 0), (2, 1, 10), (2, 1, 2)]:
        path = files.attempt(attempt).rank_log(node, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "attempt_x").mkdir()
    (files.attempt(2).node_logs(0) / "rank_a.log").write_text("")
    (files.attempt(2).logs / "node_b").mkdir()
    assert [a.number for a in files.attempts()] == [2, 10]
    assert [(f.node, f.rank) for f in files.attempt(2).rank_logs()] == [
        (0, 0),
        (0, 1),
        (1, 2),
        (1, 10),
    ]
    assert files.attempt(10).rank_logs() == [RankLogFile(1, 3, files.attempt(10).rank_log(1, 3))]


def test_result_files_are_the_value_and_tracebacks_only(tmp_path: Path) -> None:
    attempt = AttemptDir(tmp_path).make()
    assert attempt.result_files() == []
    attempt.result.write_bytes(b"v")
    attempt.error(1).write_text("tb")
    attempt.result_partial.write_bytes(b"half")
    (tmp_path / "error_rank_x.txt").write_text("not a rank's")
    assert attempt.result_files() == [attempt.result, attempt.error(1)]


def test_json_files_are_private_and_read_back_or_empty(tmp_path: Path) -> None:
    attempt = AttemptDir(tmp_path / "attempt_1")
    assert attempt.read_nodes() == []
    assert attempt.read_gpu(0) is None
    attempt.write_nodes([{"node": 0}])
    attempt.write_gpu(1, {"samples": {}})
    assert attempt.read_nodes() == [{"node": 0}]
    assert attempt.read_gpu(1) == {"samples": {}}
    for path in (attempt.nodes, attempt.gpu(1)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    attempt.nodes.write_text("{not json")
    attempt.gpu(1).write_text("[1]")
    assert attempt.read_nodes() == []
    assert attempt.read_gpu(1) is None


def test_no_other_module_spells_a_job_directory_file_name() -> None:
    """Every literal naming a file of a job's directory lives in ``job_dir``."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "job_dir.py" or "labextension" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        exempt = {id(n) for f in ast.walk(tree) if _other_layout(path, f) for n in ast.walk(f)}
        exempt |= _docstrings(tree)
        for node in ast.walk(tree):
            if id(node) in exempt:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr):
                text = ast.unparse(node)
            else:
                continue
            if " " in text:
                continue  # a sentence (help, a message) names files; a path has no spaces
            if text.removeprefix("f").strip("'\"").startswith(METRICS):
                continue  # a run's metric (perf/step_time/rank_3), not a file
            if any(name in text for name in NAMES + PATTERNS):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {text[:60]!r}")
    assert offenders == []


def _other_layout(path: Path, node: ast.AST) -> bool:
    """``air logs --download-to``'s own layout (attempt_K/node_N/rank_R.log, no logs/ in
    between, as its --help says): a copy's names, not a job directory's."""
    return (
        path.name == "export.py"
        and isinstance(node, ast.FunctionDef)
        and node.name == "write_rank_files"
    )


def _docstrings(tree: ast.AST) -> set[int]:
    """Docstrings may name files: they are not paths the code builds."""
    found = set()
    for parent in ast.walk(tree):
        body = getattr(parent, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr):
            found.add(id(first.value))
    return found
