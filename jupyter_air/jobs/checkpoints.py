"""A job's checkpoint place, and the latest complete checkpoint in it.

Every rank of every attempt of a job gets ``AIR_CHECKPOINT_DIR``: one directory for the
whole job (``<job dir>/checkpoints`` unless the submission names one, for a shared or
larger filesystem), so that a retry finds what the attempt before it saved. A retry
also gets ``AIR_RESUME_FROM``: the latest checkpoint there that is complete, found in
the layouts the field uses. A checkpoint being written when its attempt died is not
complete, and each layout says so its own way:

- Hugging Face Trainer, ``checkpoint-<step>/``: the Trainer writes ``trainer_state.json``
  after the weights, the optimizer and the RNG states, so a folder without it was cut
  off.
- Lightning, ``*.ckpt`` (``last.ckpt`` first): a ``torch.save`` zip archive, whose
  central directory is written last; a file without a readable one was cut off.
- ``torch.distributed.checkpoint``, a folder with ``.metadata``: the coordinator writes
  it once every rank's shards are written.
- ``jupyter_air.checkpoint``'s own: ``step-<N>/`` with ``air-checkpoint.json`` renamed
  into place last.
"""

from __future__ import annotations

import enum
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_DIR_ENV = "AIR_CHECKPOINT_DIR"
RESUME_FROM_ENV = "AIR_RESUME_FROM"
RESUME_STEP_ENV = "AIR_RESUME_STEP"
#: The marker ``jupyter_air.checkpoint`` writes last into each of its checkpoints.
MARKER = "air-checkpoint.json"

_HF = re.compile(r"checkpoint-(\d+)")
_STEP = re.compile(r"(?:^|[^a-z])step[=_-]?(\d+)", re.IGNORECASE)


class Layout(enum.StrEnum):
    HF = "hf-trainer"
    LIGHTNING = "lightning"
    DCP = "torch-dcp"
    AIR = "air"


@dataclass(frozen=True)
class Found:
    """A complete checkpoint: where, in which layout, at which step (when it says)."""

    path: Path
    layout: Layout
    step: int | None
    #: When it was written (its newest file's mtime): orders layouts that say no step.
    written: float


def latest(place: Path) -> Found | None:
    """The latest complete checkpoint under ``place`` (two levels deep at most), by when
    it was written (a job saves in one layout; Lightning's ``last.ckpt`` wins a tie)."""
    if not place.is_dir():
        return None
    found = [c for c in _candidates(place) if c is not None]
    return max(found, key=lambda c: c.written) if found else None


def _candidates(place: Path) -> list[Found | None]:
    found: list[Found | None] = []
    for path in [place, *_children(place), *(g for c in _children(place) for g in _children(c))]:
        if path.is_dir():
            found += [_air(path), _hf(path), _dcp(path)]
        elif path.suffix == ".ckpt":
            found.append(_lightning(path))
    return found


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if not p.name.startswith("."))
    except OSError:
        return []


def _air(folder: Path) -> Found | None:
    marker = folder / MARKER
    try:
        doc = json.loads(marker.read_text())
        return Found(folder, Layout.AIR, int(doc["step"]), marker.stat().st_mtime)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _hf(folder: Path) -> Found | None:
    match = _HF.fullmatch(folder.name)
    state = folder / "trainer_state.json"
    if match is None or not state.is_file():
        return None
    return Found(folder, Layout.HF, int(match[1]), state.stat().st_mtime)


def _dcp(folder: Path) -> Found | None:
    metadata = folder / ".metadata"
    if not metadata.is_file() or (folder / MARKER).exists():
        return None
    step = _STEP.search(folder.name) or re.fullmatch(r"(\d+)", folder.name)
    return Found(folder, Layout.DCP, int(step[1]) if step else None, metadata.stat().st_mtime)


def _lightning(path: Path) -> Found | None:
    try:
        with zipfile.ZipFile(path) as archive:  # its central directory is written last
            if not archive.namelist():
                return None
    except (OSError, zipfile.BadZipFile):
        return None
    step = _STEP.search(path.stem)
    written = path.stat().st_mtime
    if path.name == "last.ckpt":
        written += 1e-3  # Lightning's "last" is the one to resume from, of equal times
    return Found(path, Layout.LIGHTNING, int(step[1]) if step else None, written)
