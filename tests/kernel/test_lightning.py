"""Lightning's ``Trainer`` (``strategy="ddp"``, 2 CPU ranks on gloo) in a warm session and
in a fresh cell. The ranks have torchrun's environment, so Lightning takes them as launched
from outside (no subprocesses) and joins, or finds, the process group; its
``MLFlowLogger`` logs into the cell's run when given ``run_id=os.environ["MLFLOW_RUN_ID"]``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.store import JobStore
from tests.installed import needs
from tests.kernel.conftest import Kernel
from tests.kernel.test_distributed_magic import job_id_of, mlflow_client, runs_of_job
from tests.kernel.test_session import start
from tests.waits import until

#: A real library's training: half a minute and more each.
pytestmark = [pytest.mark.slow, needs("lightning")]

#: A linear regression and its data: 32 rows in batches of 4, so 4 steps an epoch a rank.
MODEL = """
import os, torch, lightning as L
import torch.distributed as dist
from lightning.pytorch.loggers import MLFlowLogger


class Regression(L.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.layer, self.lr = torch.nn.Linear(4, 1), lr
    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log_dict({{"train_loss": loss, "lr": self.lr}})
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

torch.manual_seed(0)
x = torch.randn(32, 4)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

def fit(model, epochs):
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=epochs, log_every_n_steps=1,
        logger=MLFlowLogger(run_id=os.environ["MLFLOW_RUN_ID"]), default_root_dir={root!r},
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, data)
    return trainer

def in_sync(model):
    \"\"\"Whether every rank holds rank 0's weights.\"\"\"
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    return all(torch.equal(w, every[0]) for w in every)
"""


@pytest.fixture(scope="module")
def session(kernel: Kernel, air_home: Path) -> Iterator[str]:
    """A 2-rank session whose ranks hold the model's class, the data and ``fit``."""
    job_id = start(kernel)
    model = MODEL.format(root=str(air_home / "lightning"))
    defined = kernel.run(f"%%air_distributed --session\n{model}", timeout=200)
    assert defined.error is None, defined.traceback
    yield job_id
    kernel.run("%air_session stop")


FIRST_FIT = """%%air_distributed --session
model = Regression(lr=0.1)
trainer = fit(model, epochs=1)
world = dist.group.WORLD  # kept: a later cell's group must be this very object
(dist.get_world_size(), trainer.global_step, in_sync(model), os.environ["MLFLOW_RUN_ID"])
"""

SECOND_FIT = """%%air_distributed --session
model.lr = 0.05
before = model.layer.weight.detach().clone()
trainer = fit(model, epochs=2)
changed = not torch.equal(before, model.layer.weight)
(dist.group.WORLD is world, trainer.global_step, in_sync(model), changed,
 os.environ["MLFLOW_RUN_ID"])
"""


def metric(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of a metric of a run, in step order."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.mark.timeout(300)
def test_a_second_fit_in_a_later_session_cell_reuses_the_warm_process_group(
    kernel: Kernel, air_home: Path, session: str
) -> None:
    first = kernel.run(FIRST_FIT, timeout=200)
    world_size, steps, in_sync, first_run = eval(first.value())
    assert (world_size, steps, in_sync) == (2, 4, True)  # 4 steps an epoch, the same weights
    second = kernel.run(SECOND_FIT, timeout=200)
    same_group, steps, in_sync, changed, second_run = eval(second.value())
    assert (same_group, steps, in_sync, changed) == (True, 8, True, True)  # no second init

    client = mlflow_client(air_home)
    session_run = str(JobStore(air_home).attempts(session)[0].run_id)
    for run_id, lr, steps in ((first_run, 0.1, 4), (second_run, 0.05, 8)):
        assert client.get_run(run_id).data.tags["mlflow.parentRunId"] == session_run
        assert metric(client, run_id, "lr") == [
            (step, pytest.approx(lr)) for step in range(steps)
        ], "each cell's run holds its own fit's metrics, once a step (rank 0)"
    assert client.get_experiment_by_name("lightning_logs") is None, "the logger made no run"


#: Every rank waits in a callback after its first step, so that the interrupt finds every
#: rank in Python code (not one in a collective waiting for another: see docs/sessions.md).
LONG_FIT = """%%air_distributed --session
import pathlib, time
class Waits(L.Callback):
    def on_train_batch_end(self, *args):
        pathlib.Path({flags!r}, os.environ["RANK"]).touch()
        time.sleep(120)
waiting = Regression(lr=0.1)
L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
          callbacks=[Waits()]).fit(waiting, data)
"""


@pytest.mark.timeout(300)
def test_an_interrupted_fit_reads_as_an_interrupt_and_leaves_the_session_usable(
    kernel: Kernel, air_home: Path, session: str
) -> None:
    """Lightning answers the ``KeyboardInterrupt`` with ``sys.exit(1)``: that is the
    interrupt, not rank 0 failing the cell. A cell that left SIGINT ignored (as Lightning
    does while it shuts down) cannot keep the next cell from being interrupted."""
    ignored = kernel.run(
        "%%air_distributed --session\nimport signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)"
    )
    assert ignored.error is None, ignored.traceback
    flags = air_home / "lightning-waits"
    flags.mkdir()
    fitting = kernel.start(LONG_FIT.format(flags=str(flags)))
    until(lambda: len(list(flags.iterdir())) >= 2, "the fit started", 120, step=0.1)
    kernel.interrupt()
    interrupted = kernel.collect(fitting)

    assert interrupted.error is not None
    assert interrupted.error["ename"] == "Interrupted", interrupted.traceback
    assert f"the session (job {session}) is still up" in interrupted.traceback
    assert "SystemExit" not in interrupted.text
    after = kernel.run("%%air_distributed --session\n(dist.get_world_size(), in_sync(waiting))")
    assert eval(after.value()) == (2, True)


FRESH_CELL = """%%air_distributed -n 2 --timeout 200
{model}
trainer = fit(Regression(lr=0.1), epochs=1)
(trainer.global_rank, trainer.world_size, trainer.global_step, os.environ["MLFLOW_RUN_ID"])
"""


@pytest.mark.timeout(300)
def test_a_fresh_cell_fits_with_lightning_into_its_own_run(kernel: Kernel, air_home: Path) -> None:
    model = MODEL.format(root=str(air_home / "lightning-fresh"))
    done = kernel.run(FRESH_CELL.format(model=model), timeout=200)

    assert done.error is None, done.traceback
    job_id = job_id_of(done)
    assert JobStore(air_home).get(job_id).status == "SUCCEEDED"
    (run,) = runs_of_job(air_home, job_id)
    assert eval(done.value()) == (0, 2, 4, run.info.run_id)
    losses = metric(mlflow_client(air_home), run.info.run_id, "train_loss")
    assert [step for step, _ in losses] == [0, 1, 2, 3]
