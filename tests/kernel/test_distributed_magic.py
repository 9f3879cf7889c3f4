"""``%%air_distributed`` and ``@distributed`` in a real kernel, with PyTorch's CPU build
and gloo, 2 ranks, the fake NVML driver and a local MLflow store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.identity import os_user
from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Execution, Kernel, running_job
from tests.waits import job_processes, supervised_until_its_end, wait_done, wait_settled

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

JOB_ID = re.compile(r"Job (\d{8}-\d{6}-[0-9a-f]{6})")

TRAINING = """
import torch
import torch.nn as nn

def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

inputs = torch.arange(64, dtype=torch.float32).reshape(16, 4) / 64
targets = inputs.sum(dim=1, keepdim=True)
"""

DDP_CELL = """%%air_distributed -n 2 --run-name ddp-test
import os, mlflow, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)  # different data order per rank: DDP must still agree
model = DDP(build_model())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
shard = inputs[rank::2], targets[rank::2]
for step in range(5):
    opt.zero_grad()
    loss = ((model(shard[0]) - shard[1]) ** 2).mean()
    loss.backward()
    opt.step()
    if rank == 0:
        with mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"]):
            mlflow.log_metric("train_loss", loss.item(), step=step)
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [None, None]
dist.all_gather_object(gathered, flat.tolist())
env = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID",
                                   "MASTER_PORT", "AIR_ATTEMPT", "OMP_NUM_THREADS")}
dist.destroy_process_group()
(gathered[0] == gathered[1], env)
"""


def status_of(execution: Execution) -> str:
    """The live status line of the call."""
    found = [d["text/plain"] for d in execution.displays if " · attempt " in d["text/plain"]]
    assert found, f"no status line in {execution.displays}"
    return str(found[-1])


def job_id_of(execution: Execution) -> str:
    match = JOB_ID.search(execution.text)
    assert match, f"no job id in the cell output:\n{execution.text}{execution.traceback}"
    return match.group(1)


def mlflow_client(air_home: Path) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{air_home}/mlflow.db")


def runs_of_job(air_home: Path, job_id: str) -> list[Any]:
    client = mlflow_client(air_home)
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(experiments, filter_string=f"tags.`air.job_id` = '{job_id}'")
    return sorted(found, key=lambda r: int(r.data.tags["air.attempt"]))


def test_loading_the_extension_imports_neither_mlflow_nor_nvml(
    kernel_env: dict[str, str], tmp_path: Path
) -> None:
    fresh = Kernel(kernel_env, cwd=tmp_path)
    try:
        fresh.run("%load_ext jupyter_air")
        imported = fresh.run(
            "import sys; sorted(m for m in ('mlflow', 'pynvml', 'torch') if m in sys.modules)"
        )
        assert imported.value() == "[]"
    finally:
        fresh.shutdown()


def test_ddp_training_of_a_model_from_an_earlier_cell(kernel: Kernel, air_home: Path) -> None:
    assert kernel.run(TRAINING).error is None
    execution = kernel.run(DDP_CELL)
    assert execution.error is None, execution.traceback
    agree, env = eval(execution.value())
    assert agree is True, "DDP ranks ended with different parameters"
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"]) == ("2", "0", "0")
    assert (env["AIR_ATTEMPT"], env["OMP_NUM_THREADS"]) == ("1", "1")
    job_id = job_id_of(execution)
    assert env["TORCHELASTIC_RUN_ID"] == job_id

    job = JobStore(air_home).get(job_id)
    assert job.status == "SUCCEEDED"
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "ddp-test"
    client = mlflow_client(air_home)
    losses = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in losses) == [0, 1, 2, 3, 4], "once per step, not per rank"
    tags = run.data.tags
    assert tags["air.job_id"] == job_id
    supervised_until_its_end(job)  # it logs the last samples and the logs after the run's end
    metrics = set(client.get_run(run.info.run_id).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= metrics
    assert {"system/gpu_0_utilization_percentage", "system/gpu_0_temperature_celsius"} <= metrics
    assert (tags["air.attempt"], tags["air.nproc_per_node"], tags["air.nnodes"]) == ("1", "2", "1")
    assert tags["mlflow.source.name"].endswith("train.ipynb")
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "logs/node_0")}
    assert artifacts == {"logs/node_0/rank_0.log", "logs/node_0/rank_1.log"}
    cell = client.download_artifacts(run.info.run_id, "code/cell.py")
    assert Path(cell).read_text() == DDP_CELL.split("\n", 1)[1]
    assert "ddp-test" in execution.text
    assert status_of(execution).startswith("succeeded")


def test_every_rank_streams_its_output_marked_with_its_rank(kernel: Kernel) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2\n"
        "import os, sys\n"
        "print('hello from', os.environ['RANK'])\n"
        "print('warning from', os.environ['RANK'], file=sys.stderr)\n"
    )
    assert execution.error is None, execution.traceback
    assert "[rank 0] hello from 0" in execution.stdout
    assert "[rank 1] hello from 1" in execution.stdout
    assert "[rank 1] warning from 1" in execution.stderr


def test_output_ranks_0_streams_only_rank_0(kernel: Kernel) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2 --output-ranks 0\nimport os\nprint('hi', os.environ['RANK'])"
    )
    assert "[rank 0] hi 0" in execution.stdout
    assert "[rank 1]" not in execution.stdout


def test_progress_bars_update_in_place_and_output_is_capped(kernel: Kernel) -> None:
    execution = kernel.run(
        "%%air_distributed -n 1\n"
        "import sys, time\n"
        "for i in range(101):\n"
        "    sys.stdout.write(f'\\rprogress {i}%'); sys.stdout.flush(); time.sleep(0.005)\n"
        "print()\n"
        "for i in range(2500):\n"
        "    print('line', i)\n"
    )
    assert execution.error is None, execution.traceback
    # Only the final state becomes a line (as in a terminal); the updates went to a
    # display updated in place.
    assert execution.stdout.count("progress") == 1
    assert "[rank 0] progress 100%\n" in execution.stdout
    assert execution.displays[-1]["text/plain"] == "", "the finished bar was cleared"
    assert execution.stdout.count("[rank 0] line") < 2500
    assert "more output lines not shown here" in status_of(execution)


def test_the_last_expression_of_rank_0_is_the_result_and_out_brings_names_back(
    kernel: Kernel,
) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2 --out answer\n"
        "import os\n"
        "answer = 40 + int(os.environ['RANK'])\n"
        "answer * 10"
    )
    assert execution.value() == "400"
    assert kernel.run("answer").value() == "40"


def test_a_rank_that_raises_fails_the_job_and_stops_the_others(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2\n"
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise ValueError('boom on rank 1')\n"
        "time.sleep(120)\n"
    )
    assert execution.error is not None
    assert execution.error["ename"] == "JobFailed"
    assert "rank 1 exited with code 1" in execution.error["evalue"]
    assert "[rank 1] ValueError: boom on rank 1" in execution.stderr, "streamed, once"
    assert "its traceback is above" in execution.traceback
    assert execution.seconds < 60, "rank 0 was not stopped"
    job_id = job_id_of(execution)
    assert JobStore(air_home).get(job_id).status == "FAILED"
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "FAILED"
    assert job_processes(job_id) == []


def test_interrupting_the_kernel_stops_every_rank(kernel: Kernel, air_home: Path) -> None:
    msg_id = kernel.start(
        "%%air_distributed -n 2\nimport time\nprint('started', flush=True)\ntime.sleep(300)"
    )
    store = JobStore(air_home)
    job_id = running_job(air_home, 2, timeout=60)
    kernel.interrupt()
    execution = kernel.collect(msg_id)
    assert execution.error is not None
    assert execution.error["ename"] == "Interrupted"  # a KeyboardInterrupt, in one line
    assert store.get(job_id).status == "CANCELLED"
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "KILLED"
    assert job_processes(job_id) == []


def test_a_kernel_that_dies_takes_its_job_with_it(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path
) -> None:
    doomed = Kernel(kernel_env, cwd=tmp_path)
    try:
        doomed.run("%load_ext jupyter_air")
        doomed.start("%%air_distributed -n 2\nimport time\ntime.sleep(300)")
        job_id = running_job(air_home, ranks=2, timeout=60)
        doomed.manager.provisioner.process.kill()  # type: ignore[union-attr]
        job = wait_done(air_home, job_id, timeout=30)
        assert job.status == "CANCELLED"
        assert job_processes(job_id) == []
    finally:
        doomed.shutdown()


def test_background_submission_returns_at_once_and_the_job_goes_on(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2 --background\n"
        "import time\n"
        "time.sleep(3)\n"
        "print('done in the background')"
    )
    assert execution.error is None, execution.traceback
    job_id = job_id_of(execution)
    assert "background" in status_of(execution)
    assert not JobStore(air_home).get(job_id).done
    job = wait_settled(air_home, job_id)  # the outcome first, then the run's end
    assert job.status == "SUCCEEDED"
    log = JobStore(air_home).attempt_dir(job_id, 1) / "logs" / "node_0" / "rank_1.log"
    assert "done in the background" in log.read_text()
    (run,) = runs_of_job(air_home, job_id)
    assert run.info.status == "FINISHED"


def test_a_failed_attempt_is_retried_in_the_same_job_with_a_new_run(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run(
        "%%air_distributed -n 2 --max-retries 1\n"
        "import os\n"
        "if os.environ['AIR_ATTEMPT'] == '1' and os.environ['RANK'] == '0':\n"
        "    raise RuntimeError('first attempt fails')\n"
        "int(os.environ['AIR_ATTEMPT'])"
    )
    assert execution.value() == "2"
    assert "--- attempt 2 (attempt 1: rank 0 exited with code 1) ---" in execution.stdout
    job_id = job_id_of(execution)
    store = JobStore(air_home)
    assert store.get(job_id).status == "SUCCEEDED"
    assert [(a.attempt, a.status, a.failed_rank) for a in store.attempts(job_id)] == [
        (1, "FAILED", 0),
        (2, "SUCCEEDED", None),
    ]
    first, second = runs_of_job(air_home, job_id)
    assert (first.info.status, second.info.status) == ("FAILED", "FINISHED")
    assert first.info.run_id != second.info.run_id
    assert first.info.experiment_id == second.info.experiment_id
    assert [a.run_id for a in store.attempts(job_id)] == [first.info.run_id, second.info.run_id]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("-n 0", "--nproc-per-node: Input should be greater than or equal to 1"),
        ("--nnodes 2", "needs a cluster: add --backend ray"),
        ("--env FOO", "expected KEY=VALUE"),
        ("--env 1X=2", "not a valid environment variable name"),
        ("--max-retries -1", "--max-retries: Input should be greater than or equal to 0"),
        ("--timeout 0", "--timeout must be"),
        ("--output-ranks 3", "--output-ranks must be all, 0 or none"),
        ("--tracking later", "--tracking: Input should be 'required' or 'deferred'"),
        ("-n 100000", "or pass --oversubscribe (oversubscribe=True for @distributed)"),
        ("--oversubscribe --backend ray", "--oversubscribe is for the local backend"),
        ("--share bob", "--share: 'bob' is not a grant: write NAME:LEVEL"),
        ("--share bob:CAN_OWN", "--share: unknown permission level 'CAN_OWN'"),
        (f"--share {os_user()}:CAN_VIEW", "owns the job: the owner's CAN_MANAGE cannot be"),
        ("--no-such-option", "unrecognized arguments"),
    ],
)
def test_bad_options_are_a_usage_error_before_anything_starts(
    kernel: Kernel, air_home: Path, line: str, message: str
) -> None:
    jobs_before = len(JobStore(air_home).jobs())
    execution = kernel.run(f"%%air_distributed {line}\nprint('never')")
    assert execution.stderr.startswith("UsageError: ")  # IPython prints it, with the usage
    assert message in execution.stderr
    assert "never" not in execution.stdout
    assert len(JobStore(air_home).jobs()) == jobs_before


def test_a_refused_rank_count_names_the_option_and_points_to_the_help(kernel: Kernel) -> None:
    # Issue 18: one line and a pointer to %%air_distributed?, not the whole usage.
    execution = kernel.run("%%air_distributed -n 0\nprint('never')")
    assert execution.stderr.startswith("UsageError: ")
    assert "-n" in execution.stderr
    assert execution.stderr.rstrip().endswith("; see %%air_distributed? for the options")
    assert "never" not in execution.stdout


def test_a_name_that_cannot_be_pickled_stops_the_launch_and_says_which(
    kernel: Kernel, air_home: Path
) -> None:
    kernel.run("import threading\nlock = threading.Lock()")
    client = mlflow_client(air_home)
    runs_before = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    jobs_before = len(JobStore(air_home).jobs())
    execution = kernel.run("%%air_distributed -n 2\nwith lock:\n    pass")
    assert execution.stderr.startswith("UsageError: cannot send 'lock' to the ranks: TypeError")
    assert len(JobStore(air_home).jobs()) == jobs_before
    runs_after = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    assert runs_after == runs_before


def test_the_decorator_runs_a_function_on_every_rank(kernel: Kernel) -> None:
    kernel.run(
        "from jupyter_air import distributed\n"
        "@distributed(nproc_per_node=2)\n"
        "def scaled(x):\n"
        "    import os\n"
        "    rank = int(os.environ.get('RANK', '0'))\n"
        "    print('rank', rank, 'of', os.environ.get('WORLD_SIZE', '1'))\n"
        "    return x * (10 + rank)\n"
    )
    assert kernel.run("scaled(3)").value() == "30", "a plain call runs here, as usual"
    execution = kernel.run("scaled.distributed(3)")
    assert execution.value() == "30"
    assert "[rank 1] rank 1 of 2" in execution.stdout
    bad = kernel.run("distributed(nproc_per_node=0)(print)")
    assert bad.error is not None
    assert "--nproc-per-node: Input should be greater than or equal to 1" in bad.error["evalue"]
