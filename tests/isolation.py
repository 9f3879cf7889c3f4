"""No-op stand-ins for pytest-jupyter's autouse fixtures, for tests that run their own
processes (a lab, a kernel) and must not share an asyncio loop with the test process."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> None:
    """No asyncio loop here: these tests talk to subprocesses."""


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> None:
    """No in-process Jupyter server here."""
