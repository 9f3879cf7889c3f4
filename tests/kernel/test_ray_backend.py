"""``--backend ray``: the same cells, workloads and warm sessions on a Ray cluster of two
nodes.

The cluster is real Ray, simulated on this machine with ``ray.cluster_utils.Cluster``:
a head and a second node, one CPU each, the fake NVML driver on both, started once for
this module. Jobs run 2 nodes x 1 rank with PyTorch's CPU build and gloo.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_air.job_dir import AttemptDir, JobDir
from jupyter_air.jobs.store import JobStore
from tests.backend_contract import (  # the contract's tests, run on this module's cluster
    Engine,
    contract_home,  # noqa: F401  (the fixture home)
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
from tests.fake_nvml import FakeGpu, Scenario, env_for
from tests.kernel.conftest import Kernel, execute_notebook, running_job
from tests.kernel.test_debugger import CELL as DEBUG_CELL
from tests.kernel.test_debugger import answered
from tests.kernel.test_distributed_magic import (
    TRAINING,
    job_id_of,
    mlflow_client,
    runs_of_job,
)
from tests.kernel.test_session import SESSION_JOB, cell, two_node_session_keeps_its_group
from tests.sweeps.test_sweep_jobs import a_sweep_side_by_side
from tests.waits import (
    assert_gone_within,
    job_processes,
    supervised_until_its_end,
    until,
    wait_done,
    wait_settled,
)

# The first test of a module that uses ``cluster`` pays for its start: up to three tries
# (``start_with_retries``) of up to about two minutes each on a loaded machine (110 s
# beside two busy loops), so the suite's 300 s per test is not enough for it.
RAY_MODULE_TIMEOUT = pytest.mark.timeout(900)
pytestmark = [pytest.mark.ray, RAY_MODULE_TIMEOUT]
ROOT = Path(__file__).resolve().parents[2]

RAY_DDP_CELL = """%%air_distributed --backend ray --nnodes 2 -n 1 --run-name ray-ddp
import os, mlflow, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(build_model())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
shard = inputs[rank::2], targets[rank::2]
for step in range(5):
    opt.zero_grad()
    loss = ((model(shard[0]) - shard[1]) ** 2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        with mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"]):
            mlflow.log_metric("train_loss", loss.item(), step=step)
names = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
         "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS")
mine = ([p.detach().flatten().tolist() for p in model.parameters()],
        {k: os.environ.get(k) for k in names})
everyone = [None, None]
dist.all_gather_object(everyone, mine)
dist.destroy_process_group()
everyone
"""


# Ray's waits while a node starts, raised for a loaded machine (CI shares its 2 cores with
# other work). Set in the environment, which Ray reads here and the raylets inherit.
RAY_START_LIMITS = {
    # A node has started once its raylet is in the GCS's node table: Ray polls the table this
    # long (GlobalStateAccessor::GetNode; node.py adds a 30 s loop of its own around it), then
    # raises "The current node timed out during startup". Default 30 s: the raylet needs
    # that much alone under load (up to 15 s for each of its two agents, see below). Not
    # more: a raylet that gave up on its agents does not come back, and three tries of
    # 60 s fit the setup's 300 s.
    "RAY_raylet_start_wait_time_s": "60",
    # The head waits this long for the GCS to write its port, and every node tries about
    # once a second, as many times, to connect to the GCS. Defaults 30 s and 20 tries.
    "RAY_gcs_server_port_wait_time_s": "60",
    # The raylet's deadline for its runtime env agent to answer when it starts the first
    # workers; past it the raylet exits. Default 30 s.
    "RAY_agent_register_timeout_ms": "120000",
}
# Not raisable: the raylet gives its dashboard and runtime env agents a fixed 15 s to report
# their ports and aborts otherwise (NodeManager::WaitForDashboardAgentPorts). Under load
# their Python start can take that long (less since the test environment pins jsonschema
# below 4.25: see docs/ray.md, "A slow start"), so a start that times out is tried again.


def start_two_nodes(env: pytest.MonkeyPatch) -> tuple[Any, str]:
    """Two Ray nodes with one CPU each, on a new RAY_TMPDIR; a start that fails leaves
    nothing running."""
    from ray.cluster_utils import Cluster

    # Short: Ray's socket paths under it must fit in 107 bytes. Also keeps /tmp/ray clean.
    ray_tmp = tempfile.mkdtemp(prefix="airray", dir="/tmp")
    env.setenv("RAY_TMPDIR", ray_tmp)
    ray_cluster = Cluster()  # the head by add_node, so that a failed one can be shut down
    try:
        ray_cluster.add_node(num_cpus=1, num_gpus=0, include_dashboard=False)
        ray_cluster.add_node(num_cpus=1, num_gpus=0)
        ray_cluster.wait_for_nodes(timeout=120)
    except BaseException as error:
        error.add_note(raylet_logs(Path(ray_tmp)))
        stop_cluster(ray_cluster, ray_tmp)
        raise
    return ray_cluster, ray_tmp


def raylet_logs(ray_tmp: Path, lines: int = 15) -> str:
    """The last lines each raylet and agent logged: why a node did not come up."""
    tails = []
    for log in sorted(ray_tmp.glob("ray/session_*/logs/*")):
        if log.is_file() and log.name.startswith(("raylet", "gcs_server", "dashboard_agent")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(tails) or f"no raylet logs under {ray_tmp}"


def stop_cluster(ray_cluster: Any, ray_tmp: str) -> None:
    """Shut the cluster down, then kill what is left of it: the processes of a node that
    failed to start, which the cluster does not know, and any worker still running."""
    try:
        ray_cluster.shutdown()
    finally:
        leftovers = [
            proc
            for proc in psutil.process_iter(["cmdline", "environ"])
            if proc.pid != os.getpid()
            and (
                (proc.info["environ"] or {}).get("RAY_TMPDIR") == ray_tmp
                or any(ray_tmp in arg for arg in proc.info["cmdline"] or ())
            )
        ]
        for proc in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        _, alive = psutil.wait_procs(leftovers, timeout=30)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert not alive, f"Ray processes outlived SIGKILL: {alive}"


def start_with_retries(env: pytest.MonkeyPatch, tries: int = 3) -> tuple[Any, str]:
    """Two Ray nodes, started again where a start timed out (at most ``tries`` in all);
    each failed start warns with what its raylets last logged."""
    for _ in range(tries - 1):
        try:
            return start_two_nodes(env)
        except Exception as error:
            if not start_timed_out(error):
                raise
            notes = "\n".join(getattr(error, "__notes__", ()))
            warnings.warn(f"Ray cluster start, once more: {error}\n{notes}", stacklevel=1)
    return start_two_nodes(env)


def start_timed_out(error: Exception) -> bool:
    """Whether one of Ray's waits for a starting node ran out (see RAY_START_LIMITS)."""
    return isinstance(error, TimeoutError) or "timed out" in str(error).lower()


@pytest.fixture(scope="module")
def cluster(fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two Ray nodes with one CPU each; their workers (the node agents) see the fake GPU."""
    scenario = Scenario(gpus=[FakeGpu(util=[30, 50], temp=[40, 42])])
    scenario_path = scenario.write(tmp_path_factory.mktemp("ray-nvml") / "scenario.txt")
    with pytest.MonkeyPatch.context() as env:  # the raylets, and so the agents, inherit it
        for name, value in {
            **env_for(fake_nvml_dir, scenario_path),
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            **RAY_START_LIMITS,
        }.items():
            env.setenv(name, value)
        ray_cluster, ray_tmp = start_with_retries(env)
    yield ray_cluster
    stop_cluster(ray_cluster, ray_tmp)


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str], cluster: Any) -> dict[str, str]:
    return {**kernel_env, "RAY_ADDRESS": cluster.address, "RAY_AUTH_MODE": "disabled"}


def cluster_holdings(env: dict[str, str]) -> dict[str, Any]:
    """What the cluster still holds for anyone: placement groups not removed, actors
    alive, CPUs in use (asked from a separate driver, as an operator would)."""
    code = (
        "import json, ray\n"
        "ray.init(log_to_driver=False)\n"
        "groups = [g for g in ray.util.placement_group_table().values()\n"
        "          if g['state'] != 'REMOVED']\n"
        "total, free = ray.cluster_resources(), ray.available_resources()\n"
        "print(json.dumps({'groups': len(groups),\n"
        "                  'cpus_in_use': total.get('CPU', 0) - free.get('CPU', 0)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def wait_released(env: dict[str, str], timeout: float = 60) -> dict[str, Any]:
    free = {"groups": 0, "cpus_in_use": 0}
    return until(
        lambda: held if (held := cluster_holdings(env)) == free else None,
        "nothing held on the cluster",
        timeout,
        step=1,
        seen=lambda: cluster_holdings(env),
    )


def test_ddp_across_two_nodes_agrees_and_logs_per_node(kernel: Kernel, air_home: Path) -> None:
    assert kernel.run(TRAINING).error is None
    execution = kernel.run(RAY_DDP_CELL)
    assert execution.error is None, execution.traceback
    (params_0, env_0), (params_1, env_1) = eval(execution.value())
    assert params_0 == params_1, "DDP ranks on the two nodes ended with different parameters"
    job_id = job_id_of(execution)
    assert [env_0["RANK"], env_1["RANK"]] == ["0", "1"]
    assert [env_0["GROUP_RANK"], env_1["GROUP_RANK"]] == ["0", "1"]
    assert [env_0["LOCAL_RANK"], env_1["LOCAL_RANK"]] == ["0", "0"]
    for env in (env_0, env_1):
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "1")
        assert env["TORCHELASTIC_RUN_ID"] == job_id
        assert env["OMP_NUM_THREADS"] is None, "one rank per node: torchrun sets none, nor do we"
    assert env_0["MASTER_ADDR"] == env_1["MASTER_ADDR"]
    assert env_0["MASTER_PORT"] == env_1["MASTER_PORT"]

    for step in range(5):  # every line of both nodes, none collapsed by Ray's deduplication
        assert execution.stdout.count(f"] step {step} loss") == 2, execution.stdout
    assert "[node 1 rank 1] step 4 loss" in execution.stdout

    store = JobStore(air_home)
    attempt_dir = store.attempt_dir(job_id, 1)
    assert (attempt_dir / "logs/node_0/rank_0.log").exists()
    assert (attempt_dir / "logs/node_1/rank_1.log").exists()
    nodes = AttemptDir(attempt_dir).read_nodes()
    assert [n["node"] for n in nodes] == [0, 1]
    assert nodes[0]["node_id"] != nodes[1]["node_id"], "nodes told apart by Ray's node id"
    for node in (0, 1):
        snapshot = AttemptDir(attempt_dir).read_gpu(node)
        assert snapshot is not None, f"node {node}: no GPU sample"
        assert snapshot["gpus"][0]["name"]

    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "FINISHED"
    client = mlflow_client(air_home)
    supervised_until_its_end(store.get(job_id))  # it attaches the logs after the job's end
    for node, rank in ((0, 0), (1, 1)):
        logs = {a.path for a in client.list_artifacts(run.info.run_id, f"logs/node_{node}")}
        assert logs == {f"logs/node_{node}/rank_{rank}.log"}
    assert (run.data.tags["air.nnodes"], run.data.tags["air.nproc_per_node"]) == ("2", "1")
    losses = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in losses) == [0, 1, 2, 3, 4]
    # The supervisor logs the nodes' last samples until its end, after the cell's return.
    metrics = set(client.get_run(run.info.run_id).data.metrics)
    for name in ("node_0", "node_1"):
        assert f"system/{name}/cpu_utilization_percentage" in metrics
        assert f"system/{name}/gpu_0_utilization_percentage" in metrics
        assert f"system/{name}/gpu_0_temperature_celsius" in metrics
    assert not any(m.startswith("system/cpu") for m in metrics), "the driver is not a node"
    assert job_processes(job_id) == []


def system_metrics_of(kernel: Kernel, air_home: Path, cell: str) -> set[str]:
    """The system metrics' names in the run of the job ``cell`` ran, once its tail is done."""
    execution = kernel.run(cell)
    assert execution.error is None, execution.traceback
    job_id = job_id_of(execution)
    supervised_until_its_end(wait_done(air_home, job_id))
    (run,) = runs_of_job(air_home, job_id)
    return {key for key in run.data.metrics if key.startswith("system/")}


#: A local job that waits for its run's first host-CPU sample (the supervisor loads MLflow's
#: monitors first: seconds on a loaded machine). One that ends sooner has no CPU figure,
#: since none was measured (its run's tail, taken after it, leaves psutil's 0.0 out);
#: a Ray node samples as it closes.
SAMPLED = """import os, time
from mlflow import MlflowClient
history, deadline = MlflowClient().get_metric_history, time.monotonic() + 120
while not history(os.environ["MLFLOW_RUN_ID"], "system/cpu_utilization_percentage"):
    assert time.monotonic() < deadline, "no host-CPU sample in the run"
    time.sleep(0.5)"""


def test_a_ranks_breakpoint_on_a_ray_node_stops_in_the_cell(kernel: Kernel) -> None:
    """Ray makes every worker's ``breakpoint()`` its own remote pdb, which waits for ``ray
    debug``: a rank's stops at the cell's prompt instead, as on the local backend."""
    on_ray = DEBUG_CELL.replace("-n 2", "--backend ray --nnodes 2 -n 1")
    prompts, execution = answered(kernel, on_ray, ["p x", "c"], timeout=150)
    assert execution.error is None, execution.traceback
    assert prompts == ["(Pdb rank 1) "] * 2
    assert "41\n" in execution.stdout
    assert "rank 0 went on with 40" in execution.text


def test_ray_nodes_record_the_system_metrics_a_local_job_does_under_the_same_names(
    kernel: Kernel, air_home: Path
) -> None:
    """One sampler and one path into MLflow for every backend: a one-node Ray job's run
    has a local job's metrics of the machine, and each node of two has them under its
    own name. The energy is the job's GPUs' (``tracking.energy``): this local job's rank
    holds none (``CUDA_VISIBLE_DEVICES=""``), while Ray gives its actors the node's."""

    def of_machine(metrics: set[str]) -> set[str]:
        return {key for key in metrics if "gpu_energy" not in key}

    work = "import time\ntime.sleep(1.5)"
    local = system_metrics_of(kernel, air_home, f"%%air_distributed -n 1\n{SAMPLED}")
    assert {"system/cpu_utilization_percentage", "system/gpu_0_utilization_percentage"} <= local
    assert of_machine(local) == local, "no GPU of its own: no energy"
    one_node = f"%%air_distributed --backend ray --nnodes 1 -n 1\n{work}"
    assert of_machine(system_metrics_of(kernel, air_home, one_node)) == local
    two_nodes = f"%%air_distributed --backend ray --nnodes 2 -n 1\n{work}"
    assert of_machine(system_metrics_of(kernel, air_home, two_nodes)) == {
        key.replace("system/", f"system/node_{node}/") for key in local for node in (0, 1)
    }


def test_a_rank_failing_on_node_1_stops_every_rank_on_every_node_and_is_retried(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    execution = kernel.run(
        "%%air_distributed --backend ray --nnodes 2 -n 1 --max-retries 1\n"
        "import os, time\n"
        "print('up', flush=True)\n"
        "if os.environ['GROUP_RANK'] == '1':\n"
        "    time.sleep(1)\n"
        "    raise RuntimeError('node one is unhappy')\n"
        "time.sleep(300)\n"
    )
    assert execution.error is not None
    assert execution.error["ename"] == "JobFailed"
    message = execution.error["evalue"]
    assert "rank 1 exited with code 1 on node 1 (" in message, message
    assert "] RuntimeError: node one is unhappy" in execution.stderr
    job_id = job_id_of(execution)
    store = JobStore(air_home)
    assert store.get(job_id).status == "FAILED"
    attempts = store.attempts(job_id)
    assert [a.status for a in attempts] == ["FAILED", "FAILED"], "one job, two attempts"
    assert [a.failed_rank for a in attempts] == [1, 1]
    runs = runs_of_job(air_home, job_id)
    assert [r.info.status for r in runs] == ["FAILED", "FAILED"], "a run per attempt"
    assert job_processes(job_id) == []
    wait_released(kernel_env)


def test_interrupting_the_kernel_stops_every_node_and_releases_the_cluster(
    kernel: Kernel, air_home: Path, kernel_env: dict[str, str]
) -> None:
    msg_id = kernel.start(
        "%%air_distributed --backend ray --nnodes 2 -n 1\n"
        "import time\nprint('started', flush=True)\ntime.sleep(300)"
    )
    store = JobStore(air_home)
    job_id = running_job(air_home, 2, timeout=120)
    kernel.interrupt()
    execution = kernel.collect(msg_id)
    assert execution.error is not None
    assert execution.error["ename"] == "Interrupted"  # a KeyboardInterrupt, in one line
    assert store.get(job_id).status == "CANCELLED"
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "KILLED"
    assert job_processes(job_id) == []
    wait_released(kernel_env)


def test_more_nodes_than_the_cluster_has_fail_saying_what_is_there(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run("%%air_distributed --backend ray --nnodes 3 -n 1\nprint('never')")
    assert execution.error is not None
    assert execution.error["ename"] == "JobFailed"
    message = execution.error["evalue"]
    assert "asked for 3 nodes with CPU 1 each" in message, message
    assert "has 2 alive node(s), 2 of which can hold that" in message
    assert "never" not in execution.stdout
    assert job_processes(job_id_of(execution)) == []


def test_an_unreachable_cluster_is_refused_before_anything_starts(
    kernel: Kernel, air_home: Path
) -> None:
    before = len(JobStore(air_home).jobs())
    execution = kernel.run(
        "%%air_distributed --backend ray --nnodes 2 --ray-address 127.0.0.1:1\nprint('never')"
    )
    # IPython shows a UsageError on stderr, with the usage text, rather than as an error
    assert execution.stderr.startswith("UsageError: cannot reach the Ray cluster at 127.0.0.1:1")
    assert len(JobStore(air_home).jobs()) == before


def test_the_kernel_configuration_names_the_cluster_when_the_call_does_not(
    kernel: Kernel,
) -> None:
    kernel.run("%config AirMagics.ray_address = '127.0.0.1:1'")
    try:
        execution = kernel.run("%%air_distributed --backend ray --nnodes 2\nprint('never')")
    finally:
        kernel.run("%config AirMagics.ray_address = None")
    assert execution.stderr.startswith("UsageError: cannot reach the Ray cluster at 127.0.0.1:1")


def test_several_nodes_need_the_ray_backend(kernel: Kernel) -> None:
    execution = kernel.run("%%air_distributed --nnodes 2\nprint('never')")
    assert execution.stderr.startswith("UsageError: --nnodes 2 needs a cluster: add --backend ray")


def test_without_ray_installed_the_error_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from jupyter_air.jobs.backends.ray.cluster import require_ray\n"
        "require_ray()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode != 0
    assert "pip install 'jupyter-air[ray]'" in result.stderr


WORKER = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"node {os.environ['GROUP_RANK']} rank {dist.get_rank()} sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""


def test_air_run_places_a_workload_on_two_nodes(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "workload.yaml").write_text(
        "experiment_name: ray-cli\n"
        f"command: {sys.executable} worker.py\n"
        "backend: ray\n"
        "compute:\n  nnodes: 2\n  nproc_per_node: 1\n"
    )
    air = [sys.executable, "-m", "jupyter_air.cli"]
    submitted = subprocess.run(
        [*air, "run", "-f", "workload.yaml", "--watch"],
        env=kernel_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = job_id_of_cli(submitted.stdout)
    # --watch ends with the outcome; its run's tail is done after it.
    assert wait_settled(air_home, job_id).status == "SUCCEEDED"
    logs = subprocess.run(
        [*air, "logs", job_id], env=kernel_env, capture_output=True, text=True, timeout=60
    ).stdout
    assert "node 0 rank 0 INFO node 0 rank 0 sum 3" in logs, logs
    assert "node 1 rank 1 INFO node 1 rank 1 sum 3" in logs, logs
    got = subprocess.run(
        [*air, "get", job_id, "--output", "json"],
        env=kernel_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    document = json.loads(got.stdout)
    assert document["status"] == "SUCCEEDED"
    assert document["attempts"][0]["exit_codes"] == [0, 0]
    assert [n["node"] for n in document["attempts"][0]["nodes"]] == [0, 1]
    assert wait_done(air_home, job_id).status == "SUCCEEDED"
    assert job_processes(job_id) == []


HUNG_WORKER = """\
import time
import torch, torch.distributed as dist


def wait_forever():
    while True:
        time.sleep(0.2)


dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    wait_forever()
dist.all_reduce(torch.ones(1))
"""


def test_air_stacks_shows_each_node_s_rank_where_it_is_stuck(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "hung.py").write_text(HUNG_WORKER)
    (tmp_path / "workload.yaml").write_text(
        "experiment_name: ray-stacks\n"
        f"command: {sys.executable} hung.py\n"
        "backend: ray\n"
        "compute:\n  nnodes: 2\n  nproc_per_node: 1\n"
    )

    def air(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jupyter_air.cli", *args],
            env=kernel_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )

    submitted = air("run", "-f", "workload.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = job_id_of_cli(submitted.stdout)
    try:
        until(
            lambda: air("logs", job_id).stdout.count(" ready") == 2,
            "both ranks in the process group",
            timeout=180,
        )
        shown = air("stacks", job_id)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        node_0 = out[out.index("=== node 0 rank 0") : out.index("=== node 1 rank 1")]
        node_1 = out[out.index("=== node 1 rank 1") :]
        assert "all_reduce" in node_0, out
        assert "<module> (hung.py:14)" in node_0, out
        assert "wait_forever (hung.py:7)" in node_1, out
        assert "all_reduce" not in node_1
    finally:
        air("cancel", job_id)
    assert wait_settled(air_home, job_id).status == "CANCELLED"
    assert job_processes(job_id) == []


def job_id_of_cli(stdout: str) -> str:
    first = stdout.split()
    return first[first.index("Job") + 1].rstrip(":")


NOTEBOOK = ROOT / "notebooks" / "ray_cluster.ipynb"


def test_the_ray_notebook_trains_on_two_nodes(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = execute_notebook(NOTEBOOK, kernel_env, tmp_path, monkeypatch)
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[node 1 rank 1] rank 1 of 2 on node 1" in text, text
    assert "[node 1 rank 1] step 40: loss" in text
    results = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "execute_result"]
    assert float(results[0]) < 1.0, "the loss went down"
    assert results[1] == "[('0', '0'), ('1', '1')]"


def test_a_sweep_runs_its_trials_as_concurrent_ray_jobs(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: 1-node trials, 2 at a time, one on each of the cluster's 1-CPU nodes."""
    for name in ("AIR_HOME", "MLFLOW_TRACKING_URI", "RAY_ADDRESS", "RAY_AUTH_MODE"):
        monkeypatch.setenv(name, kernel_env[name])
    monkeypatch.chdir(tmp_path)
    home = Path(kernel_env["AIR_HOME"])
    backend = {"backend": "ray", "compute": {"nnodes": 1, "nproc_per_node": 1}}
    jobs = a_sweep_side_by_side(tmp_path, home, backend)
    assert {j.spec.backend.name for j in jobs} == {"ray"}
    store = JobStore(home)
    first, second = (AttemptDir(store.attempt_dir(j.id, 1)).read_nodes() for j in jobs[:2])
    assert first[0]["node_id"] != second[0]["node_id"], "each on a node of its own"
    for job in jobs:
        assert job_processes(job.id) == []
    wait_released(kernel_env)


# A warm session (issue 16) on the same cluster, before a node is killed below:
# ``%air_session start --backend ray --nnodes 2``, its ranks on the node agents, reaching
# the kernel over TCP with the session's secret.
def test_a_session_on_two_ray_nodes_keeps_its_ranks_and_their_process_group(
    kernel: Kernel,
    air_home: Path,
    kernel_env: dict[str, str],
) -> None:
    started = kernel.run("%air_session start --backend ray --nnodes 2 -n 1")
    assert started.error is None, started.traceback
    assert "2 ranks on 2 Ray nodes" in started.text
    found = SESSION_JOB.search(started.text)
    assert found, started.text
    job_id = found.group(1)

    two_node_session_keeps_its_group(kernel)

    # The ranks reach the kernel over TCP at one address facing the cluster; once they
    # are in, the door is shut, and the secret is neither in their environment nor left
    # in the job's directory.
    address = kernel.run(
        "from jupyter_air.kernel.warm_session import WarmSession\n"
        "WarmSession.current.session.ticket.address"
    ).value()
    kind, host, port = address.strip("'").split(":")
    assert kind == "tcp"
    assert host not in ("0.0.0.0", "::")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    assert cell(kernel, "'AIR_SESSION_TICKET' in os.environ") == "False"
    assert not JobDir(JobStore(air_home).job_dir(job_id)).session_ticket.exists()

    kernel.run("%air_session stop")
    job = wait_done(air_home, job_id)
    assert job.status == "SUCCEEDED"
    supervised_until_its_end(job)
    assert_gone_within(job_id, time.monotonic(), 30)
    wait_released(kernel_env)  # no placement group, no CPU left held on the cluster


def test_a_node_that_dies_fails_the_attempt_naming_the_node(
    kernel: Kernel, air_home: Path, cluster: Any
) -> None:
    """Last in this module: it takes the second node away. The ranks are in collectives,
    so the surviving rank fails too, right after: the lost node must still be named."""
    msg_id = kernel.start(
        "%%air_distributed --backend ray --nnodes 2 -n 1\n"
        "import time, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "print('started', flush=True)\n"
        "for _ in range(1500):\n"
        "    dist.barrier()\n"
        "    time.sleep(0.2)\n"
    )
    store = JobStore(air_home)
    job_id = running_job(air_home, 2, timeout=120)
    (worker,) = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]
    nodes = AttemptDir(store.attempt_dir(job_id, 1)).read_nodes()
    (lost,) = [n["node"] for n in nodes if n["node_id"] == worker.node_id]
    cluster.remove_node(worker)
    execution = kernel.collect(msg_id)
    assert execution.error is not None
    assert execution.error["ename"] == "JobFailed"
    message = execution.error["evalue"]
    assert f"node {lost} (" in message, message
    assert "was lost: Ray says its node was shut down (received SIGTERM)" in message, message
    assert f"; node {1 - lost} (Ray node " in message, "its peer, ended with it"
    assert store.get(job_id).status == "FAILED"
    (attempt,) = store.attempts(job_id)
    assert attempt.exit_codes is not None
    assert attempt.exit_codes[lost] is None, "the lost node's rank: its exit never seen"
    assert job_processes(job_id) == []


@pytest.fixture
def engine(cluster: Any) -> Engine:
    """The backend contract on this module's cluster: 2 nodes x 1 rank."""
    return Engine("ray", {"address": cluster.address}, nnodes=2, nproc_per_node=1)
