"""Step marks with no change to the user's code (issue 38, items 1 and 3): real 2-rank
jobs on the CPU with gloo, started as scripts with ``air run`` (the rank's sitecustomize
hooks them): the HF Trainer, Lightning and a plain loop each get every rank's step marks
(a loop's from each rank's ``log_metrics``, whose points are rank 0's), the run's
throughput metrics, progress and, where the library knows its length, an ETA. The
hooks' own rules on objects: what a batch counts, a hook that fails goes off with one
line, ``AIR_PERF=0``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from jupyter_air.jobs.store import JobStore
from jupyter_air.paths import air_home
from jupyter_air.perf import hooks, marks, progress
from jupyter_air.perf.marks import Source
from jupyter_air.tracking.targets import default_tracking_uri
from tests.air_cli import air
from tests.waits import wait_settled

HF = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                    bos_token_id=0, eos_token_id=0)
ids = torch.randint(0, 32, (64, 8))
args = TrainingArguments(
    output_dir="out", max_steps=10, per_device_train_batch_size=2,
    gradient_accumulation_steps=2, save_strategy="no", report_to="none", use_cpu=True,
    ddp_backend="gloo", disable_tqdm=True,
)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args,
                  train_dataset=[{"input_ids": row, "labels": row} for row in ids])
trainer.train()
"""

LIGHTNING = """\
import torch
import lightning as L

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, _):
        return self.layer(batch).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

trainer = L.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
)
trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(80, 2), batch_size=4))
"""

LOOP = """\
import torch, torch.distributed as dist
from jupyter_air import log_metrics

dist.init_process_group("gloo")
w = torch.zeros(64)
for step in range(1, 41):
    w += torch.randn(64)
    dist.all_reduce(w)
    if step % 5 == 0:
        log_metrics({"w": float(w.norm())}, step=step)
dist.destroy_process_group()
"""


@pytest.fixture
def workdir(tmp_path: Path, in_module_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def job(workdir: Path, script: str) -> tuple[Path, dict[str, list[float]]]:
    """Run ``script`` on 2 ranks; its attempt's marks folder, and its run's metrics."""
    (workdir / "train.py").write_text(script)
    workload = {
        "experiment_name": "perf",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    store = JobStore(air_home())
    settled = wait_settled(store, job_id, timeout=300)
    logs = air("logs", job_id).stdout
    assert settled.status == "SUCCEEDED", logs
    assert "[air]" not in logs, "no hook of ours failed"
    (attempt,) = store.attempts(job_id)
    assert attempt.run_id is not None
    client = MlflowClient(default_tracking_uri())
    metrics = client.get_run(attempt.run_id).data.metrics
    history = {
        key: [p.value for p in client.get_metric_history(attempt.run_id, key)] for key in metrics
    }
    return store.attempt_dir(job_id, 1) / "perf", history


def steps(perf_dir: Path, rank: int) -> list[dict[str, Any]]:
    text = (perf_dir / f"rank-{rank}.jsonl").read_text()
    return [x for x in map(json.loads, text.splitlines()) if "s" in x and "src" in x]


@pytest.mark.heavy
@pytest.mark.slow
def test_the_hf_trainer_marks_every_ranks_steps_with_its_batch_and_plan(workdir: Path) -> None:
    pytest.importorskip("transformers")
    perf_dir, metrics = job(workdir, HF)
    for rank in (0, 1):
        marked = steps(perf_dir, rank)
        assert [line["s"] for line in marked] == list(range(1, 11))
        assert {(line["n"], line["k"], line["src"]) for line in marked} == {(4, 32, "hf")}, (
            "2 micro-batches of 2 rows of 8 tokens a step"
        )
    found = progress.read(perf_dir)
    assert found is not None
    assert (found.step, found.total, found.eta_s) == (10, 10, 0.0)
    assert found.step_time_s is not None
    assert found.samples_per_s == pytest.approx(2 * 4 / found.step_time_s, rel=0.5)
    assert found.line().startswith("step 10 / 10 (100 %)")
    assert {"perf/step_time", "perf/samples_per_s", "perf/tokens_per_s"} <= set(metrics)
    assert {"perf/step_time/rank_0", "perf/step_time/rank_1"} <= set(metrics)
    assert all(value > 0 for value in metrics["perf/step_time"])


@pytest.mark.heavy
@pytest.mark.slow
def test_lightning_marks_every_ranks_steps_with_its_batch_and_plan(workdir: Path) -> None:
    pytest.importorskip("lightning")
    perf_dir, metrics = job(workdir, LIGHTNING)
    for rank in (0, 1):
        marked = steps(perf_dir, rank)
        assert [line["s"] for line in marked] == list(range(1, 21)), "10 batches a rank, 2 epochs"
        assert {(line["n"], line["src"]) for line in marked} == {(4, "lightning")}
    found = progress.read(perf_dir)
    assert found is not None
    assert (found.step, found.total, found.eta_s) == (20, 20, 0.0)
    assert found.samples_per_s is not None
    assert "perf/samples_per_s" in metrics
    assert "perf/step_time/rank_1" in metrics


@pytest.mark.heavy
def test_a_plain_loop_is_marked_by_each_ranks_log_metrics_cadence(workdir: Path) -> None:
    perf_dir, metrics = job(workdir, LOOP)
    for rank in (0, 1):
        assert [line["s"] for line in steps(perf_dir, rank)] == list(range(5, 41, 5))
    assert "perf/step_time/rank_1" in metrics
    assert len(metrics["w"]) == 8, "the points are rank 0's alone"
    found = progress.read(perf_dir)
    assert found is not None
    assert (found.step, found.total, found.eta_s) == (40, None, None)
    assert found.step_time_s is not None
    assert found.line().startswith("step 40, ")
    assert "perf/step_time" in metrics
    assert "perf/samples_per_s" not in metrics, "a plain loop's batch is not known"


def test_a_batch_counts_its_rows_and_its_tokens() -> None:
    torch = pytest.importorskip("torch")
    ids = torch.zeros(4, 16, dtype=torch.long)
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[:, 10:] = 0
    assert hooks.batch_size({"input_ids": ids, "attention_mask": mask}) == (4, 40)
    assert hooks.batch_size({"input_ids": ids}) == (4, 64)
    assert hooks.batch_size((torch.zeros(8, 3), torch.zeros(8))) == (8, None)
    assert hooks.batch_size({"pixels": torch.zeros(2, 3, 4)}) == (2, None)
    assert hooks.batch_size(torch.zeros(5, 2)) == (5, None)
    assert hooks.batch_size("text") == (None, None)


def test_a_failing_hook_says_so_once_and_goes_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hooks, "_off", set())
    calls: list[int] = []

    @hooks.guarded("a test")
    def broken(n: int) -> int:
        calls.append(n)
        raise ValueError("bad batch")

    assert broken(1) is None
    assert broken(2) is None
    assert calls == [1], "off after its first error"
    assert capsys.readouterr().err == (
        "[air] step marks from a test are off: ValueError('bad batch')\n"
    )


def test_jupyter_air_step_marks_a_step_and_air_perf_0_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jupyter_air

    monkeypatch.setenv("AIR_PERF_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(marks, "_made", None)
    jupyter_air.step(samples=8, tokens=100, total=1_000)
    jupyter_air.step(samples=8, tokens=100, total=1_000)  # the same plan: said once
    hooks.loop_step(50)  # a lower source than jupyter_air.step: ignored
    monkeypatch.setenv("AIR_PERF", "0")
    jupyter_air.step(samples=8)
    lines = [json.loads(line) for line in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert [line["plan"] for line in lines if "plan" in line] == [1_000]
    assert [(line["s"], line["n"], line["k"], line["src"]) for line in lines if "s" in line] == [
        (1, 8, 100, Source.STEP.value),
        (2, 8, 100, Source.STEP.value),
    ]
    shown = progress.read(tmp_path)
    assert shown is not None
    assert (shown.step, shown.total) == (2, 1_000)
