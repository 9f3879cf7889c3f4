"""``air`` on a store that holds other users' jobs: the OS user sees and touches only what
its permissions allow; ``air permissions`` shows and changes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_air.identity import Identity, os_identity
from jupyter_air.jobs.permissions import Level, parse_grant
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec

ME = os_identity()
MY_GROUP = sorted(ME.groups)[0]


def air(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def job_of(store: JobStore, owner: str, *grants: str) -> str:
    shared = tuple(parse_grant(g) for g in grants)
    job = store.create(job_spec("command", command=["true"]), owner=owner, grants=shared)
    store.update(job.id, status="SUCCEEDED", ended=1.0)
    return job.id


@pytest.fixture
def jobs(store: JobStore) -> dict[str, str]:
    return {
        "mine": job_of(store, ME.name),
        "alice's": job_of(store, "alice"),
        "shared": job_of(store, "alice", f"{ME.name}:CAN_VIEW"),
        "group's": job_of(store, "alice", f"group:{MY_GROUP}:CAN_MANAGE_RUN"),
    }


@pytest.mark.heavy
def test_the_list_shows_only_the_jobs_the_os_user_may_view(jobs: dict[str, str]) -> None:
    result = air("list", "--all-status", "--output", "json")
    assert result.returncode == 0, result.stderr
    listed = {doc["id"] for doc in json.loads(result.stdout)}
    assert listed == {jobs["mine"], jobs["shared"], jobs["group's"]}
    assert jobs["alice's"] not in air("list", "--all-status").stdout


@pytest.mark.heavy
@pytest.mark.parametrize("command", [["get"], ["logs"], ["permissions"]])
def test_reading_another_users_job_is_refused_with_who_can_grant_it(
    jobs: dict[str, str], command: list[str]
) -> None:
    job = jobs["alice's"]
    result = air(*command, job)
    assert result.returncode == 1
    assert result.stderr == (
        f"air: You don't have CAN_VIEW on job {job}: its owner, alice, can grant it\n"
    )
    assert air("get", jobs["shared"]).returncode == 0


@pytest.mark.heavy
def test_cancel_needs_can_manage_run(jobs: dict[str, str]) -> None:
    refused = air("cancel", jobs["shared"])
    assert refused.returncode == 1
    assert "You don't have CAN_MANAGE_RUN on job" in refused.stderr
    team = jobs["group's"]
    allowed = air("cancel", team)  # through the group; the job already ended
    assert allowed.stderr == f"air: job {team} already ended (succeeded)\n"


@pytest.mark.heavy
def test_the_owner_grants_and_revokes(store: JobStore, jobs: dict[str, str]) -> None:
    job = jobs["mine"]
    granted = air(
        "permissions", job, "--grant", "bob:CAN_VIEW", "--grant", "group:ml-team:CAN_MANAGE_RUN"
    )
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.splitlines() == [
        f"Job {job}: owner {ME.name} (CAN_MANAGE)",
        f"  user  {'bob':24} CAN_VIEW",
        f"  group {'ml-team':24} CAN_MANAGE_RUN",
        f"  you ({ME.name}): CAN_MANAGE",
    ]
    assert store.access(job).level_of(Identity("carol", frozenset({"ml-team"}))) == (
        Level.CAN_MANAGE_RUN
    )
    revoked = air("permissions", job, "--revoke", "group:ml-team", "--output", "json")
    assert json.loads(revoked.stdout) == {
        "job": job,
        "owner": ME.name,
        "grants": [{"kind": "user", "name": "bob", "level": "CAN_VIEW"}],
        "you": {"name": ME.name, "level": "CAN_MANAGE"},
        "mlflow": None,  # a job without an MLflow experiment
    }


@pytest.mark.parametrize(
    ("job", "args", "message"),
    [
        ("group's", ["--grant", "bob:CAN_VIEW"], "You don't have CAN_MANAGE on job"),
        ("mine", ["--grant", "bob"], "'bob' is not a grant: write NAME:LEVEL"),
        ("mine", ["--grant", "bob:CAN_OWN"], "unknown permission level 'CAN_OWN'"),
        ("mine", ["--revoke", ME.name], "owns the job: the owner's CAN_MANAGE cannot be changed"),
    ],
)
def test_refused_changes_say_why_and_change_nothing(
    store: JobStore, jobs: dict[str, str], job: str, args: list[str], message: str
) -> None:
    before = store.access(jobs[job])
    result = air("permissions", jobs[job], *args)
    assert result.returncode == 1
    assert message in result.stderr
    assert store.access(jobs[job]) == before


def test_an_unknown_job_is_still_no_job(store: JobStore) -> None:
    result = air("permissions", "20261201-000000-abcdef")
    assert (result.returncode, result.stderr) == (1, "air: no job '20261201-000000-abcdef'\n")


WORKLOAD = """experiment_name: shared-work
command: {python} -c pass
permissions:
  - bob:CAN_VIEW
  - group:ml-team:CAN_MANAGE_RUN
"""


@pytest.fixture
def workdir(tmp_path: Path, store: JobStore, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.yaml").write_text(WORKLOAD.format(python=sys.executable))
    return tmp_path


@pytest.mark.heavy
def test_a_workload_files_permissions_are_granted_at_submission(
    workdir: Path, store: JobStore
) -> None:
    result = air("run", "-f", "w.yaml")
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[1]
    assert "  shared: bob:CAN_VIEW, group:ml-team:CAN_MANAGE_RUN" in result.stdout.splitlines()
    access = store.access(job)
    assert access.owner == ME.name
    assert {str(g) for g in access.grants} == {"bob:CAN_VIEW", "group:ml-team:CAN_MANAGE_RUN"}


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("permissions", "message"),
    [
        ("[bob]", "permissions (line 3): 'bob' is not a grant: write NAME:LEVEL"),
        ("[bob:CAN_OWN]", "unknown permission level 'CAN_OWN'"),
        ("bob:CAN_VIEW", "permissions (line 3): Input should be a valid list"),
        (f"['{ME.name}:CAN_VIEW']", "owns the job: the owner's CAN_MANAGE cannot be changed"),
    ],
)
def test_bad_permissions_in_a_workload_file_submit_nothing(
    workdir: Path, store: JobStore, permissions: str, message: str
) -> None:
    (workdir / "bad.yaml").write_text(
        f"experiment_name: e\ncommand: x\npermissions: {permissions}\n"
    )
    result = air("run", "-f", "bad.yaml")
    assert result.returncode == 1
    assert message in result.stderr
    assert store.jobs() == []
