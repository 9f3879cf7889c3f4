"""Checkpoints for plain PyTorch training, in the job's checkpoint place, so that a retry
resumes where the attempt before it stopped::

    from jupyter_air import checkpoint

    state, done = checkpoint.load() or ({}, 0)     # the latest complete one, if any
    if state:
        model.load_state_dict(state["model"])
    for step in range(done, steps):
        ...
        if (step + 1) % 100 == 0:  # steps done, as the checkpoint's step
            checkpoint.save({"model": model.state_dict(), "opt": opt.state_dict()}, step + 1)

``save`` writes on rank 0 only (every rank may call it), into a hidden folder first,
then renames it into place with its marker inside: a checkpoint cut off by a crash is
never taken for a complete one. It keeps the last ``keep`` checkpoints. In a job,
``load`` gives what the job says to resume from: nothing on a first attempt, so a
place reused by a later job never restarts it from an earlier one's state.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .jobs.checkpoints import CHECKPOINT_DIR_ENV, MARKER, RESUME_FROM_ENV, Layout, latest

STATE = "state.pt"


def place(directory: str | os.PathLike[str] | None = None) -> Path:
    """Where checkpoints go: ``directory``, else the job's ``AIR_CHECKPOINT_DIR``."""
    chosen = directory or os.environ.get(CHECKPOINT_DIR_ENV)
    if not chosen:
        raise RuntimeError(
            f"no checkpoint place: not in a jupyter_air job (${CHECKPOINT_DIR_ENV} is unset) "
            "and no directory given"
        )
    return Path(chosen)


def save(
    state: Any, step: int, directory: str | os.PathLike[str] | None = None, keep: int = 2
) -> Path | None:
    """``torch.save(state)`` as the checkpoint after ``step`` steps; its folder (None on
    ranks other than 0, which save nothing)."""
    import torch

    if int(os.environ.get("RANK", "0")) != 0:
        return None
    root = place(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:09d}"
    partial = Path(tempfile.mkdtemp(prefix=f".step-{step:09d}-", dir=root))
    torch.save(state, partial / STATE)
    marker = partial / MARKER
    marker.write_text(json.dumps({"step": step, "file": STATE}))
    if final.exists():  # the same step saved again: the new one replaces it
        shutil.rmtree(final)
    os.replace(partial, final)
    for old in sorted(root.glob("step-*"))[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load(
    directory: str | os.PathLike[str] | None = None,
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> tuple[Any, int] | None:
    """The state and step to resume from: in a job, the checkpoint of ours its attempt
    resumes from (``AIR_RESUME_FROM``: a retry's, or ``--resume``'s), None for a fresh
    start; with ``directory``, the latest complete one there. ``weights_only`` as
    ``torch.load``'s: tensors, containers and numbers only, never code (``False`` for
    states holding other objects, from a place only you can write)."""
    import torch

    if directory is not None:
        best = latest(Path(directory), layouts=(Layout.AIR,))
        found = best.path if best is not None else None
    else:
        given = os.environ.get(RESUME_FROM_ENV)
        found = Path(given) if given and (Path(given) / MARKER).is_file() else None
    if found is None:
        return None
    step = int(json.loads((found / MARKER).read_text())["step"])
    state = torch.load(found / STATE, map_location=map_location, weights_only=weights_only)
    return state, step
