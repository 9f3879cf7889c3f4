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
import stat
import zipfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ..paths import others_can_write

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


def place_for(job_dir: Path, job_id: str, given: str | None, root: str) -> Path:
    """A job's checkpoint place: the one its submission named, else one under the
    configured ``root`` (``checkpoint_settings``), else under its own directory."""
    if given:
        return Path(given)
    return Path(root) / job_id if root else job_dir / "checkpoints"


def place_of(job_dir: Path, recorded: str | None) -> Path:
    """The place of a recorded job: its spec's (``submit`` fills it in), else the
    default of jobs recorded before there were places."""
    return Path(recorded) if recorded else job_dir / "checkpoints"


def make_place(path: Path) -> Path:
    """The place, made for its owner only (new folders, parents too; an existing one is
    the user's and kept as it is): weights are the user's work, may be confidential,
    and are unpickled when loaded."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return path


def untrusted(place: Path) -> str | None:
    """Why checkpoints in ``place`` must not be loaded (None if they may): loading one
    unpickles it, so a file someone else put there would run as this user. The place
    must be this user's, and nobody else may write into it; a missing place holds
    nothing yet."""
    try:
        st = place.stat()
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"{place} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{place} belongs to uid {st.st_uid}, not to you"
    writers = others_can_write(st)
    if writers is not None:
        return (
            f"{place} is writable by {writers} (mode {stat.filemode(st.st_mode)}): a "
            f"checkpoint someone else put there would run as you when loaded; "
            f"`chmod go-w {place}`, or choose another"
        )
    return None


def owned(found: Found) -> bool:
    """Whether every file of the checkpoint is this user's (one planted in a folder of
    it, by whoever could write there before, is not)."""
    me = os.geteuid()
    paths = [found.path, *found.path.rglob("*")] if found.path.is_dir() else [found.path]
    try:
        return all(p.lstat().st_uid == me for p in paths)
    except OSError:
        return False


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
    # of equal times (a coarse clock), the later step
    return sorted(found, key=lambda c: (c.written, -1 if c.step is None else c.step))


def listing(found: list[Found]) -> list[dict[str, object]]:
    """Checkpoints as a run lists them (``checkpoints.json`` of an attempt)."""
    return [
        {"path": str(c.path), "layout": str(c.layout), "step": c.step, "written": c.written}
        for c in found
    ]


def at(path: Path) -> Found | None:
    """``path`` itself as a checkpoint, if it is a complete one."""
    return next((c for c in _candidates(path, 0) if c is not None), None)


def unusable(path: Path) -> str | None:
    """Why ``path`` cannot be a checkpoint place (None if it can): checked at submission,
    so that a place the user cannot write, or others can, is said before the job runs
    for hours."""
    if path.exists():
        return untrusted(path) or (
            None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
        )
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def resume_env(found: Found) -> dict[str, str]:
    """What a rank resuming from ``found`` is told."""
    env = {RESUME_FROM_ENV: str(found.path)}
    if found.step is not None:
        env[RESUME_STEP_ENV] = str(found.step)
    return env


def _candidates(path: Path, depth: int) -> list[Found | None]:
    """The checkpoints at ``path`` and under it. A checkpoint's own folder is one
    checkpoint, complete or not, never searched for others (an HF FSDP checkpoint
    holds DCP folders; a sharded Lightning ``.ckpt`` is a DCP folder)."""
    if path.suffix == ".ckpt":
        return [_guarded(_lightning, path)]
    if not path.is_dir():
        return []
    if _HF.fullmatch(path.name):
        return [_guarded(_hf, path)]
    found = [_guarded(_air, path), _guarded(_dcp, path)]
    if depth > 0 and not any(found):
        for child in _children(path):
            found += _candidates(child, depth - 1)
    return found


def _guarded(check: Callable[[Path], Found | None], path: Path) -> Found | None:
    """``check(path)``; a file that went meanwhile (a checkpoint rotated away) is none."""
    try:
        return check(path)
    except OSError:
        return None


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if not p.name.startswith("."))
    except OSError:
        return []


def _air(folder: Path) -> Found | None:
    marker = folder / MARKER
    try:
        doc = json.loads(marker.read_text())
        step = int(doc["step"])
    except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, TypeError):
        return None
    return Found(folder, Layout.AIR, step, marker.stat().st_mtime)


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
    """A ``.ckpt`` file whose zip directory reads, or a sharded one (a folder): complete
    once Lightning wrote its ``meta.pt``, after the shards' ``.metadata``."""
    if path.is_dir():
        if not (path / ".metadata").is_file() or not (path / "meta.pt").is_file():
            return None
        written = (path / "meta.pt").stat().st_mtime
    else:
        try:
            with zipfile.ZipFile(path) as archive:  # its central directory is written last
                if not archive.namelist():
                    return None
        except zipfile.BadZipFile:
            return None
        written = path.stat().st_mtime
    step = _STEP.search(path.stem)
    if path.name == "last.ckpt":
        written += 1e-3  # Lightning's "last" is the one to resume from, of equal times
    return Found(path, Layout.LIGHTNING, int(step[1]) if step else None, written)
