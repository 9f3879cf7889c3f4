"""How the HF Trainer's and Lightning's entry points are wrapped on a retry (issue 26):
the first training call left unset gets the checkpoint, a value the caller gives is
kept (``False`` too), the Tuner's own ``fit`` is not the training, and a failure of
ours never stops the training. The real libraries resume in tests/jobs/test_resume.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs import autoresume
from jupyter_air.jobs.autoresume import HOOKS, wrap


class Trainer:
    """``transformers.Trainer.train``'s signature, recording what it was given."""

    def __init__(self, output_dir: Path) -> None:
        self.args = type("Args", (), {"output_dir": str(output_dir)})()
        self.given: list[Any] = []

    def train(self, resume_from_checkpoint: Any = None, trial: Any = None, **kwargs: Any) -> str:
        self.given.append(resume_from_checkpoint)
        return "trained"


@pytest.fixture
def hf_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "out" / "checkpoint-4"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    monkeypatch.setenv("AIR_RESUME_FROM", str(folder))
    monkeypatch.setenv("AIR_ATTEMPT", "2")
    monkeypatch.setattr(autoresume, "_resumed", False)
    monkeypatch.setattr(Trainer, "train", wrap(HOOKS["transformers.trainer"], Trainer.train))
    return folder


def test_the_first_unset_call_resumes_and_says_so(
    hf_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = Trainer(tmp_path / "out")
    assert trainer.train() == "trained"
    assert trainer.train() == "trained"
    assert trainer.given == [str(hf_checkpoint), None], "a second training starts afresh"
    assert f"[air] resuming from {hf_checkpoint}, step 4" in capsys.readouterr().err


@pytest.mark.parametrize("given", [False, "other/checkpoint-2", True])
def test_a_value_the_caller_gives_is_kept(hf_checkpoint: Path, tmp_path: Path, given: Any) -> None:
    trainer = Trainer(tmp_path / "out")
    trainer.train(given)
    trainer.train(resume_from_checkpoint=given)
    assert trainer.given == [given, given]


def test_a_failure_of_ours_leaves_the_training_as_it_was(
    hf_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = Trainer(tmp_path / "out")
    del trainer.args  # choosing the checkpoint would need it
    (hf_checkpoint / "trainer_state.json").unlink()  # AIR_RESUME_FROM no longer complete
    assert trainer.train() == "trained"
    assert trainer.given == [None]
    assert "[air] not resuming: AttributeError" in capsys.readouterr().err


def test_lightnings_tuner_fit_is_not_the_training() -> None:
    pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder

    hook = HOOKS["lightning.pytorch.trainer.trainer"]
    finder = LearningRateFinder()
    tuner = type("T", (), {"callbacks": [finder]})()
    assert not hook.aside(tuner), "a finder the user keeps as a callback is training"
    finder._early_exit = True  # as Tuner.lr_find sets it
    assert hook.aside(tuner)
    sizer = BatchSizeFinder()
    sizer._early_exit = True
    assert hook.aside(type("T", (), {"callbacks": [sizer]})())
