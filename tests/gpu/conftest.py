"""Fixtures of the real-GPU tests (``gpu`` marker; tests/conftest.py skips them where no
real driver answers, and scripts/gpu-check runs them on a machine with one)."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from jupyter_air.gpu.nvml import Nvml


@pytest.fixture
def nvml() -> Iterator[Nvml]:
    """jupyter_air's NVML module on the real driver; never on the fake, which other tests
    may have loaded into this process (one process holds one libnvidia-ml.so.1)."""
    if hasattr(getattr(pynvml, "nvmlLib", None), "fake_nvml_call_count"):
        pytest.skip("the fake NVML is loaded in this process: run `pytest -m gpu tests/gpu` alone")
    found = Nvml(retry_interval=0)
    yield found
    found.shutdown()
