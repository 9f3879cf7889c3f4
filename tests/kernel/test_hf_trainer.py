"""A Hugging Face ``Trainer`` with ``report_to="mlflow"`` inside ``%%air_distributed``:
accelerate clears and restores ``os.environ``, and MLflow's callback resumes the run
named by ``MLFLOW_RUN_ID``. A tiny model built from a config, no downloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.installed import needs
from tests.kernel.conftest import Kernel
from tests.kernel.test_distributed_magic import job_id_of, mlflow_client, runs_of_job

#: A real library's training: half a minute and more each.
pytestmark = [pytest.mark.slow, needs("transformers")]

TRAINER_CELL = """%%air_distributed -n 2 --timeout 240
import os, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
torch.manual_seed(0)
config = GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                    bos_token_id=0, eos_token_id=0)
ids = torch.randint(0, 32, (16, 8))
args = TrainingArguments(
    output_dir={output_dir!r}, max_steps=3, per_device_train_batch_size=2, logging_steps=1,
    save_strategy="no", report_to="mlflow", use_cpu=True, ddp_backend="gloo",
    ddp_find_unused_parameters=False, disable_tqdm=True,
)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args,
                  train_dataset=[{{"input_ids": row, "labels": row}} for row in ids])
trainer.train()
print("trainer rank", args.process_index, "of", args.world_size)
(args.process_index, args.world_size, os.environ.get("MLFLOW_RUN_ID"))
"""


@pytest.fixture(scope="module")
def kernel_env(kernel_env: dict[str, str], air_home: Path) -> dict[str, str]:
    """Nothing may try the network: there is no model hub here."""
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(air_home / "hf")}
    return {**kernel_env, **offline}


@pytest.mark.timeout(420)
def test_hf_trainer_logs_its_loss_into_the_calls_one_run_from_rank_0(
    kernel: Kernel, air_home: Path
) -> None:
    execution = kernel.run(TRAINER_CELL.format(output_dir=str(air_home / "hf-out")), timeout=300)

    assert execution.error is None, execution.traceback
    rank, world_size, run_id_after = eval(execution.value())
    assert (rank, world_size) == (0, 2)
    assert "[rank 1] trainer rank 1 of 2" in execution.stdout
    job_id = job_id_of(execution)
    assert JobStore(air_home).get(job_id).status == "SUCCEEDED"
    (run,) = runs_of_job(air_home, job_id)
    client = mlflow_client(air_home)
    every_run = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.run_id for r in every_run] == [run.info.run_id], "the callback made a run"
    assert run_id_after == run.info.run_id, "MLFLOW_RUN_ID still names the job's run"
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in losses) == [1, 2, 3], "once per step: rank 0 only"


SESSION_TRAINER = """%%air_distributed --session
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
if "model" not in globals():  # built once; the later cell trains the same model further
    config = GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
ids = torch.randint(0, 32, (16, 8))
args = TrainingArguments(
    output_dir={output_dir!r}, max_steps={steps}, per_device_train_batch_size=2,
    logging_steps=1, save_strategy="no", report_to="mlflow", use_cpu=True,
    ddp_backend="gloo", ddp_find_unused_parameters=False, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args,
                  train_dataset=[{{"input_ids": row, "labels": row}} for row in ids])
trainer.train()
import torch.distributed as dist
(id(dist.group.WORLD), args.world_size)
"""


@pytest.mark.timeout(420)
def test_a_second_trainer_in_a_later_session_cell_reuses_the_warm_process_group(
    kernel: Kernel, air_home: Path
) -> None:
    from tests.kernel.test_session import cell_runs, start

    job_id = start(kernel)
    output_dir = str(air_home / "hf-session")
    first = kernel.run(SESSION_TRAINER.format(output_dir=output_dir, steps=3), timeout=300)
    assert first.error is None, first.traceback
    second = kernel.run(SESSION_TRAINER.format(output_dir=output_dir, steps=2), timeout=300)
    assert second.error is None, second.traceback
    group, world_size = eval(first.value())
    assert eval(second.value()) == (group, world_size) == (group, 2)  # the same group

    kernel.run("%air_session stop")
    client = mlflow_client(air_home)
    session = client.get_run(str(JobStore(air_home).attempts(job_id)[0].run_id))
    assert cell_runs(client, session.info.run_id)[:2] == [("1", "FINISHED"), ("2", "FINISHED")]
    experiment = session.info.experiment_id
    for number, steps in (("1", [1, 2, 3]), ("2", [1, 2])):
        (run,) = client.search_runs([experiment], f"tags.`air.session_cell` = '{number}'")
        losses = client.get_metric_history(run.info.run_id, "loss")
        assert sorted(m.step for m in losses) == steps, f"cell {number}: its own run, rank 0"
