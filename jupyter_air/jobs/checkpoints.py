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
import os
import re
import zipfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_DIR_ENV = "AIR_CHECKPOINT_DIR"
RESUME_FROM_ENV = "AIR_RESUME_FROM"
RESUME_STEP_ENV = "AIR_RESUME_STEP"
#: When the job started (seconds since the epoch): a library's own checkpoints older
#: than that are another job's, never resumed from.
JOB_STARTED_ENV = "AIR_JOB_STARTED"
#: ``0``: the HF Trainer and Lightning are left as they are (``autoresume``).
AUTO_RESUME_ENV = "AIR_AUTO_RESUME"
#: Where jobs that name no place keep theirs, one folder per job (a shared or larger
#: filesystem than ``AIR_HOME``'s); unset: ``<job dir>/checkpoints``.
CHECKPOINT_ROOT_ENV = "AIR_CHECKPOINT_ROOT"
#: How deep under a place checkpoints are looked for: Lightning's default
#: ``lightning_logs/version_N/checkpoints/*.ckpt`` is the deepest layout.
DEPTH = 4
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


def place_for(job_dir: Path, job_id: str, given: str | None, env: dict[str, str]) -> Path:
    """A job's checkpoint place: the one its submission named, else one under
    ``$AIR_CHECKPOINT_ROOT``, else under its own directory."""
    if given:
        return Path(given)
    root = env.get(CHECKPOINT_ROOT_ENV)
    return Path(root) / job_id if root else job_dir / "checkpoints"


def place_of(job_dir: Path, recorded: str | None) -> Path:
    """The place of a recorded job: its spec's (``submit`` fills it in), else the
    default of jobs recorded before there were places."""
    return Path(recorded) if recorded else job_dir / "checkpoints"


def make_place(path: Path) -> Path:
    """The place, made for its owner only (a new folder; an existing one is the user's
    and kept as it is): weights are the user's work and may be confidential."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def latest(
    place: Path,
    since: float = 0.0,
    layouts: Collection[Layout] = tuple(Layout),
    depth: int = DEPTH,
) -> Found | None:
    """The latest complete checkpoint under ``place`` (``depth`` levels deep at most) in
    one of ``layouts``, by when it was written, written at ``since`` or after (a job
    saves in one layout; Lightning's ``last.ckpt`` wins a tie)."""
    found = complete(place, since, layouts, depth)
    return found[-1] if found else None


def complete(
    place: Path,
    since: float = 0.0,
    layouts: Collection[Layout] = tuple(Layout),
    depth: int = DEPTH,
) -> list[Found]:
    """Every complete checkpoint under ``place`` as ``latest`` sees them, oldest first."""
    if not place.is_dir():
        return []
    found = [
        c
        for c in _candidates(place, depth)
        if c is not None and c.written >= since and c.layout in layouts
    ]
    return sorted(found, key=lambda c: c.written)


def listing(found: list[Found]) -> list[dict[str, object]]:
    """Checkpoints as a run lists them (``checkpoints.json`` of an attempt)."""
    return [
        {"path": str(c.path), "layout": str(c.layout), "step": c.step, "written": c.written}
        for c in found
    ]


def at(path: Path) -> Found | None:
    """``path`` itself as a checkpoint, if it is a complete one."""
    return next((c for c in _candidates(path, 0) if c is not None), None)


def writable(path: Path) -> str | None:
    """Why ``path`` cannot be a checkpoint place (None if it can): checked at submission,
    so that a place the user cannot write is said before the job runs for hours."""
    if path.exists() and not path.is_dir():
        return f"{path} is not a directory"
    existing = next(p for p in [path, *path.parents] if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def resume_env(found: Found) -> dict[str, str]:
    """What a rank resuming from ``found`` is told."""
    env = {RESUME_FROM_ENV: str(found.path)}
    if found.step is not None:
        env[RESUME_STEP_ENV] = str(found.step)
    return env


def _candidates(path: Path, depth: int) -> list[Found | None]:
    if not path.is_dir():
        return [_lightning(path)] if path.suffix == ".ckpt" else []
    found = [_air(path), _hf(path), _dcp(path)]
    if depth > 0 and not any(found):  # a checkpoint's own files are not checkpoints
        for child in _children(path):
            found += _candidates(child, depth - 1)
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
