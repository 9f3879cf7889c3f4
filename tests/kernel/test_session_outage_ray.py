"""A warm session on two Ray nodes through its tracking server's outage (issue 43): a
``--tracking deferred`` session's cell runs on both nodes' agents while the server is
down, and the cell's run is made and filled once the server is back
(``test_session_outage`` on this module's cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.kernel.conftest import Kernel
from tests.kernel.test_ray_backend import RAY_MODULE_TIMEOUT, cluster  # noqa: F401
from tests.kernel.test_session_outage import (
    TeamServer,
    deferred_session_through_an_outage,
    team,  # noqa: F401
)

pytestmark = [pytest.mark.slow, pytest.mark.ray, RAY_MODULE_TIMEOUT]


@pytest.fixture(scope="module")
def kernel_env(
    kernel_env: dict[str, str],
    cluster: Any,  # noqa: F811
    team: TeamServer,  # noqa: F811
) -> dict[str, str]:
    return {
        **kernel_env,
        "RAY_ADDRESS": cluster.address,
        "RAY_AUTH_MODE": "disabled",
        "MLFLOW_TRACKING_URI": team.uri,
    }


def test_a_deferred_ray_session_runs_cells_while_the_server_is_down_and_their_runs_land(
    kernel: Kernel,
    team: TeamServer,  # noqa: F811
    air_home: Path,
) -> None:
    deferred_session_through_an_outage(kernel, team, air_home, "--backend ray --nnodes 2 -n 1")
