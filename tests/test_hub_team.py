"""Five users on one JupyterHub at once, against the team's one tracking server and the
machine's one GPU panel (issue 23, item 7; the work is ``tests/hub_team.py``).

Each works for ``AIR_HUB_TEAM_MINUTES`` (1 in ``make test``; ``make hub-day`` gives 10):
trivial cells, 2-rank gloo cells, a warm session's cells, ``air run`` jobs, the GPU
panel, and tries at another user's jobs with their own token. Then every cell and job
succeeded, the Hub refused every try, each job's run is complete on the tracking
server, and no server grew more than a leak would allow. The cells' times are the
benchmark's (``bench/bench_hub_team.py``), not asserted here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub import Hub
from tests.hub_team import USERS, team_on_hub, unfinished, workday
from tests.waits import until

#: Five servers, their kernels and jobs at once for a minute: about two and a half.
pytestmark = pytest.mark.slow

MINUTES = float(os.environ.get("AIR_HUB_TEAM_MINUTES", "1"))
#: MiB a server may grow from its first round to the end: its caches fill in the first
#: round; a leak of a job's or a request's state grows with every round after it.
GROWTH_MIB = 32


@pytest.fixture(scope="module")
def team(
    fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Hub, str]]:
    with team_on_hub(tmp_path_factory.mktemp("team"), fake_nvml_dir) as started:
        yield started


def test_five_users_work_at_once_apart_and_every_run_lands_complete(
    team: tuple[Hub, str],
) -> None:
    hub, tracking_uri = team
    day = workday(hub, list(USERS), tracking_uri, minutes=MINUTES)

    assert day.failures == []
    for kind in ("trivial", "ddp", "session", "air run"):
        assert day.cells.get(kind, 0) >= len(USERS), (kind, day.cells)
    assert day.crossed == [], "another user's jobs were reached without a grant"
    assert day.refused >= 4 * len(USERS)
    until(  # the users' tail processes ship what is left
        lambda: not unfinished(hub, list(USERS), tracking_uri),
        "every job and run complete on the tracking server",
        300,
        step=2,
        seen=lambda: unfinished(hub, list(USERS), tracking_uri),
    )
    grown = {user: mib for user, mib in day.growth().items() if mib > GROWTH_MIB}
    assert grown == {}, f"servers that grew more than {GROWTH_MIB} MiB: {grown}"
