"""The backend contract (``tests/backend_contract.py``) for the backends that need no
cluster; those that do run it in their own module, beside the cluster they start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_air.jobs import backends
from tests.backend_contract import (  # noqa: F401  (the contract's tests, run here)
    Engine,
    contract_home,
    sandbox_installed,
    test_a_failing_rank_stops_the_others_and_fails_the_attempt,
    test_a_retry_is_a_new_attempt_with_its_own_run,
    test_a_retry_resumes_from_the_job_s_checkpoint_place,
    test_a_terminated_supervisor_ends_every_rank_and_records_the_job_cancelled,
    test_cancel_stops_every_rank,
    test_each_rank_s_output_is_kept_whole_and_in_order,
    test_every_node_s_system_samples_reach_the_attempt_s_run,
    test_every_rank_gets_the_torchrun_environment_and_its_own_log,
    test_every_rank_runs_in_the_job_s_working_directory_with_its_environment,
    test_the_stacks_of_a_running_job_s_ranks_are_taken_on_their_nodes,
    test_the_timeout_stops_every_rank_and_fails_the_job,
)

#: Every contract test runs jobs with their supervisor and ranks.
pytestmark = pytest.mark.heavy

#: Where each registered backend runs the contract: here, or the module named. The
#: sandbox is the tests' own backend, installed only while its tests run.
ENGINES: dict[str, Engine | str] = {
    "local": Engine("local"),
    "sandbox": Engine("sandbox", {"label": "contract"}),
    "ray": "tests/kernel/test_ray_backend.py",
    "slurm": "tests/kernel/test_slurm_backend.py",
}


@pytest.fixture(params=[name for name, where in ENGINES.items() if isinstance(where, Engine)])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    where = ENGINES[request.param]
    assert isinstance(where, Engine)
    if where.backend != "sandbox":
        yield where
        return
    with sandbox_installed():
        yield where


def test_every_registered_backend_has_an_engine() -> None:
    with sandbox_installed():
        assert set(backends.names()) == set(ENGINES), "a new backend joins the contract suite"


def test_the_registry_lists_local_and_ray_from_entry_points() -> None:
    assert {"local", "ray"} <= set(backends.names())
    assert backends.get("local").name == "local"
    assert backends.get("ray").multi_node
    with pytest.raises(backends.UnknownBackend, match="no backend 'nope': choose one of"):
        backends.get("nope")
