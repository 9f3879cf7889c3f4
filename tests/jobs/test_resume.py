"""A retry resumes from the last complete checkpoint (issue 26): real training that
checkpoints into the job's ``AIR_CHECKPOINT_DIR``, one rank killed with SIGKILL mid-run,
``max_retries: 1``; the second attempt starts from the checkpoint, not from step 0, and
its MLflow run says where it started. A checkpoint cut off mid-write is passed over. The
HF Trainer and Lightning resume with no change to their code. ``air run --resume JOB``
starts a new job from another's checkpoint. Real supervisors, ranks on gloo, MLflow's
SQLite store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from jupyter_air.jobs.store import JobStore
from jupyter_air.paths import air_home
from jupyter_air.tracking.targets import default_tracking_uri
from tests.air_cli import air
from tests.waits import wait_settled

#: Every test runs jobs (a supervisor and ranks each): left to make test.
pytestmark = pytest.mark.heavy

#: The plain helper, 2 ranks: rank 1 dies by SIGKILL right after step 6 was saved.
PLAIN = """\
import os, signal
import torch, torch.distributed as dist
from jupyter_air import checkpoint

dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), os.environ["AIR_ATTEMPT"]
state, done = checkpoint.load() or ({"w": torch.zeros(1)}, 0)
print(f"attempt {attempt} starts at step {done} in {os.environ['AIR_CHECKPOINT_DIR']}")
w = state["w"]
for step in range(done, 10):
    w += 1
    dist.all_reduce(torch.zeros(1))
    checkpoint.save({"w": w}, step + 1)
    dist.barrier()
    if attempt == "1" and step + 1 == 6 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()  # no rank leaves while another still connects (a resumed run may have no step left)
print(f"ends with w={w.item():g}")
dist.destroy_process_group()  # else gloo may abort the rank as it exits
"""

#: torch.distributed.checkpoint, 2 ranks, a folder every 2 steps; before the kill rank 1
#: leaves a later folder with its shard and no ``.metadata``: cut off mid-write.
DCP = """\
import os, signal
from pathlib import Path
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), os.environ["AIR_ATTEMPT"]
place = Path(os.environ["AIR_CHECKPOINT_DIR"])
state = {"w": torch.zeros(4)}
done = 0
if os.environ.get("AIR_RESUME_FROM"):
    dcp.load(state, checkpoint_id=os.environ["AIR_RESUME_FROM"])
    done = int(os.environ["AIR_RESUME_STEP"])
print(f"attempt {attempt} starts at step {done}")
for step in range(done, 8):
    state["w"] += 1
    if (step + 1) % 2 == 0:
        dcp.save(state, checkpoint_id=place / f"step_{step + 1}")
    dist.barrier()
    if attempt == "1" and step + 1 == 4:
        if rank == 1:
            cut = place / "step_6"
            cut.mkdir(exist_ok=True)
            (cut / "__1_0.distcp").write_bytes(b"half a shard")
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()
print(f"ends with w={state['w'][0].item():g}")
dist.destroy_process_group()
"""

#: The HF Trainer as users write it: checkpoints in its own output_dir, nothing of ours.
#: Its first attempt's loss is NaN from step 5 on, and its steps slow (a guard stops it).
HF = """\
import math, os, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

class GoesWrong(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        print(f"attempt {os.environ['AIR_ATTEMPT']} starts at step {state.global_step}")
    def on_step_end(self, args, state, control, **kwargs):
        if os.environ["AIR_ATTEMPT"] == "1" and state.global_step >= 5:
            time.sleep(2)
    def on_log(self, args, state, control, logs=None, **kwargs):
        if os.environ["AIR_ATTEMPT"] == "1" and state.global_step >= 5 and "loss" in logs:
            logs["loss"] = math.nan

torch.manual_seed(0)
config = GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                    bos_token_id=0, eos_token_id=0)
ids = torch.randint(0, 32, (16, 8))
args = TrainingArguments(
    output_dir="out", max_steps=12, per_device_train_batch_size=2, save_strategy="steps",
    save_steps=2, logging_steps=1, report_to="none", use_cpu=True, ddp_backend="gloo",
    disable_tqdm=True,
)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, callbacks=[GoesWrong()],
                  train_dataset=[{"input_ids": row, "labels": row} for row in ids])
trainer.train()
print(f"ends at step {trainer.state.global_step}")
"""

#: Lightning as users write it: its default checkpoint callback with ``save_last``. Its
#: first attempt dies at step 5, or with ``NAN_AT`` set goes wrong there: its loss is
#: NaN and its steps slow (a guard stops it).
LIGHTNING = """\
import math, os, signal, time
import torch
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

first, nan_at = os.environ["AIR_ATTEMPT"] == "1", int(os.environ.get("NAN_AT", "0"))

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, _):
        loss = self.layer(batch).pow(2).mean()
        wrong = first and nan_at and self.trainer.global_step + 1 >= nan_at
        self.log("loss", math.nan if wrong else loss.item())
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
    def on_train_start(self):
        print(f"attempt {os.environ['AIR_ATTEMPT']} starts at step {self.trainer.global_step}")
    def on_train_batch_end(self, *args):
        if first and nan_at and self.trainer.global_step >= nan_at:
            time.sleep(2)
        elif first and not nan_at and self.trainer.global_step == 5:
            os.kill(os.getpid(), signal.SIGKILL)

trainer = L.Trainer(
    accelerator="cpu", devices=1, max_steps=8, logger=False, enable_progress_bar=False,
    enable_model_summary=False, default_root_dir=".", log_every_n_steps=1,
    callbacks=[ModelCheckpoint(dirpath="ckpts", every_n_train_steps=4, save_last=True,
                               save_top_k=-1)],
)
trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(64, 2), batch_size=4))
print(f"ends at step {trainer.global_step}")
"""


@pytest.fixture
def workdir(tmp_path: Path, in_module_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own working directory; the module's home and store (each test looks at
    its own jobs only)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("AIR_CHECKPOINT_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(workdir: Path, script: str, ranks: int, *flags: str, **fields: Any) -> str:
    """Submit ``script`` as a job that may retry once; its id once it settled."""
    (workdir / "train.py").write_text(script)
    workload = {
        "experiment_name": "resume",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": ranks},
        "max_retries": 1,
        **fields,
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    submitted = air("run", "-f", "w.yaml", *flags)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    wait_settled(air_home(), job_id, timeout=300)
    return job_id


def log(workdir: Path, job_id: str, attempt: int) -> str:
    shown = air("logs", job_id, "--attempt", str(attempt))
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def run_tags(workdir: Path, job_id: str) -> list[dict[str, str]]:
    """Each attempt's run's tags, in order."""
    client = MlflowClient(default_tracking_uri())
    attempts = JobStore(air_home()).attempts(job_id)
    return [client.get_run(a.run_id).data.tags for a in attempts if a.run_id]


def run_artifact(workdir: Path, job_id: str, name: str) -> list[str]:
    """Each attempt's run's artifact ``name``, as text."""
    client = MlflowClient(default_tracking_uri())
    attempts = JobStore(air_home()).attempts(job_id)
    return [
        Path(
            client.download_artifacts(a.run_id, name, str(workdir / f"got-{a.attempt}"))
        ).read_text()
        for a in attempts
        if a.run_id
    ]


def test_a_retry_resumes_from_the_helpers_last_checkpoint_and_its_run_says_so(
    workdir: Path,
) -> None:
    job_id = run(workdir, PLAIN, 2)

    store = JobStore(air_home())
    assert [a.status for a in store.attempts(job_id)] == ["FAILED", "SUCCEEDED"], air(
        "get", job_id
    ).stdout + log(workdir, job_id, 2)
    place = store.job_dir(job_id) / "checkpoints"
    first, second = log(workdir, job_id, 1), log(workdir, job_id, 2)
    assert f"node 0 rank 0 INFO attempt 1 starts at step 0 in {place}" in first
    assert f"node 0 rank 0 INFO attempt 2 starts at step 6 in {place}" in second, second
    assert f"node 0 rank 1 INFO attempt 2 starts at step 6 in {place}" in second
    assert "node 0 rank 0 INFO ends with w=10" in second, "the state went on from step 6"
    assert sorted(p.name for p in place.iterdir()) == ["step-000000009", "step-000000010"]

    shown = air("get", job_id).stdout
    assert f"  checkpoints: {place}\n" in shown
    assert f"    resumed from {place / 'step-000000006'}, step 6\n" in shown, shown
    assert shown.count("resumed from") == 1, "the first attempt started afresh"

    tags_1, tags_2 = run_tags(workdir, job_id)
    assert "air.resumed_from" not in tags_1
    killed = store.attempts(job_id)[0]
    assert killed.message is not None
    assert killed.message.startswith("rank 1 was killed by SIGKILL")
    assert (tags_1["air.failure"], tags_1["air.failed_rank"]) == (killed.message, "1")
    assert "air.failure" not in tags_2
    assert tags_2["air.resumed_from"] == str(place / "step-000000006")
    assert tags_2["air.resumed_step"] == "6"
    assert tags_2["air.resumed_layout"] == "air"
    assert tags_2["air.resumed_from_attempt"] == "1"
    assert tags_2["air.resumed_from_run"] == store.attempts(job_id)[0].run_id

    listed = [
        [(c["path"], c["step"], c["layout"]) for c in json.loads(text)]
        for text in run_artifact(workdir, job_id, "checkpoints.json")
    ]
    assert listed == [
        [(str(place / f"step-00000000{n}"), n, "air") for n in (5, 6)],
        [(str(place / f"step-0000000{n:02d}"), n, "air") for n in (9, 10)],
    ], "each run lists the complete checkpoints its attempt left"


def test_air_run_resume_starts_a_new_job_from_another_jobs_checkpoint(workdir: Path) -> None:
    earlier = run(workdir, PLAIN, 2)
    place = JobStore(air_home()).job_dir(earlier) / "checkpoints"

    again = run(workdir, PLAIN, 2, "--resume", earlier, max_retries=0)

    first = log(workdir, again, 1)
    assert "node 0 rank 0 INFO attempt 1 starts at step 10" in first, first
    (tags,) = run_tags(workdir, again)
    assert tags["air.resumed_from"] == str(place / "step-000000010")
    assert tags["air.resumed_from_job"] == earlier


def test_resume_from_a_job_without_a_checkpoint_is_refused_before_anything_starts(
    workdir: Path,
) -> None:
    (workdir / "train.py").write_text("print('no checkpoint')")
    (workdir / "w.yaml").write_text(f"experiment_name: e\ncommand: {sys.executable} train.py\n")
    done = air("run", "-f", "w.yaml", "--watch")
    assert done.returncode == 0, done.stderr
    earlier = done.stdout.split()[1]
    before = JobStore(air_home()).count()

    refused = air("run", "-f", "w.yaml", "--resume", earlier)

    assert refused.returncode != 0
    assert refused.stderr.strip().endswith(
        f"resume: job {earlier} has no complete checkpoint in "
        f"{JobStore(air_home()).job_dir(earlier) / 'checkpoints'} to resume from"
    ), refused.stderr
    assert JobStore(air_home()).count() == before, "no job was made"
    bad = air("run", "-f", "w.yaml", "--resume", "last-week")
    assert "--resume: 'last-week' is not a job id" in bad.stderr


def test_a_checkpoint_dir_the_user_cannot_write_is_refused_at_submission(workdir: Path) -> None:
    (workdir / "w.yaml").write_text(f"experiment_name: e\ncommand: {sys.executable} -V\n")
    (workdir / "a-file").write_text("")
    refused = air("run", "-f", "w.yaml", "--checkpoint-dir", "a-file/ckpt")
    assert refused.returncode != 0
    assert f"checkpoint_dir: {workdir / 'a-file'} is not writable" in refused.stderr, refused.stderr


#: One rank that fails its first attempt before saving anything.
FAILS_FIRST = """\
import os
from jupyter_air import checkpoint

loaded = checkpoint.load()
print(f"attempt {os.environ['AIR_ATTEMPT']} resumes from {os.environ.get('AIR_RESUME_FROM')}")
if os.environ["AIR_ATTEMPT"] == "1":
    raise SystemExit(3)
"""


def test_a_given_checkpoint_dir_serves_every_attempt_of_its_job_only(workdir: Path) -> None:
    job_id = run(workdir, PLAIN, 2, checkpoint_dir="shared/ckpts")
    place = workdir / "shared" / "ckpts"
    assert f"attempt 2 starts at step 6 in {place}" in log(workdir, job_id, 2)
    assert (place / "step-000000010").is_dir()
    assert place.stat().st_mode & 0o077 == 0, "a new place is its owner's only"

    later = run(workdir, FAILS_FIRST, 1, checkpoint_dir="shared/ckpts")
    assert "attempt 2 resumes from None" in log(workdir, later, 2), (
        "the earlier job's checkpoints are not this job's to resume from"
    )


def test_a_place_others_can_write_is_refused_and_never_resumed_from(workdir: Path) -> None:
    shared = workdir / "team"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    (workdir / "w.yaml").write_text(f"experiment_name: e\ncommand: {sys.executable} -V\n")
    refused = air("run", "-f", "w.yaml", "--checkpoint-dir", "team")
    assert refused.returncode != 0
    assert f"checkpoint_dir: {shared} is writable by others (mode drwxrwxrwx)" in refused.stderr

    earlier = run(workdir, PLAIN, 2)
    place = JobStore(air_home()).job_dir(earlier) / "checkpoints"
    place.chmod(0o777)  # as if someone could have put a checkpoint of theirs there
    again = air("run", "-f", "w.yaml", "--resume", earlier)
    assert again.returncode != 0
    assert f"resume: cannot resume from job {earlier}: {place} is writable by others" in (
        again.stderr
    ), again.stderr


def test_torch_dcp_resumes_from_the_last_folder_with_its_metadata_not_the_cut_off_one(
    workdir: Path,
) -> None:
    job_id = run(workdir, DCP, 2)

    second = log(workdir, job_id, 2)
    assert "node 0 rank 0 INFO attempt 2 starts at step 4" in second, second
    assert "node 0 rank 0 INFO ends with w=8" in second
    _, tags_2 = run_tags(workdir, job_id)
    assert tags_2["air.resumed_layout"] == "torch-dcp"
    assert tags_2["air.resumed_from"].endswith("/step_4")


GUARD_CHECKPOINT = "loss: nan -> checkpoint"


def guard_saved(workdir: Path, job_id: str) -> tuple[str, Path]:
    """Why the first attempt ended, and the checkpoint the guard had saved."""
    first = JobStore(air_home()).attempts(job_id)[0]
    assert first.status == "FAILED"
    assert first.message is not None
    why, _, saved = first.message.partition("; checkpoint saved: ")
    assert saved, first.message
    return why, Path(saved)


@pytest.mark.slow
def test_a_checkpoint_guard_has_the_hf_trainer_save_and_its_retry_resumes_from_it(
    workdir: Path,
) -> None:
    """The Trainer's loss goes NaN at step 5 of a 2-rank DDP job: the guard has both
    ranks save at the step rank 0 names (the hook's ``should_save``) and stop; the retry
    resumes by itself from that checkpoint, in its output_dir, as from any of the
    Trainer's own."""
    pytest.importorskip("transformers")
    (workdir / "out").mkdir()
    job_id = run(workdir, HF, 2, guard=[GUARD_CHECKPOINT])

    assert JobStore(air_home()).get(job_id).status == "SUCCEEDED", log(workdir, job_id, 1)
    why, saved = guard_saved(workdir, job_id)
    assert why == "guard 'loss: nan' at step 5 (loss = nan)"
    assert saved.parent == workdir / "out"
    step = int(saved.name.removeprefix("checkpoint-"))
    assert step > 5, "saved after the NaN was seen, not before"
    assert step < 12, "saved before the end of its training"
    second = log(workdir, job_id, 2)
    assert f"[air] resuming from {saved}, step {step}" in second, second
    assert f"node 0 rank 1 INFO attempt 2 starts at step {step}" in second
    assert "node 0 rank 1 INFO ends at step 12" in second


@pytest.mark.slow
def test_a_checkpoint_guard_has_lightning_save_and_its_retry_resumes_from_it(
    workdir: Path,
) -> None:
    """As the Trainer's: Lightning's ``save_checkpoint`` into its checkpoint callback's
    folder, where the retry finds it (later than its own ``last.ckpt`` of step 4)."""
    pytest.importorskip("lightning")
    job_id = run(workdir, LIGHTNING, 1, guard=[GUARD_CHECKPOINT], env={"NAN_AT": "5"})

    assert JobStore(air_home()).get(job_id).status == "SUCCEEDED", log(workdir, job_id, 1)
    why, saved = guard_saved(workdir, job_id)
    assert why == "guard 'loss: nan' at step 5 (loss = nan)"
    assert saved.parent == workdir / "ckpts"
    step = int(saved.name.removeprefix("guard-step=").removesuffix(".ckpt"))
    assert step > 5
    second = log(workdir, job_id, 2)
    assert f"[air] resuming from {saved}, step {step}" in second, second
    assert f"attempt 2 starts at step {step}" in second
    assert "ends at step 8" in second


@pytest.mark.slow
def test_air_auto_resume_0_leaves_the_libraries_alone(workdir: Path) -> None:
    pytest.importorskip("lightning")
    job_id = run(workdir, LIGHTNING, 1, env={"AIR_AUTO_RESUME": "0"})

    second = log(workdir, job_id, 2)
    assert "[air] resuming" not in second
    assert "attempt 2 starts at step 0" in second, second


def test_a_configured_root_gives_each_job_a_place_of_its_own(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_CHECKPOINT_ROOT", str(workdir / "scratch"))
    script = "import os\nprint('place', os.environ['AIR_CHECKPOINT_DIR'])\n"
    job_id = run(workdir, script, 1, max_retries=0)
    place = workdir / "scratch" / job_id
    assert f"place {place}" in log(workdir, job_id, 1)
    assert f"  checkpoints: {place}\n" in air("get", job_id).stdout
    assert place.is_dir()
    assert [(p.stat().st_mode & 0o777) for p in (place.parent, place)] == [0o700, 0o700]

    (workdir / "taken").write_text("")
    monkeypatch.setenv("AIR_CHECKPOINT_ROOT", str(workdir / "taken"))
    refused = air("run", "-f", "w.yaml")
    assert refused.returncode != 0
    assert f"c.AirCheckpoints.root: {workdir / 'taken'} is not a directory" in refused.stderr, (
        refused.stderr
    )
