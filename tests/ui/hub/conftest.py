"""The browser tests' JupyterHub (``tests/hub.py``): alice and bob, bob in group ml-team."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub import Hub, running_hub


@pytest.fixture(scope="module")
def hub(fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A JupyterHub with users alice and bob (bob in group ml-team), no server started."""
    with running_hub(tmp_path_factory.mktemp("hub"), fake_nvml_dir) as hub:
        yield hub
