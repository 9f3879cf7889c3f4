"""The latest complete checkpoint of a job's checkpoint place (issue 26), in each layout
the field writes, and one cut off mid-write never taken for it."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from jupyter_air import checkpoint
from jupyter_air.jobs.checkpoints import (
    MARKER,
    Layout,
    latest,
    make_place,
    owned,
    untrusted,
    unusable,
)


def aged(path: Path, seconds_ago: float) -> Path:
    """``path`` (and what it holds) written ``seconds_ago``: the order checkpoints came."""
    when = 1_800_000_000 - seconds_ago
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (when, when))
    return path


def hf(place: Path, step: int, complete: bool = True) -> Path:
    folder = place / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def ckpt(path: Path, complete: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 4096)
    if not complete:  # cut off before its central directory
        path.write_bytes(path.read_bytes()[:2000])
    return path


def dcp(place: Path, name: str, complete: bool = True) -> Path:
    folder = place / name
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(b"shard")
    if complete:
        (folder / ".metadata").write_bytes(b"plan")
    return folder


def test_hf_trainer_s_latest_folder_with_its_state_and_not_the_one_cut_off(tmp_path: Path) -> None:
    aged(hf(tmp_path, 100), 30)
    aged(hf(tmp_path, 200), 20)
    aged(hf(tmp_path, 300, complete=False), 10)  # died while saving
    found = latest(tmp_path)
    assert found is not None
    assert (found.path.name, found.layout, found.step) == ("checkpoint-200", Layout.HF, 200)


def test_lightning_s_last_ckpt_or_its_newest_and_never_a_truncated_archive(tmp_path: Path) -> None:
    aged(ckpt(tmp_path / "checkpoints" / "epoch=0-step=50.ckpt"), 30)
    aged(ckpt(tmp_path / "checkpoints" / "epoch=1-step=100.ckpt"), 20)
    aged(ckpt(tmp_path / "checkpoints" / "epoch=2-step=150.ckpt", complete=False), 10)
    found = latest(tmp_path)
    assert found is not None
    assert (found.path.name, found.layout, found.step) == (
        "epoch=1-step=100.ckpt",
        Layout.LIGHTNING,
        100,
    )
    aged(ckpt(tmp_path / "checkpoints" / "last.ckpt"), 20)  # written with the step-100 one
    found = latest(tmp_path)
    assert found is not None
    assert found.path.name == "last.ckpt"


def test_a_torch_dcp_folder_is_complete_once_its_metadata_is_written(tmp_path: Path) -> None:
    aged(dcp(tmp_path, "step_100"), 20)
    aged(dcp(tmp_path, "step_200", complete=False), 10)
    found = latest(tmp_path)
    assert found is not None
    assert (found.path.name, found.layout, found.step) == ("step_100", Layout.DCP, 100)


def test_nothing_complete_is_nothing_to_resume_from(tmp_path: Path) -> None:
    hf(tmp_path, 10, complete=False)
    ckpt(tmp_path / "last.ckpt", complete=False)
    assert latest(tmp_path) is None
    assert latest(tmp_path / "missing") is None


def test_the_plain_helper_saves_atomically_keeps_two_and_loads_the_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.delenv("AIR_RESUME_FROM", raising=False)
    monkeypatch.setenv("RANK", "0")
    assert checkpoint.load() is None
    for step in (100, 200, 300):
        checkpoint.save({"w": step}, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000200", "step-000000300"]
    (tmp_path / ".step-000000400-cutoff").mkdir()  # a save cut off: hidden, no marker
    assert checkpoint.load() is None, "a first attempt starts afresh: the job says so"
    assert checkpoint.load(tmp_path) == ({"w": 300}, 300), "the latest of a place named"
    monkeypatch.setenv("AIR_RESUME_FROM", str(tmp_path / "step-000000200"))
    assert checkpoint.load() == ({"w": 200}, 200), "the one the job resumes from"
    found = latest(tmp_path)
    assert found is not None
    assert (found.layout, found.step) == (Layout.AIR, 300)
    assert (found.path / MARKER).is_file()
    monkeypatch.setenv("RANK", "1")
    assert checkpoint.save({"w": 0}, 400) is None, "only rank 0 writes"


def test_a_cut_off_hf_fsdp_checkpoint_is_not_taken_for_the_dcp_folders_in_it(
    tmp_path: Path,
) -> None:
    aged(hf(tmp_path, 400), 20)
    cut = hf(tmp_path, 500, complete=False)
    for shards in ("pytorch_model_fsdp_0", "optimizer_0"):
        dcp(cut, shards)
    aged(cut, 10)
    found = latest(tmp_path)
    assert found is not None
    assert (found.path.name, found.layout) == ("checkpoint-400", Layout.HF)


def test_a_sharded_lightning_ckpt_is_complete_once_its_meta_pt_is_written(
    tmp_path: Path,
) -> None:
    sharded = dcp(tmp_path, "epoch=1-step=20.ckpt")
    assert latest(tmp_path) is None, "shards and .metadata, no meta.pt yet"
    (sharded / "meta.pt").write_bytes(b"meta")
    found = latest(tmp_path)
    assert found is not None
    assert (found.layout, found.step) == (Layout.LIGHTNING, 20)


def test_of_checkpoints_written_in_the_same_clock_tick_the_later_step_wins(
    tmp_path: Path,
) -> None:
    for step in (9, 10):
        checkpoint.save({"w": step}, step, tmp_path)
        aged(tmp_path / f"step-{step:09d}", 5)
    found = latest(tmp_path)
    assert found is not None
    assert found.step == 10


def test_a_place_others_can_write_is_never_trusted(tmp_path: Path) -> None:
    place = tmp_path / "shared"
    place.mkdir()
    assert untrusted(place) is None
    assert unusable(place) is None
    place.chmod(0o777)
    problem = untrusted(place)
    assert problem is not None
    assert problem.startswith(f"{place} is writable by others (mode drwxrwxrwx)")
    assert unusable(place) == problem
    assert untrusted(tmp_path / "not-yet") is None, "a place made later is made private"


def test_a_new_place_and_its_new_parents_are_private(tmp_path: Path) -> None:
    place = make_place(tmp_path / "root" / "job")
    assert [(p.stat().st_mode & 0o777) for p in (place.parent, place)] == [0o700, 0o700]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_checkpoint_with_a_file_planted_by_someone_else_is_not_owned(tmp_path: Path) -> None:
    checkpoint.save({"w": 1}, 1, tmp_path)
    found = latest(tmp_path)
    assert found is not None
    assert owned(found)
    os.chown(found.path / "state.pt", 4242, -1)
    assert not owned(found)


def test_the_root_of_every_jobs_place_comes_from_the_configuration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air.jobs.checkpoint_settings import checkpoint_root

    monkeypatch.setenv("AIR_CHECKPOINT_ROOT", "~/from-env")
    assert checkpoint_root([str(tmp_path)]) == os.path.expanduser("~/from-env")
    (tmp_path / "jupyter_air_config.py").write_text("c.AirCheckpoints.root = '/scratch/ada'\n")
    assert checkpoint_root([str(tmp_path)]) == "/scratch/ada", "the file wins"
    monkeypatch.delenv("AIR_CHECKPOINT_ROOT")
    (tmp_path / "jupyter_air_config.py").unlink()
    assert checkpoint_root([str(tmp_path)]) == "", "none: each job's own directory"
