"""``--backend slurm``: cells, functions, workloads, sessions and schedules on a real
Slurm cluster of two nodes.

The cluster is Debian's ``slurm-wlm`` on this machine (``tests/slurm_cluster``): one
``slurmctld``, two ``slurmd`` named apart, a ``munged`` of its own, started once for
this module. Jobs run 2 nodes x 1 rank with PyTorch's CPU build and gloo.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from jupyter_air.status import JobStatus
from tests.air_cli import air
from tests.backend_contract import (  # the contract's tests, run on this module's cluster
    Engine,
    contract_home,  # noqa: F401  (the fixture home)
    ended,
    submit,
    test_a_failing_rank_stops_the_others_and_fails_the_attempt,  # noqa: F401
    test_a_retry_is_a_new_attempt_with_its_own_run,  # noqa: F401
    test_a_retry_resumes_from_the_job_s_checkpoint_place,  # noqa: F401
    test_a_terminated_supervisor_ends_every_rank_and_records_the_job_cancelled,  # noqa: F401
    test_cancel_stops_every_rank,  # noqa: F401
    test_each_rank_s_output_is_kept_whole_and_in_order,  # noqa: F401
    test_every_node_s_system_samples_reach_the_attempt_s_run,  # noqa: F401
    test_every_rank_gets_the_torchrun_environment_and_its_own_log,  # noqa: F401
    test_every_rank_runs_in_the_job_s_working_directory_with_its_environment,  # noqa: F401
    test_the_stacks_of_a_running_job_s_ranks_are_taken_on_their_nodes,  # noqa: F401
    test_the_timeout_stops_every_rank_and_fails_the_job,  # noqa: F401
)
from tests.kernel.conftest import Kernel
from tests.kernel.test_distributed_magic import TRAINING, job_id_of, mlflow_client, runs_of_job
from tests.kernel.test_ray_backend import RAY_DDP_CELL
from tests.kernel.test_session import SESSION_JOB, two_node_session_keeps_its_group
from tests.mlflow_store import fresh_store
from tests.slurm_cluster import SlurmCluster, agents_of, available, slurm_cluster
from tests.sweeps.test_sweep_jobs import a_sweep_side_by_side
from tests.waits import job_processes, supervised_until_its_end, until, wait_done

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not available(), reason="needs slurm-wlm and munge (make setup)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The cluster, and SLURM_CONF naming it for this process and what it starts."""
    with (
        slurm_cluster(tmp_path_factory.mktemp("slurm")) as running,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("SLURM_CONF", str(running.conf))
        for name in [n for n in os.environ if n.startswith("SLURM_JOB")]:
            env.delenv(name)
        yield running


@pytest.fixture
def engine(cluster: SlurmCluster) -> Engine:
    return Engine("slurm", nnodes=2, nproc_per_node=1)


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str], cluster: SlurmCluster) -> dict[str, str]:
    return {**kernel_env, **cluster.env}


@contextlib.contextmanager
def nodes_held(cluster: SlurmCluster) -> Iterator[subprocess.Popen[bytes]]:
    """Both nodes held by another job (``blocker``), which the block may end early."""
    blocker = cluster.start("srun", "-N2", "--exclusive", "-J", "blocker", "sleep", "600")
    try:
        until(lambda: any("|RUNNING|blocker|" in q for q in cluster.queue()), "the blocker", 60)
        yield blocker
    finally:
        blocker.terminate()
        blocker.wait(30)


@pytest.fixture(autouse=True)
def nothing_left_in_the_queue(cluster: SlurmCluster) -> Iterator[None]:
    """After every test: none of our Slurm jobs is left in ``squeue`` within 10 s."""
    yield

    def ours() -> list[str]:
        return [line for line in cluster.queue() if "|air-" in line]

    until(lambda: not ours(), "none of our jobs left in squeue", 10, seen=ours)


#: Ray's DDP cell on Slurm, each rank also saying how its launch looks to Lightning.
SLURM_DDP_CELL = (
    RAY_DDP_CELL.replace("--backend ray", "--backend slurm")
    .replace("--run-name ray-ddp", "--run-name slurm-ddp")
    .replace(
        "\nmine = (",
        "\nfrom lightning.fabric.plugins import environments as lightning"
        "\nlaunch = {'slurm_vars': sorted(k for k in os.environ if k.startswith(('SLURM', 'PMI'))),"
        "\n          'lightning_sees_slurm': lightning.SLURMEnvironment.detect(),"
        "\n          'lightning_sees_torchrun': lightning.TorchElasticEnvironment.detect()}"
        "\nimport accelerate, transformers"
        "\nstate = accelerate.PartialState(cpu=True)  # as accelerate launch --cpu"
        "\nlaunch['accelerate'] = (state.distributed_type.value, state.num_processes)"
        "\nhf = transformers.TrainingArguments(output_dir='hf-out', use_cpu=True, report_to=[])"
        "\nlaunch['hf_trainer'] = (hf.parallel_mode.value, hf.world_size)"
        "\nmine = (",
    )
    .replace(
        "{k: os.environ.get(k) for k in names})", "{k: os.environ.get(k) for k in names}, launch)"
    )
)


def test_ddp_across_two_slurm_nodes_agrees_and_looks_like_torchrun(
    kernel: Kernel, air_home: Path
) -> None:
    assert kernel.run(TRAINING).error is None
    execution = kernel.run(SLURM_DDP_CELL)
    assert execution.error is None, execution.traceback
    (params_0, env_0, launch_0), (params_1, env_1, launch_1) = eval(execution.value())
    assert params_0 == params_1, "DDP ranks on the two nodes ended with different parameters"
    assert [env_0["GROUP_RANK"], env_1["GROUP_RANK"]] == ["0", "1"]
    assert env_0["MASTER_ADDR"] == env_1["MASTER_ADDR"]
    for launch in (launch_0, launch_1):
        assert launch == {
            "slurm_vars": [],
            "lightning_sees_slurm": False,
            "lightning_sees_torchrun": True,
            "accelerate": ("MULTI_CPU", 2),
            "hf_trainer": ("distributed", 2),
        }, "a rank under Slurm must look like a torchrun launch, not like a Slurm task"
    assert "[node 1 rank 1] step 4 loss" in execution.stdout

    job_id = job_id_of(execution)
    store = JobStore(air_home)
    attempt_dir = store.attempt_dir(job_id, 1)
    assert (attempt_dir / "logs/node_0/rank_0.log").exists()
    assert (attempt_dir / "logs/node_1/rank_1.log").exists()
    nodes = AttemptDir(attempt_dir).read_nodes()
    assert [(n["node"], n["node_id"]) for n in nodes] == [(0, "air-n1"), (1, "air-n2")]
    for node in (0, 1):  # what the GPU panel's node selector shows for each Slurm node
        snapshot = AttemptDir(attempt_dir).read_gpu(node)
        assert snapshot is not None, f"node {node}: no GPU sample"
        assert snapshot["gpus"][0]["name"]
    supervised_until_its_end(store.get(job_id))
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "FINISHED"
    metrics = set(mlflow_client(air_home).get_run(run.info.run_id).data.metrics)
    for name in ("node_0", "node_1"):
        assert f"system/{name}/cpu_utilization_percentage" in metrics
        assert f"system/{name}/gpu_0_utilization_percentage" in metrics
    assert job_processes(job_id) == []


def test_bad_slurm_settings_are_refused_in_one_line_before_anything_is_submitted(
    kernel: Kernel, cluster: SlurmCluster
) -> None:
    def refusal(options: str) -> str:
        execution = kernel.run(f"%%air_distributed --backend slurm --nnodes 2 {options}\n1")
        assert execution.error is None, "refused as a usage error: no traceback"
        (line,) = execution.stderr.strip().splitlines()
        return line

    said = refusal("--slurm partition=nope")
    assert said.startswith("UsageError: Slurm: invalid partition specified: nope"), said
    said = refusal("--slurm args=--nodes=3")
    assert "--nodes is set by jupyter_air from the job's shape" in said, said
    said = refusal("--slurm time=5 --slurm partition=small")
    assert "Slurm: allocation failure: Requested node configuration is not av" in said, said
    said = refusal("--slurm cpus_per_task=0")
    assert "cpus_per_task" in said, said
    assert cluster.queue() == [], "nothing was submitted"


def test_a_queued_job_is_pending_with_slurm_s_reason_and_cancels_from_the_queue(
    cluster: SlurmCluster, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(home))
    with nodes_held(cluster):
        service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), home, "print(1)")

        def queued() -> bool:
            seen = service.store.get(job.id)
            return seen.status is JobStatus.PENDING and bool(seen.message)

        until(queued, "the job PENDING in Slurm's queue", 120)
        message = service.store.get(job.id).message or ""
        assert re.fullmatch(r"PENDING \((Resources|Priority)\), Slurm job \d+", message), message
        shown = air("get", job.id)
        assert message in shown.stdout, shown.stdout + shown.stderr
        listed = air("list")
        assert "PENDING" in listed.stdout, listed.stdout

        cancelled_at = time.monotonic()
        service.cancel(job.id)
        assert ended(service, job).status is JobStatus.CANCELLED
        until(
            lambda: not any("|air-" in q for q in cluster.queue()),
            "the cancelled job out of squeue",
            max(0.0, cancelled_at + 10 - time.monotonic()),
            step=0.1,
            seen=cluster.queue,
        )


def test_a_killed_node_agent_fails_the_attempt_naming_its_node(
    cluster: SlurmCluster, home: Path
) -> None:
    service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), home,
                          "import time; time.sleep(600)")  # fmt: skip
    until(lambda: len(job_processes(job.id)) >= 2, "both ranks", 120)
    (agent,) = [p for p in agents_of(job.id) if p.environ().get("SLURM_NODEID") == "1"]
    agent.kill()
    job = ended(service, job)
    assert job.status is JobStatus.FAILED
    assert "node 1 (air-n2, " in (job.message or ""), job.message
    assert "its agent exited" in (job.message or ""), job.message
    assert job_processes(job.id) == []


def test_inside_an_allocation_the_job_runs_as_a_step_of_it(
    cluster: SlurmCluster, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in ``salloc`` or a server that batchspawner started: no second allocation."""
    allocated = cluster.run("salloc", "-N2", "--no-shell", "-J", "notebook")
    slurm_job = re.search(r"Granted job allocation (\d+)", allocated.stderr)
    assert slurm_job, allocated.stderr
    try:
        monkeypatch.setenv("SLURM_JOB_ID", slurm_job.group(1))
        monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
        service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), home,
                              "import time; time.sleep(2); print('in the step')")  # fmt: skip
        until(lambda: len(job_processes(job.id)) >= 2, "both ranks", 120)
        assert [q.split("|")[2] for q in cluster.queue()] == ["notebook"], "one allocation"
        steps = cluster.run("squeue", "-h", "-s", "-j", slurm_job.group(1), "-o", "%j").stdout
        assert f"air-{job.id}-1" in steps
        assert ended(service, job).status is JobStatus.SUCCEEDED
        assert cluster.queue()[0].split("|")[1] == "RUNNING", "the allocation stays the user's"
    finally:
        cluster.run("scancel", slurm_job.group(1), check=False)


def test_air_run_places_a_workload_with_slurm_settings_on_two_nodes(
    cluster: SlurmCluster, tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        "experiment_name: slurm-workload\n"
        f"command: {sys.executable} -c \"import os; print('node', os.environ['GROUP_RANK'])\"\n"
        "backend: slurm\n"
        "compute: {nnodes: 2, nproc_per_node: 1}\n"
        "slurm: {partition: debug, time: '5', cpus_per_task: 1}\n"
        f"working_dir: {tmp_path}\n"
    )
    ran = air("run", "-f", str(workload), "--watch")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    job_id = re.search(r"Job (\S+) submitted", ran.stdout)
    assert job_id, ran.stdout
    node_1 = air("logs", job_id.group(1), "--node", "1")
    assert "node 1 rank 1 INFO node 1" in node_1.stdout, node_1.stdout + node_1.stderr

    workload.write_text(workload.read_text().replace("partition: debug", "partition: small"))
    refused = air("run", "-f", str(workload))
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr, refused.stderr


def test_a_sweep_runs_its_2_node_trials_as_concurrent_slurm_jobs(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: two trials at once, each a Slurm job on both nodes. The tracking store is
    new: the sweep's driver makes the sweep's run while the first trials' supervisors
    make theirs, each migrating the store in turn."""
    home = tmp_path / "home"
    monkeypatch.setenv("AIR_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.chdir(tmp_path)
    backend = {"backend": "slurm", "compute": {"nnodes": 2, "nproc_per_node": 1}}
    jobs = a_sweep_side_by_side(tmp_path, home, backend)
    store = JobStore(home)
    for job in jobs:
        assert job.spec.backend.name == "slurm"
        nodes = AttemptDir(store.attempt_dir(job.id, 1)).read_nodes()
        assert [n["node_id"] for n in nodes] == ["air-n1", "air-n2"]
    until(lambda: not any(job_processes(j.id) for j in jobs), "the trials' ranks gone", 30)


def test_a_session_on_two_slurm_nodes_keeps_its_ranks_in_one_allocation(
    kernel: Kernel, air_home: Path, cluster: SlurmCluster
) -> None:
    started = kernel.run("%air_session start --backend slurm --nnodes 2 -n 1")
    assert started.error is None, started.traceback
    assert "2 ranks on 2 Slurm nodes" in started.text, started.text
    found = SESSION_JOB.search(started.text)
    assert found, started.text
    job_id = found.group(1)
    two_node_session_keeps_its_group(kernel)
    assert [q.split("|")[2] for q in cluster.queue()] == [f"air-{job_id}-1"], "one allocation"

    kernel.run("%air_session stop")
    job = wait_done(air_home, job_id)
    assert job.status == "SUCCEEDED"
    supervised_until_its_end(job)
    until(lambda: job_processes(job_id) == [], "the session's ranks gone", 30)


def test_interrupting_a_cell_waiting_in_the_queue_cancels_its_slurm_job(
    kernel: Kernel, air_home: Path, cluster: SlurmCluster
) -> None:
    with nodes_held(cluster):
        msg_id = kernel.start("%%air_distributed --backend slurm --nnodes 2 -n 1\nprint('never')")
        store = JobStore(air_home)

        def pending() -> bool:
            return any(j.status == "PENDING" and j.message for j in store.jobs())

        until(pending, "the cell's job PENDING in the queue", 120)
        kernel.wait_shown(msg_id, "· PENDING (Resources), Slurm job ")
        kernel.interrupt()
        execution = kernel.collect(msg_id)
        assert execution.error is not None
        assert execution.error["ename"] == "Interrupted"
        said = [text for text in execution.shown if "· PENDING (Resources), Slurm job " in text]
        assert said, execution.shown
        assert said[0].startswith("pending · "), said[0]
        (job,) = [j for j in store.jobs() if j.status == "CANCELLED"][:1]
        assert job.message is None or "Slurm job" not in job.message


def test_a_decorated_function_runs_on_two_slurm_nodes(kernel: Kernel) -> None:
    execution = kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(backend='slurm', nnodes=2, nproc_per_node=1, slurm={'time': 5})\n"
        "def where(scale):\n"
        "    import os\n"
        "    print('on', os.environ['GROUP_RANK'], flush=True)\n"
        "    return int(os.environ['WORLD_SIZE']) * scale\n"
        "where.distributed(10)"
    )
    assert execution.value() == "20"
    assert "[node 1 rank 1] on 1" in execution.stdout, execution.stdout


def test_a_silent_caller_at_the_supervisor_s_port_does_not_hold_up_the_agents(
    cluster: SlurmCluster, home: Path
) -> None:
    """Another user (or host) connects to where the agents call back and says nothing:
    the agents still get in, and the job runs."""
    with nodes_held(cluster) as blocker:
        service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), home, "print(1)")
        until(lambda: bool(service.store.get(job.id).message), "queued, said so", 120)
        supervisor = psutil.Process(service.store.get(job.id).supervisor_pid or 0)
        (port,) = [c.laddr for c in supervisor.net_connections("tcp") if c.status == "LISTEN"]
        silent = [socket.create_connection((port.ip, port.port)) for _ in range(3)]
        blocker.terminate()
        assert ended(service, job).status is JobStatus.SUCCEEDED, service.store.get(job.id).message
        for sock in silent:
            sock.close()


def test_a_node_slurm_takes_down_fails_the_attempt_naming_it_and_why(
    cluster: SlurmCluster, home: Path
) -> None:
    service, job = submit(Engine("slurm", nnodes=2, nproc_per_node=1), home,
                          "import time; time.sleep(600)")  # fmt: skip
    until(lambda: len(job_processes(job.id)) >= 2, "both ranks", 120)
    cluster.run("scontrol", "update", "nodename=air-n2", "state=down", "reason=bad gpu")
    try:
        job = ended(service, job)
        assert job.status is JobStatus.FAILED
        message = job.message or ""
        assert message.startswith("node 1 (air-n2, "), message
        assert "was taken away by Slurm (down" in message, message
        assert "bad gpu" in message, message
        until(lambda: job_processes(job.id) == [], "the ranks gone", 30)
    finally:
        cluster.run("scontrol", "update", "nodename=air-n2", "state=resume")
        until(lambda: cluster.node_state("air-n2") == "idle", "air-n2 back", 60)


HUNG = """\
import os, time

def wait_forever():
    while True:
        time.sleep(1)

print("ready", flush=True)
wait_forever()
"""


def test_air_stacks_shows_each_slurm_node_s_rank(
    cluster: SlurmCluster, tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    (tmp_path / "hung.py").write_text(HUNG)
    (tmp_path / "workload.yaml").write_text(
        "experiment_name: slurm-stacks\n"
        f"command: {sys.executable} {tmp_path / 'hung.py'}\n"
        "backend: slurm\n"
        "compute: {nnodes: 2, nproc_per_node: 1}\n"
        f"working_dir: {tmp_path}\n"
    )
    submitted = air("run", "-f", str(tmp_path / "workload.yaml"))
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(r"Job (\S+) submitted", submitted.stdout)
    assert found, submitted.stdout
    job_id = found.group(1)
    try:
        until(lambda: air("logs", job_id).stdout.count(" ready") == 2, "both ranks", 180)
        shown = air("stacks", job_id)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        assert "=== node 0 rank 0" in out, out
        assert "=== node 1 rank 1" in out, out
        assert out.count("wait_forever (hung.py:5)") == 2, out
    finally:
        air("cancel", job_id)
    until(lambda: job_processes(job_id) == [], "the job's ranks gone", 60)


SCHEDULE = """\
name: nightly-slurm
schedule:
  cron: "0 3 * * *"
  pause_status: PAUSED
experiment_name: nightly
tasks:
  - task_key: train
    workload:
      command: {python} -c "import os; print('node', os.environ['GROUP_RANK'])"
      backend: slurm
      compute: {{nnodes: 2, nproc_per_node: 1}}
      slurm: {{partition: debug, time: 5}}
"""


def test_a_scheduled_task_runs_on_two_slurm_nodes(
    cluster: SlurmCluster, tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air.schedules.scheduler import stop

    home = tmp_path / "air"
    monkeypatch.setenv("AIR_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SCHEDULE.format(python=sys.executable))
    try:
        created = air("schedule", "create", "-f", "s.yaml")
        assert created.returncode == 0, created.stderr
        fired = air("schedule", "run-now", "nightly-slurm")
        assert fired.returncode == 0, fired.stderr

        def ended_run() -> dict[str, object] | None:
            runs = json.loads(air("schedule", "runs", "nightly-slurm", "--output", "json").stdout)
            return next((r for r in runs if r["status"] not in ("RUNNING", "SKIPPED")), None)

        until(lambda: ended_run() is not None, "the schedule's run to end", 240)
        run = ended_run()
        assert run is not None
        assert run["status"] == "SUCCEEDED", run
        (job,) = JobStore(home).jobs()
        assert job.spec.backend.name == "slurm"
        assert job.spec.compute.nnodes == 2
        node_1 = air("logs", job.id, "--node", "1")
        assert "node 1 rank 1 INFO node 1" in node_1.stdout, node_1.stdout + node_1.stderr
    finally:
        stop(home)
