"""``air`` from a shell, end to end: real supervisors, real rank processes, real MLflow."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.sessions.cells import CellRecord, record
from jupyter_air.jobs.store import JobStore
from jupyter_air.status import AttemptStatus
from tests.factories import job_spec
from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.marks import write_marks
from tests.mlflow_store import fresh_store
from tests.waits import job_processes, until, wait_settled

TRAIN = """
import logging, os, sys, time
logging.basicConfig()
rank, attempt = os.environ["RANK"], os.environ["AIR_ATTEMPT"]
print(f"rank {rank} attempt {attempt} starting", flush=True)
logging.warning("rank %s is slow", rank)
if attempt == "1" and rank == "1":
    raise RuntimeError("first attempt fails")
for step in range(int(os.environ.get("STEPS", "3"))):
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(float(os.environ.get("PAUSE", "0.1")))
"""

WORKLOAD = """experiment_name: cli-test
command: {python} train.py
compute:
  nproc_per_node: 2
mlflow_run_name: retry-run
max_retries: 1
env:
  STEPS: "3"
"""


@pytest.fixture
def workdir(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(WORKLOAD.format(python=sys.executable))
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.chdir(tmp_path)
    return tmp_path


def air(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def submitted_id(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.split()[1]


@pytest.mark.heavy
def test_a_retried_workload_is_one_job_with_two_attempts_and_two_runs(workdir: Path) -> None:
    watched = air("run", "-f", "w.yaml", "--watch")
    job_id = submitted_id(watched)
    assert "--- attempt 2 ---" in watched.stdout
    assert watched.stdout.rstrip().endswith(f"Job {job_id} succeeded")
    # --watch ends with the outcome; the runs' MLflow tails (end, logs) finish after it.
    assert wait_settled(workdir / "air", job_id).status == "SUCCEEDED"

    doc = json.loads(air("get", job_id, "--output", "json").stdout)
    assert doc["status"] == "SUCCEEDED"
    assert f"  run:  {doc['attempts'][1]['run_id']}\n" in watched.stdout
    assert [(a["attempt"], a["status"], a["failed_rank"]) for a in doc["attempts"]] == [
        (1, "FAILED", 1),
        (2, "SUCCEEDED", None),
    ]
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    runs = [client.get_run(a["run_id"]) for a in doc["attempts"]]
    assert [r.info.status for r in runs] == ["FAILED", "FINISHED"]
    assert [r.data.tags["air.attempt"] for r in runs] == ["1", "2"]
    assert {r.info.run_name for r in runs} == {"retry-run"}
    assert len({r.info.experiment_id for r in runs}) == 1

    text = air("get", job_id).stdout
    assert "attempt 1: FAILED" in text
    assert "failed rank 1" in text

    listing = air("list").stdout
    assert job_id not in listing, "only active jobs without --all-status"
    assert job_id in air("list", "--all-status").stdout
    assert [
        j["id"] for j in json.loads(air("list", "--all-status", "--output", "json").stdout)
    ] == [job_id]

    # Logs of both attempts, with every filter.
    latest = air("logs", job_id).stdout.splitlines()
    assert len(latest) == 2 + 2 + 6  # starting, warning and 3 steps per rank
    first = air("logs", job_id, "--attempt", "1", "--rank", "1", "--level", "error").stdout
    assert "RuntimeError: first attempt fails" in first
    assert all(" rank 1 ERROR " in line for line in first.splitlines())
    warnings = air("logs", job_id, "--level", "warning").stdout.splitlines()
    assert len(warnings) == 2
    assert all("is slow" in line for line in warnings)
    assert len(air("logs", job_id, "--search", "STEP 2").stdout.splitlines()) == 2
    assert len(air("logs", job_id, "--search", r"step [01]$", "--regex").stdout.splitlines()) == 4
    assert len(air("logs", job_id, "--lines", "3").stdout.splitlines()) == 3
    assert len(air("logs", job_id, "--node", "0", "--rank", "0").stdout.splitlines()) == 5
    assert air("logs", job_id, "--until", "1").stdout == ""
    assert air("logs", job_id, "--minutes", "60").stdout.splitlines() == latest

    downloaded = air("logs", job_id, "--download-to", str(workdir / "dl")).stdout
    rank1 = workdir / "dl" / "attempt_2" / "node_0" / "rank_1.log"
    assert f"wrote {rank1} (5 lines)" in downloaded
    assert "rank 1 step 2" in rank1.read_text()


def test_dry_run_and_override_submit_nothing(workdir: Path) -> None:
    resolved = json.loads(
        air(
            *("run", "-f", "w.yaml", "--dry-run", "--override", "compute.nproc_per_node=4"),
            *("--guard", "loss:>10->notify"),
        ).stdout
    )
    assert resolved["compute"]["nproc_per_node"] == 4
    assert resolved["argv"] == [sys.executable, "train.py"]
    assert resolved["guard"] == ["loss: > 10 -> notify"], "the guards as the job runs them"
    assert air("list", "--all-status").stdout.strip() == "no jobs"


HEAD = "experiment_name: e\ncommand: x\n"


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("command: python x.py\n", "experiment_name: Field required"),
        ("experiment_name: e\n", "command: Field required"),
        (f"{HEAD}colour: red\n", "colour (line 3): Extra inputs"),
        (f"{HEAD}max_retries: -1\n", "max_retries (line 3): Input should be greater than or equal"),
        (f"{HEAD}max_retries: two\n", "max_retries (line 3): Input should be a valid integer"),
        (f"{HEAD}compute:\n  nproc_per_node: 0\n", "compute.nproc_per_node (line 4)"),
        (f"{HEAD}compute:\n  nnodes: 2\n", "compute.nnodes 2 needs a cluster: add 'backend: ray'"),
        (f"{HEAD}backend: lsf\n", "backend (line 3): no backend 'lsf': choose one of"),
        (f"{HEAD}env: {{A: 1}}\n", "env.A (line 3): Input should be a valid string"),
        (f"{HEAD}tracking: later\n", "tracking (line 3): Input should be 'required' or 'deferred'"),
        ("experiment_name: e\ncommand: 'x \"y'\n", "command (line 2): cannot be split"),
        ("- a list\n", "expected a mapping of fields"),
        ("experiment_name: [\n", "not valid YAML at line 2"),
    ],
)  # fmt: skip
def test_bad_workload_files_name_the_field_and_line(
    workdir: Path, yaml_text: str, message: str
) -> None:
    (workdir / "bad.yaml").write_text(yaml_text)
    result = air("run", "-f", "bad.yaml", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("air: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert air("list", "--all-status").stdout.strip() == "no jobs"


@pytest.mark.heavy
def test_follow_streams_a_running_job_and_cancel_leaves_no_process(workdir: Path) -> None:
    long = WORKLOAD.format(python=sys.executable).replace("max_retries: 1", "max_retries: 0")
    (workdir / "long.yaml").write_text(long.replace('STEPS: "3"', 'STEPS: "1000"\n  PAUSE: "0.2"'))
    (workdir / "train.py").write_text(TRAIN.replace('attempt == "1" and rank == "1"', "False"))
    job_id = submitted_id(air("run", "-f", "long.yaml"))
    follower = subprocess.Popen(
        [sys.executable, "-m", "jupyter_air.cli", "logs", job_id, "--follow", "--rank", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert follower.stdout is not None
    seen = [follower.stdout.readline() for _ in range(4)]
    assert any("rank 0 step 1" in line for line in seen), seen
    until(lambda: len(job_processes(job_id)) >= 2, "both ranks up", 30, step=0.1)
    cancelled = air("cancel", job_id)
    assert cancelled.stdout.strip() == f"Job {job_id} cancelled"
    assert follower.wait(timeout=30) == 0, "following ends with the job"
    assert job_processes(job_id) == []
    doc = json.loads(air("get", job_id, "--output", "json").stdout)
    assert doc["status"] == "CANCELLED"
    from mlflow import MlflowClient

    run = MlflowClient(f"sqlite:///{workdir}/mlflow.db").get_run(doc["attempts"][0]["run_id"])
    assert run.info.status == "KILLED"


def test_unknown_ids_and_bad_filters_fail_with_one_line(workdir: Path) -> None:
    for args, message in [
        (("get", "nope"), "no job 'nope'"),
        (("logs", "../../etc"), "no job '../../etc'"),
        (("cancel", "20261129-000000-abcdef"), "no job"),
        (("list", "--limit", "0"), "--limit must be >= 1"),
    ]:
        result = air(*args, check=False)
        assert result.returncode == 1
        assert result.stderr.startswith(f"air: {message}")


@pytest.mark.heavy
def test_a_command_that_cannot_start_fails_the_job_saying_why(workdir: Path) -> None:
    (workdir / "missing.yaml").write_text(
        "experiment_name: cli-test\ncommand: ./not-here.sh\ncompute:\n  nproc_per_node: 2\n"
    )
    watched = air("run", "-f", "missing.yaml", "--watch", check=False)
    assert watched.returncode == 1
    job_id = submitted_id(watched)
    assert "rank 0 could not start: [Errno 2] No such file or directory" in watched.stdout
    assert wait_settled(workdir / "air", job_id).done  # its run's tail too
    doc = json.loads(air("get", job_id, "--output", "json").stdout)
    assert doc["status"] == "FAILED"
    assert doc["attempts"][0]["failed_rank"] == 0
    logs = air("logs", job_id, "--level", "error").stdout
    assert "rank 0 could not start" in logs


#: ``air`` in a process that says, once the command returned, whether it imported MLflow.
WITHOUT_MLFLOW = """
import sys
from jupyter_air.cli import main
code = main(sys.argv[1:])
print("mlflow imported:", "mlflow" in sys.modules)
sys.exit(code)
"""


@pytest.mark.heavy
def test_run_submits_without_mlflow_and_the_supervisor_makes_experiment_and_run(
    workdir: Path,
) -> None:
    (workdir / "train.py").write_text(TRAIN.replace('attempt == "1" and rank == "1"', "False"))
    (workdir / "w.yaml").write_text(
        WORKLOAD.format(python=sys.executable).replace("max_retries: 1", "max_retries: 0")
        + f"mlflow_artifact_location: {workdir / 'artifacts'}\n"
    )
    submitted = subprocess.run(
        [sys.executable, "-c", WITHOUT_MLFLOW, "run", "-f", "w.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert submitted.stdout.splitlines()[-1] == "mlflow imported: False"
    job_id = submitted_id(submitted)
    assert f"  run:  air get {job_id} (its supervisor starts the MLflow run)" in submitted.stdout

    store = JobStore(workdir / "air")
    job = wait_settled(store, job_id)  # the outcome, then the run's end
    assert job.status == "SUCCEEDED", job.message
    doc = json.loads(air("get", job_id, "--output", "json").stdout)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    experiment = client.get_experiment_by_name("cli-test")
    assert experiment is not None
    assert doc["experiment_id"] == experiment.experiment_id
    assert experiment.artifact_location == str(workdir / "artifacts")
    run = client.get_run(doc["attempts"][0]["run_id"])
    assert run.info.experiment_id == experiment.experiment_id
    assert run.info.run_name == "retry-run"
    assert run.info.status == "FINISHED"
    assert run.data.tags["air.job_id"] == job_id
    assert run.data.tags["air.attempt"] == "1"
    assert run.data.tags["air.command"] == f"{sys.executable} train.py"


def test_a_closed_pipe_ends_quietly_with_status_0(workdir: Path) -> None:
    store = JobStore(workdir / "air")
    job = store.create(job_spec("command", command=["true"]))
    store.start_attempt(job.id, 1, None)
    log = store.attempt_dir(job.id, 1) / "logs" / "node_0" / "rank_0.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"{1000 + i}\tOI\tline {i}\n" for i in range(200_000)))
    store.update(job.id, status="SUCCEEDED")
    cli = f"{sys.executable} -m jupyter_air.cli"
    for command in (f"logs {job.id}", f"get {job.id}", "list --all-status --output json"):
        piped = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {cli} {command} | head -1"],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        assert (piped.returncode, piped.stderr) == (0, ""), command
        assert len(piped.stdout.splitlines()) == 1


SHOW_PATH = """experiment_name: cli-test
command: sh -c 'echo "PATH=$PATH"; echo "python=$(command -v python)"'
"""


def rank_says(watched: subprocess.CompletedProcess[str], name: str) -> str:
    (line,) = [line for line in watched.stdout.splitlines() if f" INFO {name}=" in line]
    return line.split(f" INFO {name}=", 1)[1]


@pytest.mark.heavy
def test_a_workload_s_python_is_the_one_air_runs_under_unless_its_env_sets_path(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no activated venv
    (workdir / "path.yaml").write_text(SHOW_PATH)
    watched = air("run", "-f", "path.yaml", "--watch")
    here = str(Path(sys.executable).parent)
    assert rank_says(watched, "PATH") == f"{here}:/usr/bin:/bin"
    assert rank_says(watched, "python") == f"{here}/python"

    (workdir / "own.yaml").write_text(SHOW_PATH + "env:\n  PATH: /opt/tools:/usr/bin:/bin\n")
    watched = air("run", "-f", "own.yaml", "--watch")
    assert rank_says(watched, "PATH") == "/opt/tools:/usr/bin:/bin"
    assert "interpreter air runs under" in " ".join(air("run", "--help").stdout.split())


@pytest.mark.heavy
def test_run_output_json_prints_the_job_s_document_and_nothing_else(workdir: Path) -> None:
    submitted = json.loads(air("run", "-f", "w.yaml", "--output", "json").stdout)
    assert submitted["status"] in ("PENDING", "RUNNING")
    assert (submitted["kind"], submitted["backend"], submitted["nproc_per_node"]) == (
        "command",
        "local",
        2,
    )
    got = json.loads(air("get", submitted["id"], "--output", "json").stdout)
    assert set(got) == set(submitted), "the same document as air get --output json"

    watched = air("run", "-f", "w.yaml", "--output", "json", "--watch", check=False)
    doc = json.loads(watched.stdout)  # only the document: no log lines, no summary
    assert doc["status"] == "SUCCEEDED"
    assert watched.returncode == 0
    assert [a["status"] for a in doc["attempts"]] == ["FAILED", "SUCCEEDED"]


def test_list_without_an_active_job_says_how_many_ended_ones_all_status_shows(
    workdir: Path,
) -> None:
    assert air("list").stdout == "no active jobs\n"
    store = JobStore(workdir / "air")
    for _ in range(2):
        store.update(store.create(job_spec("command", command=["true"])).id, status="SUCCEEDED")
    assert air("list").stdout == "no active jobs; 2 ended: air list --all-status shows them\n"
    assert len(air("list", "--all-status").stdout.splitlines()) == 3  # a header and 2 jobs


def test_list_says_how_many_ended_jobs_it_hides_beside_the_active_ones(workdir: Path) -> None:
    store = JobStore(workdir / "air")
    running = store.create(job_spec("command", command=["true"], run_name="train"))
    store.update(running.id, status="RUNNING")  # no supervisor pid: it stays running
    (header, row) = air("list").stdout.splitlines()
    assert row.split()[:2] == [running.id, "RUNNING"]
    assert row.endswith(" train")
    for _ in range(2):
        store.update(store.create(job_spec("command", command=["true"])).id, status="FAILED")
    assert air("list").stdout.splitlines() == [
        header,
        row,
        "2 ended: air list --all-status shows them",
    ]
    assert "ended:" not in air("list", "--all-status").stdout
    # --limit lists fewer active jobs than there are: those it leaves out are not "ended"
    other = store.create(job_spec("command", command=["true"]))
    store.update(other.id, status="RUNNING")
    assert air("list", "--limit", "1").stdout.splitlines()[-1] == (
        "2 ended: air list --all-status shows them"
    )


def test_get_gives_a_running_attempt_no_exit_codes_and_an_ended_one_its_codes(
    workdir: Path,
) -> None:
    store = JobStore(workdir / "air")
    job = store.create(job_spec("command", command=["true"], nproc_per_node=2))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    assert "  attempt 1: RUNNING\n" in air("get", job.id).stdout
    store.end_attempt(job.id, 1, AttemptStatus.FAILED, [0, -15], failed_rank=1, message="boom")
    shown = air("get", job.id).stdout
    assert "  attempt 1: FAILED, exit codes [0, SIGTERM], failed rank 1: boom\n" in shown


def test_get_lists_a_sessions_cells_and_a_jobs_parent_and_children(workdir: Path) -> None:
    store = JobStore(workdir / "air")
    session = store.create(job_spec("session", command=["loop"]))
    store.update(session.id, status="SUCCEEDED")
    files = JobDir(store.job_dir(session.id))
    record(files, CellRecord(1, "run-a", "c1", 100.0, 103.5, "SUCCEEDED"))
    record(files, CellRecord(2, "run-b", None, 104.0, 104.25, "FAILED"))
    shown = air("get", session.id).stdout
    assert f"  cells run: 2 (air logs {session.id} --cell N)\n" in shown
    assert "    cell 1  SUCCEEDED 3.5 s  run: run-a\n" in shown
    assert "    cell 2  FAILED    0.2 s  run: run-b\n" in shown

    task = store.create(job_spec("command", command=["true"], run_name="nightly"))
    cell = store.create(job_spec("python", run_name="train"), parent_id=task.id)
    store.update(cell.id, status="SUCCEEDED")
    assert f"  jobs it started: 1\n    {cell.id}  SUCCEEDED train\n" in air("get", task.id).stdout
    assert f"  started by job {task.id} (air get {task.id})\n" in air("get", cell.id).stdout


@pytest.mark.heavy  # five air commands: seconds each on a loaded machine
def test_get_and_list_show_a_running_attempts_progress_from_its_step_marks(
    workdir: Path,
) -> None:
    store = JobStore(workdir / "air")
    job = store.create(job_spec("command", command=["true"], nproc_per_node=2, run_name="gpt"))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    assert "progress" not in air("get", job.id).stdout  # no step marked yet
    write_marks(store.attempt_dir(job.id, 1), steps=100, every=0.5, end=time.time(), batch={"n": 8})

    shown = air("get", job.id).stdout
    assert "    progress: step 100 / 1,000 (10 %), ETA " in shown
    assert "    speed:    0.5 s/step, 32 samples/s\n" in shown
    assert "    MFU:      none: " in shown  # no flops line: why it has none
    (_, row, progress) = air("list").stdout.splitlines()
    assert row.endswith(" gpt")
    assert progress.startswith("    step 100 / 1,000 (10 %), ETA ")
    (doc,) = json.loads(air("list", "--output", "json").stdout)
    assert doc["attempts"][0]["progress"]["step"] == 100
    assert doc["attempts"][0]["progress"]["samples_per_s"] == pytest.approx(32)

    store.end_attempt(job.id, 1, AttemptStatus.SUCCEEDED, [0, 0])
    assert "    progress: step 100 / 1,000 (10 %)\n" in air("get", job.id).stdout  # no ETA
