"""The backend contract: what every registered backend does for a job, whatever runs it.

Each test submits a real command job of at least 2 ranks through the jobs service to the backend of
the ``engine`` fixture and reads what its supervisor recorded. A module runs the suite
for a backend by importing these tests and giving ``engine`` (``test_backend_contract``
for the backends that need no cluster; the Ray module, whose cluster it reuses, for
ray); ``test_every_registered_backend_has_an_engine`` keeps a new backend from joining
the registry without it, as ipyparallel's database tests run against each database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.identity import os_identity
from jupyter_air.jobs import backends
from jupyter_air.jobs.request import Defaults, JobRequest, Program
from jupyter_air.jobs.service import JobService
from jupyter_air.jobs.spec import JobKind
from jupyter_air.jobs.store import Job, JobStore
from jupyter_air.jobs.workload_file import Submission
from jupyter_air.logs.query import LogFilter, read_tail
from jupyter_air.status import AttemptStatus, JobStatus
from jupyter_air.tracking.targets import ExperimentRef
from tests.waits import (
    assert_gone_within,
    job_processes,
    until,
    wait_done,
)

#: Seconds a job of these tests gets to end: generous, CI shares its 2 cores.
JOB_END = 180.0
#: What torchrun gives every worker, and what we add.
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "AIR_JOB_ID",
    "AIR_ATTEMPT",
    "MLFLOW_RUN_ID",
)


@dataclass(frozen=True)
class Engine:
    """A backend as a contract test uses it: its name, the settings that reach its
    world (a cluster's address), the nodes a job takes there."""

    backend: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    nnodes: int = 1
    nproc_per_node: int = 2

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


#: The tests' own backend: a module and the entry point of a distribution that only the
#: tests install, by putting this folder on the path (``sandbox_installed``).
SANDBOX = Path(__file__).parent / "sandbox_backend"


@contextlib.contextmanager
def sandbox_installed() -> Iterator[None]:
    """The tests' backend distribution installed for this process and those it starts
    (a job's supervisor finds its backend by entry point too), then gone."""
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(SANDBOX))
            rest = os.environ.get("PYTHONPATH")
            patch.setenv("PYTHONPATH", os.pathsep.join([str(SANDBOX), *([rest] if rest else [])]))
            backends.forget()
            yield
    finally:
        backends.forget()


@pytest.fixture(name="home", scope="module")
def contract_home(module_home: Path) -> Path:
    """The contract's folder: its job store, its jobs' working directory and its MLflow
    store. The module's shared home (tests/homes.py): each test looks at its own job only."""
    return module_home


def submit(engine: Engine, home: Path, code: str, **options: Any) -> tuple[JobService, Job]:
    """A job of ``python -c code`` on the engine, submitted as the OS user."""
    service = JobService(JobStore(home), os_identity())
    fields: dict[str, Any] = {
        "backend": engine.backend,
        "compute": {"nproc_per_node": engine.nproc_per_node, "nnodes": engine.nnodes},
        "max_retries": options.pop("max_retries", 0),
        "env": {"PYTHONUNBUFFERED": "1", **options.pop("env", {})},
    }
    request = JobRequest(
        Submission.model_validate(fields),
        Program(
            JobKind.COMMAND,
            command=[sys.executable, "-c", code],
            working_dir=str(home),
            background=True,
            **options,
        ),
        ExperimentRef(f"sqlite:///{home}/mlflow.db", "contract", None),
        "contract",
        defaults=Defaults(nproc_per_node=engine.nproc_per_node, settings=engine.settings),
    )
    return service, service.start(request).job


def ended(service: JobService, job: Job) -> Job:
    return wait_done(service.store, job.id, JOB_END)


def started(service: JobService, job: Job, ranks: int) -> None:
    """Once ``ranks`` of the job's processes are up."""
    until(lambda: len(job_processes(job.id)) >= ranks, f"{ranks} ranks of job {job.id}", JOB_END)


def nothing_left(job_id: str) -> None:
    assert_gone_within(job_id, time.monotonic(), 60.0)


def rank_lines(service: JobService, job: Job, attempt: int, node: int, rank: int) -> list[str]:
    """What one rank printed, from its log (``logs/node_N/rank_R.log``)."""
    directory = service.store.attempt_dir(job.id, attempt)
    flt = LogFilter(node=node, rank=rank)
    return [line.text for line in read_tail(directory, flt, 1000).lines]


PRINT_ENV = (
    f"import json, os\nprint(json.dumps({{k: os.environ.get(k) for k in {TORCHRUN_ENV!r}}}))\n"
)


def test_every_rank_gets_the_torchrun_environment_and_its_own_log(
    engine: Engine, home: Path
) -> None:
    service, job = submit(engine, home, PRINT_ENV)
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message
    [attempt] = service.store.attempts(job.id)
    seen = {}
    for node in range(engine.nnodes):
        for local in range(engine.nproc_per_node):
            rank = node * engine.nproc_per_node + local
            printed = rank_lines(service, job, 1, node, rank)
            env = json.loads(next(line for line in printed if line.startswith("{")))
            seen[rank] = env
            assert env["RANK"] == str(rank)
            assert env["LOCAL_RANK"] == str(local)
            assert env["GROUP_RANK"] == str(node)
            assert env["WORLD_SIZE"] == str(engine.world_size)
            assert env["LOCAL_WORLD_SIZE"] == str(engine.nproc_per_node)
            assert (env["AIR_JOB_ID"], env["AIR_ATTEMPT"]) == (job.id, "1")
            assert env["MLFLOW_RUN_ID"] == attempt.run_id
            assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
    masters = {
        (e["MASTER_ADDR"], e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]) for e in seen.values()
    }
    assert len(masters) == 1, "every rank meets at one master, in one run"
    nothing_left(job.id)


def test_a_failing_rank_stops_the_others_and_fails_the_attempt(engine: Engine, home: Path) -> None:
    code = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise SystemExit('rank 1 broke')\n"
        "time.sleep(600)\n"
    )
    service, job = submit(engine, home, code)
    job = ended(service, job)
    assert job.status is JobStatus.FAILED
    [attempt] = service.store.attempts(job.id)
    assert (attempt.status, attempt.failed_rank) == (AttemptStatus.FAILED, 1)
    assert "rank 1" in (attempt.message or "")
    nothing_left(job.id)


def test_cancel_stops_every_rank(engine: Engine, home: Path) -> None:
    service, job = submit(engine, home, "import time; time.sleep(600)")
    started(service, job, engine.world_size)
    service.cancel(job.id)
    job = ended(service, job)
    assert job.status is JobStatus.CANCELLED
    nothing_left(job.id)


def test_the_timeout_stops_every_rank_and_fails_the_job(engine: Engine, home: Path) -> None:
    service, job = submit(engine, home, "import time; time.sleep(600)", timeout=3.0)
    job = ended(service, job)
    assert job.status is JobStatus.FAILED
    assert "timed out after 3 s" in (job.message or "")
    nothing_left(job.id)


def test_a_retry_is_a_new_attempt_with_its_own_run(engine: Engine, home: Path) -> None:
    code = "import os; raise SystemExit(1 if os.environ['AIR_ATTEMPT'] == '1' else 0)"
    service, job = submit(engine, home, code, max_retries=1)
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message
    attempts = service.store.attempts(job.id)
    assert [a.status for a in attempts] == [AttemptStatus.FAILED, AttemptStatus.SUCCEEDED]
    assert len({a.run_id for a in attempts}) == 2, "each attempt has its own MLflow run"
    nothing_left(job.id)


def test_every_node_s_system_samples_reach_the_attempt_s_run(
    engine: Engine, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("AIR_SYSTEM_METRICS_INTERVAL", "1")  # the supervisor's, inherited
    service, job = submit(engine, home, "import time; time.sleep(4)")
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message
    [attempt] = service.store.attempts(job.id)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    prefixes = (
        ["system/"]
        if engine.nnodes == 1
        else [f"system/node_{node}/" for node in range(engine.nnodes)]
    )
    wanted = {f"{prefix}cpu_utilization_percentage" for prefix in prefixes}

    def logged() -> set[str]:
        return wanted & set(client.get_run(attempt.run_id).data.metrics)

    # the last samples may come after the job's end: at a node's close, or from the
    # run's tail (a job shorter than its first sample)
    until(lambda: logged() == wanted, f"{sorted(wanted)} in run {attempt.run_id}")


def test_every_rank_runs_in_the_job_s_working_directory_with_its_environment(
    engine: Engine, home: Path
) -> None:
    code = "import json, os; print(json.dumps([os.getcwd(), os.environ.get('AIR_CONTRACT')]))"
    service, job = submit(engine, home, code, env={"AIR_CONTRACT": "kept"})
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message
    for rank in range(engine.world_size):
        printed = rank_lines(service, job, 1, rank // engine.nproc_per_node, rank)
        where, value = json.loads(next(line for line in printed if line.startswith("[")))
        assert (Path(where).resolve(), value) == (home.resolve(), "kept")
    nothing_left(job.id)


def test_each_rank_s_output_is_kept_whole_and_in_order(engine: Engine, home: Path) -> None:
    code = "import os\nfor n in range(300):\n    print(f\"{os.environ['RANK']} line {n}\")\n"
    service, job = submit(engine, home, code)
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message
    for rank in range(engine.world_size):
        printed = rank_lines(service, job, 1, rank // engine.nproc_per_node, rank)
        assert [line for line in printed if " line " in line] == [
            f"{rank} line {n}" for n in range(300)
        ]
    nothing_left(job.id)


def test_a_terminated_supervisor_ends_every_rank_and_records_the_job_cancelled(
    engine: Engine, home: Path
) -> None:
    service, job = submit(engine, home, "import time; time.sleep(600)")
    started(service, job, engine.world_size)
    supervisor = until(lambda: service.store.get(job.id).supervisor_pid, "the supervisor's pid")
    os.kill(supervisor, signal.SIGTERM)  # as a system shutting down would
    job = ended(service, job)
    assert job.status is JobStatus.CANCELLED, job.message
    assert service.store.attempts(job.id)[-1].status is AttemptStatus.CANCELLED
    nothing_left(job.id)


HUNG = """
import time
import torch, torch.distributed as dist

def waiting_in_the_contract():
    time.sleep(600)

def all_reduce_in_the_contract():
    dist.all_reduce(torch.ones(3))

dist.init_process_group("gloo")
if dist.get_rank() == dist.get_world_size() - 1:
    waiting_in_the_contract()
all_reduce_in_the_contract()
"""


def in_the_contract(dump: str | None) -> bool:
    """Whether a py-spy dump has a frame of HUNG's functions (its header repeats the
    code of a ``python -c``: not a frame)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", dump or "")
    return re.search(r"^\s+\w+_in_the_contract \(<string>:\d+\)\s*$", plain, re.M) is not None


def test_the_stacks_of_a_running_job_s_ranks_are_taken_on_their_nodes(
    engine: Engine, home: Path
) -> None:
    """With every rank's flight recorder, read on its node: the last rank never enters
    the all_reduce the others wait in, and the set says so (issue 39, item 1)."""
    service, job = submit(engine, home, HUNG)
    started(service, job, engine.world_size)
    last = engine.world_size - 1

    def every_rank_in_its_place() -> Any:
        taken = service.take_stacks(job.id)
        inside = [s for s in taken.stacks if in_the_contract(s.text)]
        named = taken.hang is not None and taken.hang.culprits == (last,)
        return taken if len(inside) == engine.world_size and named else None

    taken = until(every_rank_in_its_place, "every rank in its place, named", JOB_END, step=1.0)
    assert sorted((s.node, s.rank) for s in taken.stacks) == [
        (rank // engine.nproc_per_node, rank) for rank in range(engine.world_size)
    ]
    assert taken.hang is not None
    assert taken.hang.line.startswith(
        f"{'rank' if last == 1 else 'ranks'} {', '.join(map(str, range(last)))} "
        f"wait{'s' if last == 1 else ''} in all_reduce #1 (float32[3], gloo); rank {last} "
        "never entered it: it has called no collective yet, it is in waiting_in_the_contract"
    ), taken.hang.line
    service.cancel(job.id)
    ended(service, job)
    nothing_left(job.id)


RESUMES = """
import os, pathlib
place = os.environ["AIR_CHECKPOINT_DIR"]
print("place", place, "resume from", os.environ.get("AIR_RESUME_FROM"))
if os.environ["AIR_ATTEMPT"] == "1" and os.environ["RANK"] == "0":
    step = pathlib.Path(place) / "step-7"  # a torch.distributed.checkpoint folder, complete
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"contract")
    raise SystemExit(1)
if os.environ["AIR_ATTEMPT"] == "1":
    import time
    time.sleep(600)  # stopped with rank 0's failure
"""


def test_a_retry_resumes_from_the_job_s_checkpoint_place(engine: Engine, home: Path) -> None:
    service, job = submit(engine, home, RESUMES, max_retries=1)
    job = ended(service, job)
    assert job.status is JobStatus.SUCCEEDED, job.message

    def said(attempt: int, rank: int) -> str:
        lines = rank_lines(service, job, attempt, rank // engine.nproc_per_node, rank)
        return next(line for line in lines if line.startswith("place "))

    first = said(1, 0)  # the others may be stopped before they print
    place = first.split()[1]
    assert first == f"place {place} resume from None"
    assert [said(2, rank) for rank in range(engine.world_size)] == [
        f"place {place} resume from {Path(place) / 'step-7'}"
    ] * engine.world_size, "every rank of the retry has the same place and resumes from it"
    nothing_left(job.id)
