"""A warm session through its team tracking server's outage (issue 43): a real
``mlflow server``, killed mid-session and started again on its port and store.

While it is down, a cell whose run was made ahead runs; the next is refused in one line
naming the server within seconds, the ranks and their names untouched; in a session
started with ``--tracking deferred`` it runs at once instead, and its run is made and
filled by the tail process once the server is back. The first cell after the server is
back runs, with no restart. No cell's output holds MLflow's own "View run" lines.
"""

from __future__ import annotations

import queue
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Execution, Kernel
from tests.kernel.test_session import start
from tests.tracking.test_mlflow_permissions import Server, start_server, stop_server, wait_ready
from tests.tracking_proxy import Mode, TrackingProxy
from tests.waits import until

#: A real ``mlflow server`` started three times, a kernel and two sessions: minutes.
pytestmark = pytest.mark.slow

#: MLflow's own lines as it ends a run on a tracking server (``_log_url``).
MLFLOW_LINES = re.compile(r"View run|View experiment")


@dataclass
class TeamServer:
    """The team's server: killed and started again on the same port and store."""

    root: Path
    server: Server

    @property
    def uri(self) -> str:
        return self.server.uri

    def kill(self) -> None:
        stop_server(self.server)

    def restart(self) -> None:
        port = int(self.uri.rsplit(":", 1)[1])
        self.server = start_server(self.root, port=port)
        wait_ready(self.server)

    def up(self) -> None:
        if self.server.process.poll() is not None:
            self.restart()


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    root = tmp_path_factory.mktemp("team-server")
    server = start_server(root)
    wait_ready(server)
    team = TeamServer(root, server)
    yield team
    if team.server.process.poll() is None:
        stop_server(team.server)


@pytest.fixture(scope="module")
def proxy(team: TeamServer) -> Iterator[TrackingProxy]:
    """The team's server behind a proxy that can stop answering (its port stays)."""
    proxy = TrackingProxy(team.uri)
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str], team: TeamServer) -> dict[str, str]:
    return {**kernel_env, "MLFLOW_TRACKING_URI": team.uri}


def session_cell(kernel: Kernel, body: str) -> Execution:
    return kernel.run(f"%%air_distributed --session\n{body}")


def late_output(kernel: Kernel) -> str:
    """What the kernel printed after its cells went idle (a thread ending a cell's run
    writes there), whichever cell it is said for."""
    text = []
    while True:
        try:
            msg = kernel.client.get_iopub_msg(timeout=2)
        except queue.Empty:
            return "".join(text)
        if msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])


def cell_runs(client: MlflowClient, job_id: str) -> dict[str, Run]:
    """The session's cells' runs by name (the run made ahead for a next cell left out)."""
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.`air.job_id` = '{job_id}' and tags.`air.session_cell` != 'next'",
    )
    return {run.info.run_name: run for run in found if "air.session_cell" in run.data.tags}


def cell_run_states(client: MlflowClient, job_id: str) -> list[tuple[str, str, str]]:
    """Name, ``air.session_cell`` tag and status of each run of the session's cells, the
    runs made ahead ("next") included; a deleted run is not there."""
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.`air.job_id` = '{job_id}'",
    )
    return sorted(
        (run.info.run_name, run.data.tags["air.session_cell"], run.info.status)
        for run in found
        if "air.session_cell" in run.data.tags
    )


def only_cells_ended(client: MlflowClient, job_id: str, cells: int) -> bool:
    """Whether the runs of cells 1 to ``cells`` have ended and no other cell run is left."""
    found = cell_run_states(client, job_id)
    return [name for name, _, _ in found] == [f"cell {n}" for n in range(1, cells + 1)] and all(
        status != "RUNNING" for _, _, status in found
    )


def ended_by_kernel(client: MlflowClient, air_home: Path, job_id: str, cell: int) -> bool:
    """Whether the kernel has ended cell ``cell``'s run: its source is there (set just
    before the end) and nothing of its end is kept pending any more."""
    pending = air_home / "tails" / "pending" / f"tail-{job_id}-1-cell-{cell}.json"
    run = cell_runs(client, job_id).get(f"cell {cell}")
    return (
        run is not None
        and bool(client.list_artifacts(run.info.run_id, "code"))
        and not (pending.exists())
    )


def answered_ahead(kernel: Kernel) -> bool:
    """Whether the kernel has the answer to its request for the next cell's run: the
    server may have made the run while the answer is still on its way, and a switch of
    the proxy cuts it."""
    asked = kernel.run(
        "from jupyter_air.kernel.warm_session import WarmSession as _Warm\n"
        "_Warm.current is not None and _Warm.current._next_run is not None "
        "and _Warm.current._next_run.done()"
    )
    return asked.error is None and asked.value() == "True"


def made_ahead(client: MlflowClient, job_id: str) -> bool:
    try:
        return bool(
            client.search_runs(
                [e.experiment_id for e in client.search_experiments()],
                f"tags.`air.job_id` = '{job_id}' and tags.`air.session_cell` = 'next'",
            )
        )
    except Exception:
        return False


def test_a_cell_while_the_server_is_down_is_refused_in_one_line_and_one_after_it_runs(
    kernel: Kernel, team: TeamServer, air_home: Path
) -> None:
    team.up()
    job = start(kernel)
    client = MlflowClient(team.uri)
    try:
        first = session_cell(
            kernel,
            "import os, mlflow\nx = 40 + int(os.environ['RANK'])\n"
            "mlflow.log_metric('x', x)\nx",  # a run MLflow's fluent API ended in the rank
        )
        assert first.value() == "40"
        until(lambda: ended_by_kernel(client, air_home, job, 1), "cell 1's run ended", timeout=60)
        after_first = late_output(kernel)  # where ending its run would have printed
        until(lambda: made_ahead(client, job), "the next cell's run made ahead", timeout=60)
        status = kernel.run("%air_session status").stdout
        pids = re.search(r"pids: .*", status)
        assert pids, status

        team.kill()
        ahead = session_cell(kernel, "x += 1\nx")  # its run was made before: it runs
        assert ahead.value() == "41"
        for _ in range(2):  # refused each time, never by what a failed try left
            refused = session_cell(kernel, "x += 100\nx")
            assert refused.error is not None
            assert refused.error["traceback"] == [
                f"\x1b[31mTrackingUnreachable\x1b[0m: tracking: {team.uri} does not answer "
                f"(connection refused); the cell did not run, and the session (job {job}) "
                "and its names stay: run it again once the server answers, or start the "
                "session with --tracking deferred to run cells meanwhile"
            ]
            assert refused.seconds < 5, refused.seconds
        still = kernel.run("%air_session status").stdout
        assert f"session job {job}: 2 ranks, 2 cells" in still, still
        assert pids.group(0) in still  # the same ranks

        team.restart()
        back = session_cell(kernel, "x += 1\nx")  # no restart of the session
        assert back.value() == "42"  # the names the ranks had, the refused cells not run
    finally:
        stopped = kernel.run("%air_session stop")
    assert stopped.error is None, stopped.traceback

    def all_ended() -> dict[str, Run] | None:
        runs = cell_runs(client, job)
        finished = {name: run for name, run in runs.items() if run.info.status == "FINISHED"}
        return finished if set(finished) == {"cell 1", "cell 2", "cell 3"} else None

    runs = until(all_ended, "cells 1-3's runs ended on the server", timeout=180)
    session_run = JobStore(air_home).attempts(job)[0].run_id
    assert {run.data.tags["mlflow.parentRunId"] for run in runs.values()} == {session_run}
    shown = [first.text, after_first, ahead.text, refused.text, back.text, late_output(kernel)]
    assert not [text for text in shown if MLFLOW_LINES.search(text)], shown


def test_a_deferred_session_runs_cells_while_the_server_is_down_and_their_runs_land_after(
    kernel: Kernel, team: TeamServer, air_home: Path
) -> None:
    deferred_session_through_an_outage(kernel, team, air_home, "-n 1")


def deferred_session_through_an_outage(
    kernel: Kernel, team: TeamServer, air_home: Path, options: str
) -> None:
    """A session started with ``options`` and ``--tracking deferred``: a cell with its run
    made ahead and one without any run run while the server is down, each rank keeping
    its names; both runs land after the restart, the second made then, under the
    session's run, with rank 0's points from the cell's own journal."""
    team.up()
    started = kernel.run(f"%air_session start {options} --tracking deferred")
    assert started.error is None, started.traceback
    store = JobStore(air_home)
    job = next(j.id for j in store.jobs() if j.spec.kind == "session" and not j.done)
    client = MlflowClient(team.uri)
    try:
        assert session_cell(kernel, "state = 'kept'\nstate").value() == "'kept'"
        until(lambda: made_ahead(client, job), "the next cell's run made ahead", timeout=60)

        team.kill()
        ahead = session_cell(kernel, "state")  # its run made before the kill
        assert ahead.value() == "'kept'"
        deferred = session_cell(
            kernel,
            "from jupyter_air import log_metrics\n"
            "for step in range(20):\n"
            "    log_metrics({'loss': 1 / (step + 1)}, step=step)\n"
            "state",
        )
        assert deferred.value() == "'kept'"
        assert (
            f"tracking: {team.uri} does not answer (connection refused): cell 3 runs now; "
            f"its run is made and filled once the server answers (air get {job})"
        ) in deferred.stderr

        team.restart()  # nobody acts from here
        assert session_cell(kernel, "state").value() == "'kept'"
    finally:
        stopped = kernel.run("%air_session stop")
    assert stopped.error is None, stopped.traceback
    session_run = store.attempts(job)[0].run_id

    def cell_3_landed() -> Run | None:
        run = cell_runs(client, job).get("cell 3")
        if run is None or run.info.status != "FINISHED":
            return None
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
        return run if steps == list(range(20)) else None

    run = until(cell_3_landed, "cell 3's run made, filled and ended", timeout=240)
    assert run.data.tags["mlflow.parentRunId"] == session_run
    assert run.data.tags["air.session_cell"] == "3"
    source = client.download_artifacts(run.info.run_id, "code/cell.py", str(air_home))
    assert "log_metrics" in Path(source).read_text()
    until(
        lambda: (
            {"cell 1", "cell 2", "cell 3", "cell 4"}
            <= {n for n, r in cell_runs(client, job).items() if r.info.status == "FINISHED"}
        ),
        "every cell's run ended",
        timeout=240,
    )
    recorded = {c.cell: c.run_id for c in session_cells.cells(JobDir(store.job_dir(job)))}
    assert recorded[3] == run.info.run_id  # air get and the logs' cell picker name it
    until(
        lambda: not list((air_home / "tails" / "pending").glob("*.json")),
        "nothing left pending",
        timeout=120,
    )


def test_a_cell_while_the_server_says_nothing_is_refused_in_seconds_and_nothing_late_is_used(
    kernel: Kernel, team: TeamServer, proxy: TrackingProxy, air_home: Path
) -> None:
    """The run asked ahead for the next cell hangs: the cell waits a second for it, asks
    the server, and is refused; the run that request makes once the server answers
    again is deleted, never a cell's, and the next cell makes its own."""
    team.up()
    uri = kernel.run(f"import os\nos.environ['MLFLOW_TRACKING_URI'] = {proxy.uri!r}")
    assert uri.error is None, uri.traceback
    job = start(kernel)
    client = MlflowClient(team.uri)
    try:
        assert session_cell(kernel, "y = 1\ny").value() == "1"
        until(
            lambda: made_ahead(client, job) and answered_ahead(kernel),
            "the next cell's run made ahead, and the kernel told",
            timeout=60,
        )
        proxy.switch(Mode.SILENT)
        assert session_cell(kernel, "y += 1\ny").value() == "2"  # made ahead: it runs
        refused = session_cell(kernel, "y += 100\ny")  # its run's request hangs
        assert refused.error is not None
        assert refused.error["traceback"][0].startswith(
            f"\x1b[31mTrackingUnreachable\x1b[0m: tracking: {proxy.uri} does not answer "
            "(no answer in time); the cell did not run"
        ), refused.error["traceback"]
        assert len(refused.error["traceback"]) == 1
        assert refused.seconds < 5, refused.seconds

        proxy.switch(Mode.FORWARD)
        assert session_cell(kernel, "y += 1\ny").value() == "3"
    finally:
        proxy.switch(Mode.FORWARD)
        stopped = kernel.run("%air_session stop")
        kernel.run(f"os.environ['MLFLOW_TRACKING_URI'] = {team.uri!r}")
    assert stopped.error is None, stopped.traceback

    # the run made late for the refused cell, and the last one made ahead, are deleted
    until(
        lambda: only_cells_ended(client, job, 3),
        "the cells' runs ended, and no other cell run left",
        timeout=180,
        seen=lambda: cell_run_states(client, job),
    )
    until(  # the end of the cell that ran while the server said nothing, sent since
        lambda: not list((air_home / "tails" / "pending").glob("*.json")),
        "nothing left pending",
        timeout=120,
    )


def test_runs_made_ahead_whose_answers_were_lost_are_deleted_when_the_session_ends(
    kernel: Kernel, team: TeamServer, proxy: TrackingProxy, air_home: Path
) -> None:
    """The server makes the next cell's run, but its answer never comes back (a proxy cut
    it): as far as the kernel knows the request failed, and no answer names the run. The
    next cell makes its own; once the session ends, only the cells' runs are left."""
    team.up()
    uri = kernel.run(f"import os\nos.environ['MLFLOW_TRACKING_URI'] = {proxy.uri!r}")
    assert uri.error is None, uri.traceback
    job = start(kernel)
    client = MlflowClient(team.uri)
    try:
        assert session_cell(kernel, "z = 1\nz").value() == "1"
        until(
            lambda: made_ahead(client, job) and answered_ahead(kernel),
            "the next cell's run made ahead, and the kernel told",
            timeout=60,
        )
        proxy.switch(Mode.ANSWER_LOST)
        assert session_cell(kernel, "z += 1\nz").value() == "2"  # made ahead: it runs
        until(  # besides cell 2's own (named once its end lands), one made for cell 3
            lambda: [tag for _, tag, _ in cell_run_states(client, job)].count("next") >= 2,
            "a run made ahead for cell 3 whose answer was lost",
            timeout=60,
            seen=lambda: cell_run_states(client, job),
        )
        proxy.switch(Mode.FORWARD)
        assert session_cell(kernel, "z += 1\nz").value() == "3"
    finally:
        proxy.switch(Mode.FORWARD)
        stopped = kernel.run("%air_session stop")
        kernel.run(f"os.environ['MLFLOW_TRACKING_URI'] = {team.uri!r}")
    assert stopped.error is None, stopped.traceback
    until(
        lambda: only_cells_ended(client, job, 3),
        "the cells' runs ended, and no run made ahead left",
        timeout=180,
        seen=lambda: cell_run_states(client, job),
    )
