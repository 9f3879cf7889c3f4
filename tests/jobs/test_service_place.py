"""The jobs service's one check before a submission (``place``), for the magic, the
decorator, a session, ``air run`` and a schedule's task: the grants, then the backend's
own (this machine's capacity, a Ray cluster that answers)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.capacity import CPU_RANKS_PER_CORE, PlacingBusy, placing, usable_cores
from jupyter_air.jobs.request import Program
from jupyter_air.jobs.service import Refused, place
from jupyter_air.jobs.spec import JobKind, JobSpec
from jupyter_air.jobs.workload_file import Submission

OVERRIDE = "--oversubscribe (compute.oversubscribe: true)"


def submission(**fields: object) -> Submission:
    return Submission.model_validate(fields)


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def check(sub: Submission, nproc: int = 1, **options: Any) -> str | None:
    """The Ray address the placed job keeps (None: a local job, which keeps none)."""
    placed = place(sub, "alice", nproc_per_node=nproc, override=OVERRIDE, **options)
    assert placed.backend.name == sub.backend
    address: str | None = placed.settings.get("address")
    return address


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
    assert check(ray, reach=False) == f"127.0.0.1:{port}"  # a dry run


def test_the_ray_address_is_the_submission_s_then_the_default_then_ray_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check(submission(backend="ray"), reach=False) == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.3:6379")
    assert check(submission(backend="ray"), reach=False) == "10.0.0.3:6379"
    configured = {"settings": {"address": "10.0.0.2:6379"}, "reach": False}
    assert check(submission(backend="ray"), **configured) == "10.0.0.2:6379"
    own = submission(backend="ray", ray_address="10.0.0.1:6379")
    assert check(own, **configured) == "10.0.0.1:6379"


def test_ray_ranks_are_not_counted_against_this_machine() -> None:
    assert check(submission(backend="ray"), 10_000, reach=False) == "auto"


def test_the_backend_s_default_ranks_are_one_per_gpu_here_and_one_per_ray_node() -> None:
    local = place(submission(), "alice")  # CUDA_VISIBLE_DEVICES="" hides every GPU
    assert local.nproc_per_node == 1
    ray = place(submission(backend="ray"), "alice", reach=False)
    assert ray.nproc_per_node == 1


def test_the_placed_spec_keeps_the_backend_and_its_resolved_settings() -> None:
    placed = place(submission(backend="ray", compute={"nnodes": 2}), "alice", reach=False)
    spec = placed.spec(Program(JobKind.PYTHON))
    assert (spec.backend.name, dict(spec.backend.settings)) == ("ray", {"address": "auto"})
    assert (spec.compute.nnodes, spec.compute.nproc_per_node) == (2, 1)
    assert JobSpec.from_json(spec.to_json()) == spec


def test_a_command_runs_with_this_interpreter_first_on_its_path_unless_it_sets_path() -> None:
    placed = place(submission(env={"A": "1"}), "alice")
    path = placed.spec(Program(JobKind.COMMAND, command=["python", "x.py"])).program.env["PATH"]
    assert path.split(os.pathsep)[0] == str(Path(sys.executable).parent)
    own = place(submission(env={"PATH": "/opt/bin"}), "alice")
    assert own.spec(Program(JobKind.COMMAND, command=["x"])).program.env["PATH"] == "/opt/bin"
    assert (
        "PATH" not in placed.spec(Program(JobKind.PYTHON)).program.env
    )  # a cell's ranks: the kernel's


#: Holds a lock file (flock) until killed, as a stalled or hostile process would.
HOLDER = """import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_a_placing_lock_kept_by_another_process_refuses_after_the_wait_never_hangs(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "placing.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with (
            pytest.raises(PlacingBusy, match=r"placing its job for over 0\.3 s"),
            placing(tmp_path, wait=0.3),
        ):
            raise AssertionError("placed while another held the lock")
    finally:
        holder.kill()
        holder.wait()
    with placing(tmp_path, wait=30) as release:
        release()  # what a job given no slice does once placed


def test_the_placing_lock_is_private_and_never_followed_through_a_link(tmp_path: Path) -> None:
    with placing(tmp_path):
        pass
    assert oct((tmp_path / "placing.lock").stat().st_mode & 0o777) == "0o600"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "placing.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="Too many levels of symbolic links"), placing(linked):
        pass
    assert not (tmp_path / "elsewhere").exists()
