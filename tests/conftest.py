"""Shared fixtures: the fake NVML driver, scenarios, and a Jupyter server with jupyter_air."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fake_nvml import FakeGpu, Scenario, build_library, load_in_process
from tests.gpu.driver import no_real_driver

pytest_plugins = [
    "pytest_jupyter.jupyter_server",
    "tests.server_fixtures",
    "tests.mlflow_store",  # mlflow_template: a migrated MLflow store to copy
    "tests.leftovers",  # nothing a test starts outlives the suite
    "tests.homes",  # module_home: an AIR_HOME the module's tests share
    "tests.ordering",  # the costliest test files reach the workers first
    "tests.nvml_guard",  # no test module leaves NVML initialized in its worker
    "tests.priority_guard",  # no test leaves its worker's thread at a lower priority
]

WriteScenario = Callable[[Scenario], Path]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``gpu`` tests run only where a real NVIDIA driver answers; elsewhere each one is
    skipped with the reason, never passed."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    reason = no_real_driver() if gpu_items else None
    for item in gpu_items if reason else []:
        item.add_marker(pytest.mark.skip(reason=f"no real NVIDIA driver: {reason}"))


@pytest.fixture(scope="session")
def fake_nvml_dir() -> Path:
    """The fake ``libnvidia-ml.so.1``, compiled once per test session."""
    return build_library()


@pytest.fixture
def scenario(fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteScenario:
    """Load the fake driver in this process and point it at a scenario file of this test.

    Call the fixture's value with a ``Scenario`` to write (or rewrite) the file.
    """
    load_in_process(fake_nvml_dir)
    path = tmp_path / "nvml-scenario.txt"
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))

    def write(s: Scenario) -> Path:
        return s.write(path)

    return write


@pytest.fixture
def two_gpus() -> Scenario:
    return Scenario(
        gpus=[
            FakeGpu(
                name="NVIDIA H100 80GB HBM3",
                util=35,
                mem_total=80 * 1024**3,
                mem_used=20 * 1024**3,
                temp=51,
                power=312_400,
                power_limit=700_000,
                processes=[(os.getpid(), 19 * 1024**3)],
            ),
            FakeGpu(name="NVIDIA H100 80GB HBM3", util=0, mem_used=512 * 1024**2, temp=33),
        ]
    )
