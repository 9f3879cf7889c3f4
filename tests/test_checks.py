"""The one check before a submission, for the magic, the decorator and ``air run``."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from jupyter_air.jobs.capacity import CPU_RANKS_PER_CORE, usable_cores
from jupyter_air.jobs.checks import Refused, check_submission
from jupyter_air.jobs.workload_file import Submission

OVERRIDE = "--oversubscribe (compute.oversubscribe: true)"


def submission(**fields: object) -> Submission:
    return Submission.model_validate(fields)


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def check(sub: Submission, nproc: int = 1, **options: Any) -> str | None:
    return check_submission(sub, "alice", nproc_per_node=nproc, override=OVERRIDE, **options)


def refused(sub: Submission, nproc: int = 1, **options: Any) -> Refused:
    with pytest.raises(Refused) as raised:
        check(sub, nproc, **options)
    return raised.value


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: nobody listens


def test_a_local_submission_that_fits_passes_and_names_no_cluster() -> None:
    assert check(submission(permissions=["bob:CAN_VIEW"]), 2) is None


def test_the_owner_cannot_grant_to_themself() -> None:
    err = refused(submission(permissions=["alice:CAN_VIEW"]))
    assert err.field == "permissions"
    assert "owns the job: the owner's CAN_MANAGE cannot be changed" in str(err)


def test_more_ranks_than_the_machine_holds_are_refused_unless_asked_on_purpose() -> None:
    too_many = CPU_RANKS_PER_CORE * usable_cores() + 1
    err = refused(submission(), too_many)
    assert err.field == "compute.nproc_per_node"
    assert OVERRIDE in str(err)
    assert check(submission(), too_many, oversubscribe=True) is None
    assert check(submission(compute={"oversubscribe": True}), too_many) is None


def test_a_ray_cluster_nobody_listens_on_is_refused_at_once() -> None:
    port = closed_port()
    ray = submission(backend="ray", ray_address=f"127.0.0.1:{port}")
    err = refused(ray)
    assert err.field is None
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in str(err)
    assert check(ray, reach_cluster=False) == f"127.0.0.1:{port}"  # a dry run


def test_the_ray_address_is_the_submission_s_then_the_default_then_ray_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check(submission(backend="ray"), reach_cluster=False) == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.3:6379")
    assert check(submission(backend="ray"), reach_cluster=False) == "10.0.0.3:6379"
    configured = {"ray_address": "10.0.0.2:6379", "reach_cluster": False}
    assert check(submission(backend="ray"), **configured) == "10.0.0.2:6379"
    own = submission(backend="ray", ray_address="10.0.0.1:6379")
    assert check(own, **configured) == "10.0.0.1:6379"


def test_ray_ranks_are_not_counted_against_this_machine() -> None:
    assert check(submission(backend="ray"), 10_000, reach_cluster=False) == "auto"
