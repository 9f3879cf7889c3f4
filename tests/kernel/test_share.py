"""Grants at submission from a kernel: ``%%air_distributed --share`` and
``@distributed(share=...)``, in a real kernel that runs on a Hub user's server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_air.jobs.permissions import Grant, Level, Principal
from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

JOB_ID = re.compile(r"Job (\d{8}-\d{6}-[0-9a-f]{6})")


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str]) -> dict[str, str]:
    """alice's server on a Hub: whoever types into it, its jobs are alice's."""
    return {**kernel_env, "JUPYTERHUB_USER": "alice"}


def test_share_grants_at_submission_and_the_job_is_the_hub_users(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run(
        "%%air_distributed -n 1 --share bob:CAN_VIEW --share group:ml-team:CAN_MANAGE_RUN "
        "--share bob:CAN_MANAGE_RUN\nprint('shared')"
    )
    assert execution.error is None, execution.traceback
    found = JOB_ID.search(execution.text)
    assert found, execution.text
    store = JobStore(air_home)
    access = store.access(found.group(1))
    assert access.owner == "alice"
    assert set(access.grants) == {  # bob's second grant replaced his first
        Grant(Principal("user", "bob"), Level.CAN_MANAGE_RUN),
        Grant(Principal("group", "ml-team"), Level.CAN_MANAGE_RUN),
    }
    assert "Shared: bob:CAN_MANAGE_RUN, group:ml-team:CAN_MANAGE_RUN" in execution.stdout


def test_the_decorator_shares_too(kernel: Kernel, air_home: Path) -> None:
    kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(nproc_per_node=1, share=['group:ml-team:CAN_VIEW'])\n"
        "def one():\n"
        "    return 1\n"
    )
    execution = kernel.run("one.distributed()")
    assert execution.value() == "1"
    found = JOB_ID.search(execution.text)
    assert found, execution.text
    access = JobStore(air_home).access(found.group(1))
    assert (access.owner, access.grants) == (
        "alice",
        (Grant(Principal("group", "ml-team"), Level.CAN_VIEW),),
    )
    bad = kernel.run("distributed(share=['group:ml-team'])(print)")
    assert bad.error is not None
    assert "--share: 'group:ml-team' is not a grant" in bad.error["evalue"]
