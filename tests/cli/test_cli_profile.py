"""``air profile`` as an attack (issue 38, item 5): the OS user profiles only the running
jobs whose run it may manage; a viewer's, a stranger's or a bad request leaves nothing
for the ranks to see, in one line."""

from __future__ import annotations

import pytest

from jupyter_air.identity import os_identity
from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.permissions import parse_grant
from jupyter_air.jobs.store import JobStore
from jupyter_air.perf import profiles
from tests.air_cli import air
from tests.factories import job_spec

ME = os_identity()


def running_job(store: JobStore, owner: str, *grants: str) -> str:
    shared = tuple(parse_grant(g) for g in grants)
    job = store.create(job_spec("command", command=["true"]), owner=owner, grants=shared)
    store.start_attempt(job.id, 1, None)
    store.update(job.id, status="RUNNING", started=1.0)
    return job.id


def nothing_asked(store: JobStore, job: str) -> bool:
    return not profiles.request_file(AttemptDir(store.attempt_dir(job, 1)).perf).exists()


@pytest.mark.parametrize("grants", [(), (f"{ME.name}:CAN_VIEW",)])
def test_a_viewer_or_a_stranger_cannot_profile_a_job(
    store: JobStore, grants: tuple[str, ...]
) -> None:
    job = running_job(store, "alice", *grants)
    refused = air("profile", job, "--steps", "5")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"air: You don't have CAN_MANAGE_RUN on job {job}: its owner, alice, can grant it\n"
    )
    assert refused.stdout == ""
    assert nothing_asked(store, job)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--steps", "0"], "air: steps must be 1 to 100, got 0\n"),
        (["--steps", "5", "--timeout", "0"], "air: the timeout must be more than 0 and at most"),
    ],
)
def test_a_bad_request_is_one_line_and_asks_nothing(
    store: JobStore, args: list[str], says: str
) -> None:
    job = running_job(store, "alice", f"group:{sorted(ME.groups)[0]}:CAN_MANAGE_RUN")
    refused = air("profile", job, *args)
    assert refused.returncode == 1
    assert refused.stderr.startswith(says)
    assert nothing_asked(store, job)


def test_an_ended_job_has_no_profile_to_give(store: JobStore) -> None:
    job = running_job(store, ME.name)
    store.update(job, status="FAILED", ended=2.0)
    refused = air("profile", job)
    assert refused.returncode == 1
    assert refused.stderr == f"air: job {job} runs no rank now (failed): no profile\n"
    assert air("profile", "nope").stderr == "air: no job 'nope'\n"
