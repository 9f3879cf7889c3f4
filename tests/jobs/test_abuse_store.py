"""The job store and AIR_HOME against other local users, a network file system, a
locked database and secrets in what is shown (issue 10, items 2, 10, 12, 13)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from jupyter_air import cli, paths
from jupyter_air.identity import os_identity
from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import submit
from jupyter_air.jobs.node import rank_main
from jupyter_air.jobs.store import JobStore, StoreError
from jupyter_air.logs.capture import RankLog
from jupyter_air.paths import UnsafeHome, filesystem_type
from jupyter_air.redact import redact, redact_argv
from tests.factories import job_spec
from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.jobs.test_job_store import orphan, recorded_status
from tests.mlflow_store import fresh_store

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets everyone read and write: privacy must not come from the umask."""
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    return tmp_path / "air"


# -- item 10: AIR_HOME and its files are the user's alone ---------------------------------


def test_a_new_air_home_and_the_job_store_are_private(home: Path, open_umask: None) -> None:
    store = JobStore()
    job = store.create(job_spec("command", command=["true"]))
    with sqlite3.connect(store.path) as reader:  # a reader makes the -wal and -shm files
        reader.execute("SELECT count(*) FROM jobs").fetchone()
        assert mode(home) == 0o700
        assert mode(store.job_dir(job.id)) == 0o700
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            assert mode(home / name) == 0o600, name


def test_what_a_job_writes_is_private(
    home: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JobStore()
    # The process boundary: no supervisor starts, the job only records one.
    fake = SimpleNamespace(pid=1, wait=lambda: 0)  # reaped by start_job as it exits
    monkeypatch.setattr(submit.subprocess, "Popen", lambda *a, **k: fake)
    job = submit.start_job(store, job_spec("python"), b"the notebook's state")
    attempt = store.attempt_dir(job.id, 1)
    RankLog(attempt / "logs" / "node_0" / "rank_0.log").close()
    rank_main._write_result(attempt, {"weights": [1, 2]}, {})
    AttemptDir(attempt).write_nodes([{"node": 0}])
    AttemptDir(attempt).write_gpu(0, {"samples": {}})
    written = [
        store.job_dir(job.id) / "payload.pkl",
        store.job_dir(job.id) / "supervisor.log",
        attempt / "logs" / "node_0" / "rank_0.log",
        attempt / "result.pkl",
        attempt / "nodes.json",
        attempt / "gpu" / "node_0.json",
    ]
    assert {str(p.relative_to(home)): oct(mode(p)) for p in written} == {
        str(p.relative_to(home)): oct(0o600) for p in written
    }


def test_an_air_home_of_an_earlier_version_is_made_private(home: Path, open_umask: None) -> None:
    """Made with the default umask and owned by the user: nobody else could write into
    it, so it is tightened rather than refused, and its jobs are kept."""
    job = JobStore().create(job_spec("command", command=["true"]))
    home.chmod(0o755)
    (home / "jobs.db").chmod(0o644)
    store = JobStore()
    assert (mode(home), mode(home / "jobs.db")) == (0o700, 0o600)
    assert store.get(job.id).id == job.id


@root_only
def test_an_air_home_owned_by_someone_else_is_refused(home: Path) -> None:
    home.mkdir(mode=0o700)
    os.chown(home, 12345, -1)
    with pytest.raises(UnsafeHome, match=r"belongs to uid 12345, not to you .* run `chown -R"):
        JobStore()
    assert not (home / "jobs.db").exists()


@root_only
@pytest.mark.parametrize(
    ("permissions", "group", "who"), [(0o777, -1, "others"), (0o770, 12345, "its group")]
)
def test_an_air_home_that_others_can_write_to_is_refused(
    home: Path, permissions: int, group: int, who: str
) -> None:
    home.mkdir()
    os.chown(home, -1, group)
    home.chmod(permissions)
    with pytest.raises(UnsafeHome, match=rf"is writable by {who} .* `chmod 700 {home}`"):
        JobStore()
    assert mode(home) == permissions, "refused, not changed: its contents need a look first"


def test_the_cli_refuses_an_unsafe_air_home_in_one_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    home.chmod(0o777)
    assert cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"air: {home} is writable by others")
    assert len(err.strip().splitlines()) == 1


# -- item 13: a network file system keeps SQLite's rollback journal -----------------------


@pytest.fixture
def nfs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "filesystem_type", lambda path: "nfs4")


def journal_mode(store: JobStore) -> str:
    with sqlite3.connect(store.path) as db:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0])


def test_a_store_on_a_local_disk_is_in_wal_mode(tmp_path: Path) -> None:
    assert journal_mode(JobStore(tmp_path)) == "wal"


def test_a_new_store_on_a_network_filesystem_keeps_a_rollback_journal(
    tmp_path: Path, nfs: None
) -> None:
    store = JobStore(tmp_path)
    store.create(job_spec("command", command=["true"]))
    assert journal_mode(store) == "delete"
    assert journal_mode(JobStore(tmp_path)) == "delete"


def test_a_wal_store_met_on_a_network_filesystem_is_switched_keeping_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = JobStore(tmp_path).create(job_spec("command", command=["true"]))
    monkeypatch.setattr(paths, "filesystem_type", lambda path: "nfs")
    store = JobStore(tmp_path)
    assert journal_mode(store) == "delete"
    assert store.get(job.id).status == "PENDING"


def test_a_wal_store_in_use_on_a_network_filesystem_is_refused_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    JobStore(tmp_path)
    other = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM jobs").fetchone()  # another process reading
    monkeypatch.setattr(paths, "filesystem_type", lambda path: "cifs")
    try:
        with pytest.raises(StoreError, match=r"network file system \(cifs\) in WAL mode.*stop"):
            JobStore(tmp_path, busy_timeout=0.1)
    finally:
        other.close()


def test_the_filesystem_type_is_that_of_the_deepest_mount_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [("/", "ext4"), ("/shared", "ext4"), ("/shared", "nfs4"), ("/shared/scratch", "xfs")]
    monkeypatch.setattr(
        psutil,
        "disk_partitions",
        lambda all=False: [SimpleNamespace(mountpoint=m, fstype=t) for m, t in table],
    )
    assert filesystem_type(Path("/shared/air/jobs.db")) == "nfs4"  # the mount on top wins
    assert filesystem_type(Path("/shared/scratch/air")) == "xfs"
    assert filesystem_type(Path("/sharedness")) == "ext4"
    assert filesystem_type(Path("/shared")) == "nfs4"


def test_the_filesystem_type_of_a_real_directory_is_known(tmp_path: Path) -> None:
    assert filesystem_type(tmp_path) != ""


# -- item 2: reads never write -----------------------------------------------------------


def test_reading_a_job_whose_supervisor_died_writes_nothing(tmp_path: Path) -> None:
    store = JobStore(tmp_path, busy_timeout=0.2)
    job_id = orphan(store)
    writer = sqlite3.connect(store.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        assert store.get(job_id).status == "FAILED"
        assert store.jobs(active_only=True) == []
        assert [a.status for a in store.attempts(job_id)] == ["FAILED"]
    finally:
        writer.close()
    assert recorded_status(store, job_id) == "RUNNING"


def test_settling_records_what_reads_show(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = orphan(store)
    shown = store.get(job_id)
    assert store.settle() == [job_id]
    recorded = store.get(job_id)
    assert recorded_status(store, job_id) == "FAILED"
    assert (recorded.status, recorded.message) == (shown.status, shown.message)
    assert recorded.ended is not None
    assert store.settle() == []


# -- item 12: what shows a job shows no secret --------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://alice:s3cret@mlflow.internal:5000/", "https://***@mlflow.internal:5000/"),
        ("postgresql://ml:pw@db/mlflow", "postgresql://***@db/mlflow"),
        ("python t.py --token xyz --lr 0.1", "python t.py --token *** --lr 0.1"),
        ("t --hf-token=xyz --max-new-tokens 9", "t --hf-token=*** --max-new-tokens 9"),
        ("API_KEY=xyz AWS_SECRET_KEY='a b' PWD=/x t", "API_KEY=*** AWS_SECRET_KEY=*** PWD=/x t"),
        ("run --password -v", "run --password -v"),
        ('curl -H "Authorization: Bearer abc.def" x', 'curl -H "Authorization: Bearer ***" x'),
        ("http://h/x?access_token=abc&page=2", "http://h/x?access_token=***&page=2"),
        ("python train.py --epochs 3", "python train.py --epochs 3"),
    ],
)  # fmt: skip
def test_secrets_in_text_are_redacted(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_secrets_in_an_argument_list_are_redacted() -> None:
    argv = ["sh", "-c", "HF_TOKEN=a python t.py", "--api-key", "b", "--secret", "--verbose"]
    assert redact_argv(argv) == [
        "sh", "-c", "HF_TOKEN=*** python t.py", "--api-key", "***", "--secret", "--verbose"
    ]  # fmt: skip


SECRETS = ("s3cret", "envs3cret", "msgs3cret")


@pytest.fixture
def secret_job(home: Path) -> str:
    store = JobStore()
    job = store.create(
        job_spec(
            kind="command",
            command=["python", "train.py", "--token", "s3cret"],
            env={"HF_TOKEN": "envs3cret"},
            tracking_uri="https://alice:s3cret@mlflow.internal/",
            experiment_id="7",
        )
    )
    store.start_attempt(job.id, 1, "run1")
    message = "could not reach https://bob:msgs3cret@mlflow.internal/api"
    store.end_attempt(job.id, 1, "FAILED", [1], failed_rank=0, message=message)
    store.update(job.id, status="FAILED", ended=2.0, message=message)
    return job.id


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "{id}"],
        ["get", "{id}", "--output", "json"],
        ["list", "--all-status"],
        ["list", "--all-status", "--output", "json"],
    ],
)
def test_air_get_and_list_show_no_secret(
    secret_job: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([arg.format(id=secret_job) for arg in argv]) == 0
    out = capsys.readouterr().out
    assert secret_job in out
    assert not [secret for secret in SECRETS if secret in out], out


def test_a_job_document_shows_where_it_tracks_without_credentials(secret_job: str) -> None:
    from jupyter_air.jobs.documents import job_document

    store = JobStore()
    doc = job_document(store, store.get(secret_job), os_identity(), cli._run_link)
    assert doc["tracking_uri"] == "https://***@mlflow.internal/"
    assert doc["message"] == "could not reach https://***@mlflow.internal/api"
    assert (
        doc["attempts"][0]["run_url"]
        == "https://mlflow.internal/#/experiments/7/runs/run1?workflowType=machine_learning"
    )
    assert (
        store.get(secret_job).spec.tracking.tracking_uri == "https://alice:s3cret@mlflow.internal/"
    )


def test_the_links_a_cell_shows_carry_no_credentials() -> None:
    from jupyter_air.kernel.launch import job_links

    links = job_links("https://alice:s3cret@mlflow.internal/", "7", "run1", "job")
    assert (
        links["run"]
        == "https://mlflow.internal/#/experiments/7/runs/run1?workflowType=machine_learning"
    )
    assert (
        links["experiment"]
        == "https://mlflow.internal/#/experiments/7?workflowType=machine_learning"
    )


CHECK = """
import json, os, sys
with open("seen.json", "w") as out:
    json.dump({"argv": sys.argv[1:], "HF_TOKEN": os.environ.get("HF_TOKEN")}, out)
"""


@pytest.mark.heavy
def test_air_run_tags_its_run_without_secrets_and_the_ranks_get_them(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    (tmp_path / "check.py").write_text(CHECK)
    (tmp_path / "w.yaml").write_text(
        f"experiment_name: secrets\ncommand: {sys.executable} check.py --token s3cret\n"
        "env:\n  HF_TOKEN: envs3cret\n"
    )
    uri = fresh_store(mlflow_template, tmp_path)
    env = {
        **os.environ,
        "AIR_HOME": str(tmp_path / "air"),
        "MLFLOW_TRACKING_URI": uri,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml", "--watch"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == {
        "argv": ["--token", "s3cret"],
        "HF_TOKEN": "envs3cret",
    }
    from mlflow import MlflowClient

    mlflow = MlflowClient(uri)
    (run,) = mlflow.search_runs([mlflow.get_experiment_by_name("secrets").experiment_id])
    assert run.data.tags["air.command"] == f"{sys.executable} check.py --token ***"
    assert not [s for s in SECRETS if s in json.dumps(run.data.tags)]
