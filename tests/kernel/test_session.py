"""Warm sessions in a real kernel: ``%air_session start`` once, then
``%%air_distributed --session`` cells on the same two gloo ranks."""

from __future__ import annotations

import ast
import os
import re
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking import BlockingKernelClient
from mlflow import MlflowClient

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs import cancel
from jupyter_air.jobs.permissions import Grant, Level, Principal
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.store import JobStore
from jupyter_air.kernel.job_options import options_from
from jupyter_air.kernel.magics import AirMagics
from jupyter_air.kernel.options import Options
from jupyter_air.kernel.session_magic import AirSessionMagics
from jupyter_air.logs.query import LogFilter, read_all
from tests.kernel.conftest import Kernel
from tests.kernel.test_abuse_processes import Server, server  # noqa: F401
from tests.kernel.test_distributed_magic import (
    mlflow_client,
)
from tests.waits import (
    assert_gone_within,
    job_processes,
    supervised_until_its_end,
    until,
    wait_done,
)

#: Each test drives a kernel, a session or a job with its supervisor and ranks.
pytestmark = pytest.mark.heavy

SESSION_JOB = re.compile(r"Session job (\d{8}-\d{6}-[0-9a-f]{6})")


def start(kernel: Kernel, options: str = "") -> str:
    started = kernel.run(f"%air_session start -n 2 --oversubscribe {options}")
    assert started.error is None, started.traceback
    found = SESSION_JOB.search(started.text)
    assert found, started.text
    return found.group(1)


def session_run_sampled(air_home: Path, job_id: str, timeout: float = 120) -> str:
    """The session's run, once the supervisor has logged a system sample into it: it
    loads MLflow first, seconds on a loaded machine, and a cell over before then gets
    its samples after its chart is drawn."""
    run_id = JobStore(air_home).attempts(job_id)[0].run_id
    assert run_id is not None
    client = mlflow_client(air_home)
    until(
        lambda: client.get_metric_history(run_id, "system/cpu_utilization_percentage"),
        "system metrics in the session's run",
        timeout,
    )
    return run_id


def cell(kernel: Kernel, body: str, flags: str = "") -> str:
    done = kernel.run(f"%%air_distributed --session {flags}\n{body}")
    return done.value()


def two_node_session_keeps_its_group(kernel: Kernel) -> None:
    """In a running session of 2 nodes x 1 rank: a process group made in one cell, used
    in the next two with the names each rank kept, every node's output in the cell."""
    made = (
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\nseen = 0\n"
        "print('on node', os.environ['GROUP_RANK'], flush=True)\n"
        "dist.get_world_size()"
    )
    first = kernel.run(f"%%air_distributed --session\n{made}")
    assert first.value() == "2"
    assert "[node 1 rank 1] on node 1" in first.stdout  # both nodes' output, in the cell
    for expected in ("3", "6"):  # the warm group across nodes, `seen` kept on each rank
        body = "seen += 1\nt = torch.tensor([seen * (dist.get_rank() + 1)])\ndist.all_reduce(t)\n"
        assert cell(kernel, body + "int(t)") == expected


def test_a_session_cell_needs_a_session_and_only_its_own_options(kernel: Kernel) -> None:
    refused = kernel.run("%%air_distributed --session\n1")
    assert "UsageError: no session is running: start one with %air_session start" in (
        refused.stderr
    )
    refused = kernel.run("%%air_distributed --session -n 2\n1")
    assert "UsageError: -n does not apply to a --session cell" in refused.stderr
    refused = kernel.run("%air_session start --nnodes 2")  # as for a fresh cell
    assert refused.stderr.startswith("UsageError: --nnodes 2 needs a cluster: add --backend ray")
    refused = kernel.run("%air_session restart")
    assert "UsageError: no session to restart: start one with %air_session start" in (
        refused.stderr
    )


def test_session_start_takes_the_whole_job_options_of_a_cell_by_one_definition() -> None:
    """``%air_session start`` and ``%%air_distributed`` share each whole-job option: the
    same flags, default and help; the session's are read back as a cell's are."""
    cell_options = {a.dest: a for a in AirMagics.air_distributed.parser._actions}
    session_parser = AirSessionMagics.air_session.parser
    session_options = {a.dest: a for a in session_parser._actions}
    shared = sorted(set(cell_options) & set(session_options) - {"help"})
    assert shared == [
        "backend",
        "backend_opt",
        "env",
        "experiment",
        "mig",
        "nnodes",
        "nproc_per_node",
        "oversubscribe",
        "ray_address",
        "run_name",
        "share",
        "slurm",
        "tracking",
    ]
    for dest in shared:
        ours, theirs = session_options[dest], cell_options[dest]
        assert (ours.option_strings, ours.default, ours.help) == (
            theirs.option_strings,
            theirs.default,
            theirs.help,
        )
    args = session_parser.parse_args(
        ["start", "-n", "3", "--env", "A=1", "--run-name", "warm", "--idle-timeout", "5"]
    )
    assert options_from(args) == Options(nproc_per_node=3, env={"A": "1"}, run_name="warm")
    on_ray = session_parser.parse_args(["start", "--backend", "ray", "--nnodes", "2"])
    assert options_from(on_ray) == Options(backend="ray", nnodes=2)


def test_a_session_keeps_names_process_group_and_takes_kernel_names(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    job_id = start(kernel)
    assert (
        cell(
            kernel,
            "import torch, torch.distributed as dist\n"
            "dist.init_process_group('gloo')\nseen = 0\ndist.get_world_size()",
        )
        == "2"
    )
    kernel.run("scale = 10")
    for expected in ("10", "20", "30"):
        total = cell(
            kernel, "seen += 1\nt = torch.tensor([seen * scale // 2])\ndist.all_reduce(t)\nint(t)"
        )
        assert total == expected  # two ranks, one warm group, `seen` kept
    kernel.run("scale = 100")  # a kernel name changed between cells is sent again
    assert cell(kernel, "scale * seen") == "300"

    printed = kernel.run(
        "%%air_distributed --session --out rank_env\n"
        "import os\nprint('hello from', os.environ['RANK'])\n"
        "rank_env = os.environ['MLFLOW_RUN_ID']"
    )
    assert "hello from 0" in printed.text
    assert "hello from 1" in printed.text
    assert printed.error is None, printed.traceback

    failed = kernel.run(
        "%%air_distributed --session\nif dist.get_rank() == 1:\n"
        "    raise ValueError('boom on one rank')\n"
    )
    assert failed.error is not None
    assert "failed on rank 1" in failed.traceback
    assert "boom on one rank" in failed.text
    lines = re.findall(r'File "<air_session cell \d+>", line (\d+)', failed.text + failed.traceback)
    assert lines[-1] == "3", f"the editor's line (the magic's is line 1): {lines}"
    assert cell(kernel, "seen") == "3"  # the session and its names stay

    # MLflow: the session's run, and a child per cell carrying its metrics
    logged = kernel.run(
        "%%air_distributed --session\nimport mlflow\n"
        "if dist.get_rank() == 0:\n    mlflow.log_metric('lr_probe', 0.5)\n"
    )
    assert logged.error is None, logged.traceback
    kernel.run("%air_session stop")
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    parent_id = JobStore(air_home).attempts(job_id)[0].run_id
    assert parent_id is not None
    children = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        f"tags.mlflow.parentRunId = '{parent_id}'",
    )
    assert len(children) == 9
    by_cell = {int(r.data.tags["air.session_cell"]): r for r in children}
    assert sorted(by_cell) == list(range(1, 10))
    logged = {k: v for k, v in by_cell[9].data.metrics.items() if not k.startswith("system/")}
    assert logged == {"lr_probe": 0.5}  # besides its system metrics
    assert by_cell[6].info.run_id == kernel.run("rank_env").value().strip("'")  # --out
    assert by_cell[7].info.status == "FAILED"
    assert by_cell[8].info.status == "FINISHED"
    assert by_cell[7].data.tags["air.job_id"] == job_id
    store = JobStore(air_home)
    assert store.get(job_id).spec.kind == "session"
    assert not job_processes(job_id)

    # the logs of one cell: what its ranks printed, and nothing of the other cells
    cells = session_cells.cells(JobDir(store.job_dir(job_id)))
    assert [(c.cell, c.run_id) for c in cells] == [
        (n, by_cell[n].info.run_id) for n in range(1, 10)
    ]
    sixth = session_cells.cell_filter(store, store.get(job_id), LogFilter(), 6)
    printed_in_6 = sorted(line.text for line in read_all(store.attempt_dir(job_id, 1), sixth))
    assert printed_in_6 == ["hello from 0", "hello from 1"]


def test_a_running_cells_run_is_named_within_a_second_and_a_short_cells_after_it(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    """The runs panel and MLflow show a long cell's run while it runs (here the cell runs
    until its rank sees its own run named); a cell shorter than half a second is named once
    it ended, so no write waits beside its end."""
    job_id = start(kernel)
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    parent_id = str(JobStore(air_home).attempts(job_id)[0].run_id)
    try:
        assert cell(kernel, "1") == "1"
        waits = kernel.run(
            "%%air_distributed --session\nimport os, time\nfrom mlflow import MlflowClient\n"
            "run, deadline = MlflowClient().get_run, time.monotonic() + 120\n"
            "while run(os.environ['MLFLOW_RUN_ID']).data.tags.get('air.session_cell') != '2':\n"
            "    assert time.monotonic() < deadline, 'not named while it runs'\n"
            "    time.sleep(0.1)\n"
        )
        assert waits.error is None, waits.traceback
    finally:
        kernel.run("%air_session stop")
    until(
        lambda: cell_runs(client, parent_id)[:2] == [("1", "FINISHED"), ("2", "FINISHED")],
        "both cells' runs FINISHED",
        30,
        seen=lambda: cell_runs(client, parent_id),
    )
    named = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        f"tags.mlflow.parentRunId = '{parent_id}' and tags.`air.session_cell` = '1'",
    )
    assert [r.info.run_name for r in named] == ["cell 1"]


def test_a_session_function_runs_in_the_ranks_namespace_as_a_cell_does(
    kernel: Kernel, kernel_env: dict[str, str], air_home: Path
) -> None:
    """``@distributed(session=True)``: the function sees what session cells made on the
    ranks, and the kernel names it reads; its call is a child run, its failure a cell's."""
    refused = kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(session=True)\ndef total(): pass\ntotal.distributed()"
    )
    assert refused.error is not None
    assert refused.error["ename"] == "NoSession"  # none yet, or an earlier test's ended
    says = ("start one with %air_session start", "%air_session restart starts it again")
    assert any(hint in refused.error["evalue"] for hint in says)
    refused = kernel.run("distributed(session=True, nproc_per_node=2)(print)")
    assert refused.error is not None
    assert refused.error["evalue"].startswith(
        "nproc_per_node does not apply to distributed(session=True)"
    )
    job_id = start(kernel)
    made = "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\nw = 5\nw"
    assert cell(kernel, made) == "5"
    kernel.run(
        "factor = 2\n"
        "def scaled(x):\n    return x * factor\n"
        "@distributed(session=True)\n"
        "def total(step):\n"
        "    global w\n"
        "    w += step\n"  # the rank's own name, made by a session cell, changed
        "    t = torch.tensor([scaled(w)])\n"  # a kernel function reading a kernel name
        "    dist.all_reduce(t)\n"
        "    if dist.get_rank() == 1 and step < 0:\n"
        "        raise ValueError('no negative steps')\n"
        "    return int(t)"
    )
    assert kernel.run("total.distributed(1)").value() == "24"  # 2 ranks x (5 + 1) x 2
    kernel.run("factor = 10")
    assert kernel.run("total.distributed(step=1)").value() == "140"
    failed = kernel.run("total.distributed(-1)")
    assert "total (cell 4) failed on rank 1" in failed.traceback
    assert "no negative steps" in failed.text
    assert cell(kernel, "w") == "6"  # the session and the names the function changed stay
    kernel.run("%air_session stop")
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    parent_id = str(JobStore(air_home).attempts(job_id)[0].run_id)
    experiment_id = client.get_run(parent_id).info.experiment_id
    calls = client.search_runs(
        [experiment_id], f"tags.mlflow.parentRunId = '{parent_id}' and run_name = 'total (cell 2)'"
    )
    assert [r.data.tags["air.session_cell"] for r in calls] == ["2"]


def test_an_interrupted_cell_leaves_the_session_usable(kernel: Kernel) -> None:
    start(kernel)
    kernel.run("%%air_distributed --session\nx = 41")
    msg = kernel.start(
        "%%air_distributed --session\nimport time\n"
        "print('sleeping', flush=True)\nfor _ in range(600):\n    time.sleep(0.1)\n"
    )
    time.sleep(3)
    kernel.interrupt()
    interrupted = kernel.collect(msg)
    assert interrupted.error is not None
    assert "KeyboardInterrupt" in interrupted.traceback
    assert "still up" in interrupted.traceback
    assert cell(kernel, "x + 1") == "42"
    kernel.run("%air_session stop")


def test_a_rank_that_fails_a_cell_gets_the_others_out_of_it(kernel: Kernel) -> None:
    """Rank 1 raises: rank 0, still in the cell, is interrupted. In Python code it leaves
    at once and the session stays; stuck in a collective that waits for rank 1, it cannot,
    and the session ends saying the process group is lost, and how to restart it in place:
    new ranks, a new process group, the next cell works."""
    kernel.run("import jupyter_air.jobs.sessions.host as host\nhost.LEAVE_WAIT = 2.0")
    job_id = start(kernel)
    made = "import time, torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
    assert cell(kernel, made + "x = 1\nx") == "1"
    raise_on_1 = (  # once rank 0 is surely past the `if`, in what follows it
        "%%air_distributed --session\nif dist.get_rank() == 1:\n"
        "    time.sleep(1)\n    raise ValueError('{}')\n"
    )
    failed = kernel.run(raise_on_1.format("no data on rank 1") + "time.sleep(600)\n")
    assert "cell 2 failed on rank 1; the session and its names stay" in failed.traceback
    assert "no data on rank 1" in failed.text
    assert cell(kernel, "x") == "1"

    stuck = kernel.run(raise_on_1.format("rank 1 left") + "dist.all_reduce(torch.ones(1))\n")
    assert (
        "cell 4 failed on rank 1; the session ended: rank 0 still in cell 4 2 s after rank 1 "
        "failed it (in a collective waiting for that rank?): the process group cannot be "
        "used again; %air_session restart starts it again with the same options"
    ) in stuck.traceback
    assert "rank 1 left" in stuck.text
    assert_gone_within(job_id, time.monotonic())
    after = kernel.run("%%air_distributed --session\n1")
    assert "UsageError: the session" in after.stderr
    assert "the process group cannot be used again" in after.stderr
    assert "%air_session restart starts it again with the same options" in after.stderr
    kernel.run("host.LEAVE_WAIT = 10.0")

    restarted = kernel.run("%air_session restart")
    assert restarted.error is None, restarted.traceback
    found = SESSION_JOB.search(restarted.text)
    assert found, restarted.text
    assert found.group(1) != job_id
    assert f"ready (restarted; job {job_id} ended)" in restarted.text
    reduced = "t = torch.ones(1)\ndist.all_reduce(t)\nint(t)"
    assert cell(kernel, made + reduced) == "2"  # new ranks, a new group: both in it
    kernel.run("%air_session stop")


def test_a_running_session_restarts_with_its_options_and_functions_follow_it(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    """``%air_session restart`` of a session that is up: it stops, and a new one starts
    with every option of its ``%air_session start``; the ranks' names are gone, and a
    ``@distributed(session=True)`` function made before runs on the new ranks."""
    first = start(kernel, "--env AIR_PROBE=7 --idle-timeout 5 --run-name warm")
    assert cell(kernel, "kept = 1\nkept") == "1"
    kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(session=True)\n"
        "def probe():\n"
        "    import os\n"
        "    return os.environ['AIR_PROBE'], os.environ['MLFLOW_RUN_ID'], 'kept' in globals()"
    )
    refused = kernel.run("%air_session restart -n 3")
    assert "UsageError: %air_session restart takes no options" in refused.stderr
    assert cell(kernel, "kept") == "1"  # refused: the session is as it was

    restarted = kernel.run("%air_session restart")
    assert restarted.error is None, restarted.traceback
    found = SESSION_JOB.search(restarted.text)
    assert found, restarted.text
    second = found.group(1)
    assert second != first
    assert_gone_within(first, time.monotonic())
    store = JobStore(air_home)
    assert store.get(first).status == "SUCCEEDED"  # stopped: its ranks left when asked

    def options(job_id: str) -> tuple[dict[str, str], str | None, int]:
        spec = store.get(job_id).spec
        return dict(spec.program.env), spec.tracking.run_name, spec.compute.nproc_per_node

    assert options(second) == ({"AIR_PROBE": "7"}, "warm", 2)
    assert options(second) == options(first)
    assert "(--idle-timeout 5)" in kernel.run("%air_session status").text

    env, run_id, kept = ast.literal_eval(kernel.run("probe.distributed()").value())
    assert (env, kept) == ("7", False)  # the same options; new ranks, fresh names
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    parent = client.get_run(run_id).data.tags["mlflow.parentRunId"]
    assert parent == store.attempts(second)[0].run_id  # a child run of the new session
    kernel.run("%air_session stop")


def test_a_dead_rank_ends_the_session_and_the_next_cell_says_why(kernel: Kernel) -> None:
    job_id = start(kernel)
    rank_1 = next(p for p in job_processes(job_id) if p.environ().get("RANK") == "1")
    msg = kernel.start("%%air_distributed --session\nimport time\ntime.sleep(60)\n")
    time.sleep(2)
    os.kill(rank_1.pid, signal.SIGKILL)
    during = kernel.collect(msg)
    assert during.error is not None
    assert "the session ended: rank 1's process ended" in during.traceback
    assert "SIGKILL" in during.traceback
    assert_gone_within(job_id, time.monotonic())  # rank 0, in its cell, was stopped too
    after = kernel.run("%%air_distributed --session\n1")
    assert "UsageError: the session" in after.stderr
    assert "SIGKILL" in after.stderr
    assert "%air_session restart starts it again with the same options" in after.stderr


def test_ranks_killed_between_cells_make_the_next_cell_say_the_session_ended(
    kernel: Kernel, air_home: Path
) -> None:
    """kill -9 of every rank while no cell runs, the job's supervisor stopped (SIGSTOP) so
    that nothing records the job's end yet: the next cell finds the ranks' channels closed
    and says the session ended and why, never a broken pipe."""
    job_id = start(kernel)
    supervisor = psutil.Process(JobStore(air_home).get(job_id).supervisor_pid)
    supervisor.suspend()
    try:
        ranks = job_processes(job_id)
        for rank in ranks:
            rank.kill()
        psutil.wait_procs(ranks, timeout=10)
        threading.Timer(1.0, supervisor.resume).start()  # once the cell has met the pipes
        after = kernel.run("%%air_distributed --session\n1")
    finally:
        supervisor.resume()
    assert "BrokenPipe" not in after.traceback
    # Every rank died: the channel found closed first is either one's (a send into a
    # dead peer's socket can still succeed), the supervisor's account names the first
    # death it saw.
    assert re.search(r"the session ended: rank [01]'s process ended: .*SIGKILL", after.traceback)
    assert "%air_session restart starts it again with the same options" in after.traceback
    supervised_until_its_end(wait_done(air_home, job_id))


def test_a_shared_session_is_ended_by_air_cancel(kernel: Kernel, air_home: Path) -> None:
    started = kernel.run("%air_session start -n 2 --oversubscribe --share bob:CAN_VIEW")
    assert "Shared: bob:CAN_VIEW" in started.text
    found = SESSION_JOB.search(started.text)
    assert found, started.text
    job_id = found.group(1)
    access = JobStore(air_home).access(job_id)
    assert access.grants == (Grant(Principal("user", "bob"), Level.CAN_VIEW),)
    store = JobStore(air_home)
    assert cancel.cancel(store, job_id)  # what `air cancel ID` does, then waits for its end
    assert cancel.wait(store, job_id, 60).done
    assert_gone_within(job_id, time.monotonic(), 30)
    after = kernel.run("%%air_distributed --session\n1")
    assert "UsageError: the session" in after.stderr
    assert "cancelled" in after.stderr


def test_an_idle_session_stops_itself(kernel: Kernel) -> None:
    job_id = start(kernel, "--idle-timeout 0.05")  # 3 s
    assert_gone_within(job_id, time.monotonic(), 60)
    status = until(
        lambda: text if "ended:" in (text := kernel.run("%air_session status").text) else "",
        "the status saying the session ended",
        60,
        step=0.5,
        seen=lambda: kernel.run("%air_session status").text,
    )
    assert "without a cell (--idle-timeout)" in status
    assert "%air_session restart starts it again with the same options" in status


def test_a_killed_kernel_takes_its_session_down_and_ends_every_run(
    kernel_env: dict[str, str], air_home: Path
) -> None:
    """kill -9 of the kernel between cells: its ranks go, the job is cancelled, and the
    session's run, the cell's run and the run made ahead for the next cell all end."""
    doomed = Kernel(kernel_env, cwd=air_home)
    try:
        assert doomed.run("%load_ext jupyter_air").error is None
        job_id = start(doomed)
        assert cell(doomed, "x = 1\nx") == "1"
        assert len(job_processes(job_id)) == 2
        client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
        store = JobStore(air_home)
        parent_id = str(store.attempts(job_id)[0].run_id)
        until(
            lambda: cell_runs(client, parent_id) == [("1", "FINISHED"), ("next", "RUNNING")],
            "the cell's run FINISHED and the next one made",
            30,
            seen=lambda: cell_runs(client, parent_id),
        )
        os.kill(doomed.manager.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
        assert_gone_within(job_id, time.monotonic())
        job = wait_done(air_home, job_id)
        assert job.status == "CANCELLED"
        supervised_until_its_end(job)
    finally:
        doomed.shutdown()
    assert client.get_run(parent_id).info.status == "KILLED"
    assert cell_runs(client, parent_id) == [("1", "FINISHED"), ("next", "KILLED")]


def cell_runs(client: MlflowClient, parent_id: str) -> list[tuple[str, str]]:
    """(air.session_cell, status) of each child run of a session's run."""
    experiment_id = client.get_run(parent_id).info.experiment_id
    children = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    return sorted((r.data.tags["air.session_cell"], r.info.status) for r in children)


def execute(kernel: BlockingKernelClient, code: str, until: str | None = None) -> str:
    """Run ``code`` through a server's kernel; what it printed and displayed (as text),
    once it is done (or, with ``until``, as soon as that text was shown: the cell still
    runs)."""
    msg_id, printed = kernel.execute(code), ""
    while True:
        msg = kernel.get_iopub_msg(timeout=240)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] in ("stream", "display_data"):
            printed += content["text"] if "text" in content else content["data"]["text/plain"]
            if until is not None and until in printed:
                return printed
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(content["traceback"]))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            return printed


def test_a_stopped_jupyter_server_ends_its_session(
    server: Server,  # noqa: F811 (the fixture, imported)
    air_home: Path,
    kernel_env: dict[str, str],
) -> None:
    """``jupyter server stop`` (SIGTERM) while a session cell runs: the server shuts its
    kernel down, the cell is cut short, and the kernel's end takes the session with it:
    its ranks and supervisor go, the job reads CANCELLED, and every run of it is ended.

    A server killed outright ends the same way: its kernel leaves on its own (ipykernel
    polls its parent every second, ``ParentPollerUnix``, and exits once the server is
    gone: ``test_nothing_outlives_a_killed_jupyter_server``), which is the killed kernel
    of ``test_a_killed_kernel_takes_its_session_down_and_ends_every_run``."""
    kernel = server.kernel()
    try:
        execute(kernel, "%load_ext jupyter_air")
        found = SESSION_JOB.search(execute(kernel, "%air_session start -n 2 --oversubscribe"))
        assert found, "the session did not start"
        job_id = found.group(1)
        execute(kernel, "%%air_distributed --session\nimport time\nx = 1")
        execute(
            kernel, "%%air_distributed --session\nprint('training')\ntime.sleep(600)", "training"
        )
        (kernel_process,) = psutil.Process(server.process.pid).children()
        server.process.terminate()
        stopped_at = time.monotonic()
        kernel_process.wait(30)  # the kernel does not outlive its server (TimeoutExpired)
        assert_gone_within(job_id, stopped_at)
        job = wait_done(air_home, job_id)
        assert job.status == "CANCELLED"
        supervised_until_its_end(job)
    finally:
        kernel.stop_channels()
    client = MlflowClient(kernel_env["MLFLOW_TRACKING_URI"])
    parent_id = str(JobStore(air_home).attempts(job_id)[0].run_id)
    assert client.get_run(parent_id).info.status == "KILLED"
    first, *after = cell_runs(client, parent_id)
    assert first == ("1", "FINISHED")
    # cell 2, cut short, and any run made ahead for a cell that never came
    assert {status for _, status in after} == {"KILLED"}
