"""Scripted jobs of two users holding fake GPUs, and the metrics token, for the tests of
the Prometheus metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.identity import os_user
from jupyter_air.jobs.permissions import Grant, Level, Principal
from jupyter_air.jobs.store import JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario

GIB = 1024**3
#: alice's GPU's energy counter (mJ), one reading a call: 4 kJ more each (bob's has none).
ENERGY_MJ = [10**9 + 4_000_000 * k for k in range(1000)]


@dataclass(frozen=True)
class TwoUsers:
    """alice's job busy on GPU 0, bob's job idle on GPU 1 (from a notebook), GPU 2 free;
    each job viewable by this OS user, as an operator's store would show them."""

    alice_job: str
    bob_job: str
    pids: tuple[int, int]

    def scenario(self) -> Scenario:
        return Scenario(
            gpus=[
                FakeGpu(
                    util=80,
                    mem_used=30 * GIB,
                    power=400_000,
                    energy=ENERGY_MJ,
                    processes=[(self.pids[0], 29 * GIB)],
                ),
                FakeGpu(util=0, mem_used=10 * GIB, temp=35, processes=[(self.pids[1], 9 * GIB)]),
                FakeGpu(name="NVIDIA A100-SXM4-40GB", mem_total=40 * GIB),
            ]
        )


@pytest.fixture
def two_users(store: JobStore) -> Iterator[TwoUsers]:
    """Two ranks (sleeping processes carrying AIR_JOB_ID) of two users' jobs."""
    seen_by_me = (Grant(Principal("user", os_user()), Level.CAN_VIEW),)
    alice = store.create(job_spec("command", command=["train"]), owner="alice", grants=seen_by_me)
    bob = store.create(
        job_spec("python", tags={"air.notebook": "bob/tune.ipynb"}), owner="bob", grants=seen_by_me
    )
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            env={**os.environ, "AIR_JOB_ID": job.id, "RANK": "0"},
        )
        for job in (alice, bob)
    ]
    try:
        yield TwoUsers(alice.id, bob.id, (ranks[0].pid, ranks[1].pid))
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """A metrics token file, private to this user."""
    path = tmp_path / "metrics-token"
    path.write_text("m" * 20 + os.urandom(16).hex() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def sampler_interval() -> float:
    return 3600.0  # no sample but those a scrape or a test asks for


@pytest.fixture
def configured_token_file(token_file: Path) -> str:
    return str(token_file)  # c.AirMetrics.token_file


@pytest.fixture
def allow_unauthenticated_access() -> bool:
    return True  # jupyter_server's default; False refuses every route not marked open


@pytest.fixture
def jp_server_config(
    scenario: WriteScenario,
    two_users: TwoUsers,
    store: JobStore,
    configured_token_file: str,
    sampler_interval: float,
    allow_unauthenticated_access: bool,
) -> dict[str, Any]:
    """A Jupyter server on two users' fake GPUs, with the metrics token."""
    scenario(two_users.scenario())
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_air": True},
            "allow_unauthenticated_access": allow_unauthenticated_access,
        },
        "GpuSampler": {"interval": sampler_interval},
        "AirMetrics": {"token_file": configured_token_file, "grams_co2_per_kwh": 400.0},
    }
