"""A cell whose team tracking server starts answering 503 mid-job, then comes back; and
a cell submitted while it says nothing (issue 23).

The cell ends as it would with the server up, says in its status which server fails
and what waits, and its run gets every point and its end once the server is back, with
nobody acting. A submission to a server that does not answer is refused in one line
within seconds, with nothing started.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel
from tests.tracking.test_mlflow_permissions import start_server, stop_server, wait_ready
from tests.tracking_proxy import Mode, TrackingProxy
from tests.waits import until

#: A real ``mlflow server``, a kernel and a 2-rank job: about forty seconds.
pytestmark = pytest.mark.slow

STEPS = 200
CELL = f"""\
%%air_distributed -n 2
import os, time
from pathlib import Path
from jupyter_air import log_metrics
for step in range({STEPS}):
    log_metrics({{"loss": 1 / (step + 1)}}, step=step)
    if step == 50 and os.environ["RANK"] == "0":
        Path(os.environ["MARK"]).touch()  # the test breaks the server now
    time.sleep(0.02)
"""


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackingProxy]:
    root = tmp_path_factory.mktemp("team-server")
    server = start_server(root, "--serve-artifacts", "--artifacts-destination", str(root / "a"))
    wait_ready(server)
    proxy = TrackingProxy(server.uri)
    yield proxy
    proxy.close()
    stop_server(server)


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str], proxy: TrackingProxy, air_home: Path) -> dict[str, str]:
    """The module's kernel tracks to the team's server, through the proxy."""
    return {**kernel_env, "MLFLOW_TRACKING_URI": proxy.uri, "MARK": str(air_home / "step-50")}


def test_a_cell_whose_server_answers_503_ends_says_so_and_its_run_fills_when_it_is_back(
    kernel: Kernel, proxy: TrackingProxy, air_home: Path
) -> None:
    mark = air_home / "step-50"
    running = kernel.start(CELL)
    until(mark.exists, "rank 0 at step 50", timeout=180)
    proxy.switch(Mode.UNAVAILABLE)
    cell = kernel.collect(running)

    assert cell.error is None, cell.traceback
    # Its last status says it, whoever met the outage first: the supervisor's shipper (a
    # 503) or the cell's own end (its 503, or no answer in the 5 s it waits).
    assert re.search(
        rf"⚠ tracking: {re.escape(proxy.uri)} unreachable since \d\d:\d\d:\d\d "
        r"\((HTTP 503|no answer in 5 s)\); \d+ points",
        cell.text,
    ), cell.text
    assert re.search(
        rf"tracking: {re.escape(proxy.uri)} did not take the run's end \((HTTP 503|no answer in "
        r"5 s)\): it and its points wait, and land when the server answers \(air get \S+\)",
        cell.stderr,
    ), cell.stderr

    proxy.switch(Mode.FORWARD)  # nobody acts: the run fills by itself
    store = JobStore(air_home)
    (job,) = store.jobs()
    (attempt,) = store.attempts(job.id)
    client = MlflowClient(proxy.uri)

    def filled() -> bool:
        try:
            run = client.get_run(attempt.run_id or "")
            steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
        except Exception:
            return False
        return run.info.status == "FINISHED" and steps == list(range(STEPS))

    until(filled, "every point once and the run's end on the server", timeout=120)


def test_a_cell_submitted_while_the_server_says_nothing_is_refused_in_one_line(
    kernel: Kernel, proxy: TrackingProxy, air_home: Path
) -> None:
    jobs = len(JobStore(air_home).jobs())
    proxy.switch(Mode.SILENT)
    try:
        cell = kernel.run("%%air_distributed -n 1\nprint('never')")
    finally:
        proxy.switch(Mode.FORWARD)
    assert cell.error is not None
    assert cell.error["traceback"] == [
        f"\x1b[31mTrackingUnreachable\x1b[0m: tracking: {proxy.uri} does not answer (no "
        "answer in time); nothing was started: start the server, or set "
        "MLFLOW_TRACKING_URI to one that answers, or run with --tracking deferred"
    ]
    assert "never" not in cell.text
    assert len(JobStore(air_home).jobs()) == jobs


def test_a_deferred_cell_runs_while_its_server_is_down_and_its_run_is_made_once_it_answers(
    kernel: Kernel, proxy: TrackingProxy, air_home: Path
) -> None:
    proxy.switch(Mode.UNAVAILABLE)
    try:
        cell = kernel.run(
            "%%air_distributed -n 2 --tracking deferred --experiment later\n"
            "from jupyter_air import log_metrics\n"
            "for step in range(20):\n"
            "    log_metrics({'loss': 1 / (step + 1)}, step=step)\n"
            "42"
        )
    finally:
        proxy.switch(Mode.FORWARD)  # nobody acts: the run is made and filled
    assert cell.value() == "42"
    store = JobStore(air_home)
    job = store.jobs()[0]
    assert (
        f"tracking: {proxy.uri} does not answer (HTTP 503 Service Unavailable): the job runs "
        f"now; its run is made and filled once the server answers (air get {job.id})"
    ) in cell.stderr
    client = MlflowClient(proxy.uri)

    def filled() -> bool:
        run_id = store.attempts(job.id)[0].run_id
        if run_id is None:
            return False
        run = client.get_run(run_id)
        steps = sorted(m.step for m in client.get_metric_history(run_id, "loss"))
        return run.info.status == "FINISHED" and steps == list(range(20))

    until(filled, "the run made, with every point and its end", timeout=120)
    run = client.get_run(store.attempts(job.id)[0].run_id or "")
    assert client.get_experiment(run.info.experiment_id).name == "later"


SESSION_CELL = """\
%%air_distributed --session
import os, time
from pathlib import Path
from jupyter_air import log_metrics
for step in range(20):
    log_metrics({"loss": 1 / (step + 1)}, step=step)
mark = Path(os.environ["MARK"])
mark.touch()
while mark.exists():  # the test breaks the server, then lets the cell end
    time.sleep(0.05)
"""


def test_a_session_cell_ending_while_the_server_answers_503_lands_whole_once_it_is_back(
    kernel: Kernel, proxy: TrackingProxy, air_home: Path
) -> None:
    """Its points, its name, its source and its end are kept pending and sent by the
    user's tail process, not lost with the kernel's one try."""
    mark = air_home / "step-50"
    mark.unlink(missing_ok=True)
    started = kernel.run("%air_session start -n 1")
    assert started.error is None, started.traceback
    try:
        running = kernel.start(SESSION_CELL)
        until(mark.exists, "the session's cell at its end", timeout=180)
        proxy.switch(Mode.UNAVAILABLE)
        mark.unlink()
        cell = kernel.collect(running)
        assert cell.error is None, cell.traceback
        pending = air_home / "tails" / "pending"
        until(
            lambda: list(pending.glob("tail-*-1-cell-1.json")),
            "the cell's end kept pending for the tail process",
            timeout=180,
        )
    finally:
        proxy.switch(Mode.FORWARD)  # nobody acts from here: the tail process sends it
        stopped = kernel.run("%air_session stop")
    assert stopped.error is None, stopped.traceback

    store = JobStore(air_home)
    session = next(j for j in store.jobs() if j.spec.kind == "session")
    client = MlflowClient(proxy.uri)

    def landed() -> bool:
        try:
            (run,) = client.search_runs(
                [session.experiment_id or ""],
                f"tags.`air.job_id` = '{session.id}' and tags.`air.session_cell` = '1'",
            )
            steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
            source = client.download_artifacts(run.info.run_id, "code/cell.py", str(air_home))
        except Exception:
            return False
        return (
            run.info.status == "FINISHED"
            and run.data.tags["mlflow.runName"] == "cell 1"
            and steps == list(range(20))
            and "log_metrics" in Path(source).read_text()
        )

    until(landed, "the cell's points, name, source and end on the server", timeout=180)
    until(lambda: not list(pending.glob("*.json")), "nothing left pending", timeout=120)
