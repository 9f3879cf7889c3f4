"""A cell's ranks and a warm session's on MIG slices (issue 41, item 4), from a real
kernel on the fake driver's H100 in MIG mode (slice 0, 3g.40gb, held by a process;
slice 1, 2g.20gb, and slice 2, 1g.10gb, free): ``--mig`` on ``%%air_distributed`` and
on ``%air_session start`` gives each rank a free slice of its own. The rules:
tests/gpu/test_placement.py; ``air run``'s jobs: tests/jobs/test_mig_jobs.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_nvml import FakeGpu, Scenario, env_for, h100_mig_slices
from tests.jobs.test_mig_jobs import mig_uuid
from tests.kernel.conftest import Kernel

pytestmark = pytest.mark.heavy

SAYS_ITS_DEVICE = 'import os; print("device", os.environ["CUDA_VISIBLE_DEVICES"])'


@pytest.fixture(scope="module")
def kernel_env(air_home: Path, fake_nvml_dir: Path) -> dict[str, str]:
    scenario = Scenario(gpus=[FakeGpu(mig=True, mig_devices=h100_mig_slices(4242))])
    env = {
        **os.environ,
        **env_for(fake_nvml_dir, scenario.write(air_home / "nvml-scenario.txt")),
        "AIR_HOME": str(air_home),
        "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
        "JPY_SESSION_NAME": str(air_home / "notebooks" / "mig.ipynb"),
    }
    for name in ("CUDA_VISIBLE_DEVICES", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME"):
        env.pop(name, None)
    return env


@pytest.fixture
def session(kernel: Kernel) -> Iterator[Kernel]:
    started = kernel.run("%air_session start -n 1 --mig any")
    assert started.error is None, started.traceback
    assert "Error" not in started.stderr, started.stderr  # a refused option is a UsageError
    yield kernel
    kernel.run("%air_session stop")


def test_a_cell_s_rank_runs_on_a_free_slice_of_the_profile_it_asks_for(kernel: Kernel) -> None:
    cell = kernel.run(f"%%air_distributed -n 1 --mig 1g.10gb\n{SAYS_ITS_DEVICE}")
    assert cell.error is None, cell.traceback
    assert f"device {mig_uuid(2)}" in cell.text


def test_a_session_s_rank_keeps_its_slice_for_every_cell_and_from_other_cells(
    session: Kernel,
) -> None:
    for _ in range(2):
        cell = session.run(f"%%air_distributed --session\n{SAYS_ITS_DEVICE}")
        assert cell.error is None, cell.traceback
        assert f"device {mig_uuid(1)}" in cell.text, "the first free slice, its 2g.20gb"
    refused = session.run(f"%%air_distributed -n 1 --mig 2g.20gb\n{SAYS_ITS_DEVICE}")
    assert refused.stderr.startswith(
        "UsageError: 1 rank needs 1 of the MIG slices 2g.20gb (one each), and none is free; "
        "other free slices: GPU 0 slice 2 (1g.10gb); busy: GPU 0 slice 1 (2g.20gb, job "
    ), refused.stderr  # the session's job holds it
