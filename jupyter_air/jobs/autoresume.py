"""A retry of the HF Trainer or Lightning resumes from the last checkpoint, with no
change to the user's code.

As MLflow's autologging does, the libraries' own entry points are wrapped once their
modules are imported: ``transformers.Trainer.train`` and Lightning's ``Trainer.fit``.
When the caller leaves ``resume_from_checkpoint`` / ``ckpt_path`` unset, the first call
in the rank gets the checkpoint to resume from: the job's ``AIR_RESUME_FROM`` when it is
in the library's layout, else, on a retry, the latest complete one the library itself
wrote since the job started (the Trainer's ``output_dir``; Lightning's checkpoint
callbacks' folders and ``default_root_dir/lightning_logs``). The rank's output says so.

Installed at a rank's start by ``autoresume_site/sitecustomize.py`` (first on every
rank's ``PYTHONPATH``, for the step marks too) in an attempt that may resume (a retry or
``--resume``), unless ``AIR_AUTO_RESUME=0``; so ``python train.py`` gets it as a cell
does. The folder leaves ``PYTHONPATH`` there: a process the rank starts (a trial, a
tool) is not the rank, and does not resume by itself. A value the caller passes,
``False`` included, is left alone.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..import_hooks import when_imported
from .checkpoints import (
    AUTO_RESUME_ENV,
    JOB_STARTED_ENV,
    RESUME_FROM_ENV,
    Found,
    Layout,
    at,
    latest,
)

#: The folder whose ``sitecustomize`` installs this in a rank.
SITE = Path(__file__).parent / "autoresume_site"


def wanted(env: dict[str, str]) -> bool:
    """Whether a rank with ``env`` gets the hook: an attempt that may resume."""
    if env.get(AUTO_RESUME_ENV, "1") == "0":
        return False
    return bool(env.get(RESUME_FROM_ENV)) or int(env.get("AIR_ATTEMPT", "1")) > 1


def site_path(env: dict[str, str]) -> str:
    """``PYTHONPATH`` with ``SITE`` first."""
    rest = env.get("PYTHONPATH")
    return os.pathsep.join([str(SITE), rest]) if rest else str(SITE)


@dataclass(frozen=True)
class Hook:
    """Where one library is resumed: its trainer's method, the parameter naming the
    checkpoint, the layout it reads, and where it saves by itself."""

    cls: str
    method: str
    param: str
    layout: Layout
    own_places: Callable[[Any], Sequence[tuple[Path, int]]]
    #: A call that is not the training (left alone, and not counted as the first).
    aside: Callable[[Any], bool]


def _hf_places(trainer: Any) -> list[tuple[Path, int]]:
    return [(Path(trainer.args.output_dir).absolute(), 1)]


def _lightning_places(trainer: Any) -> list[tuple[Path, int]]:
    """Where Lightning saves by itself: a checkpoint callback's ``dirpath`` when the user
    set it, else under a logger's folder (``<save_dir>/<name>/<version>/checkpoints``,
    an MLflow logger's ``<save_dir>/<experiment>/<run>/checkpoints``) or, without a
    logger, ``default_root_dir``."""
    places = [
        (Path(cb.dirpath).absolute(), 1)
        for cb in getattr(trainer, "checkpoint_callbacks", [])
        if getattr(cb, "dirpath", None)
    ]
    for logger in getattr(trainer, "loggers", []):
        if getattr(logger, "save_dir", None):
            places.append((Path(logger.save_dir).absolute(), 4))
    root = Path(trainer.default_root_dir).absolute()
    return [*places, (root / "lightning_logs", 3), (root / "checkpoints", 1)]


def _tuning(trainer: Any) -> bool:
    """Whether this ``fit`` is Lightning's Tuner searching a learning rate or a batch
    size (it calls ``fit`` itself, with a finder that stops early): not the training."""
    return any(
        type(cb).__name__ in ("LearningRateFinder", "BatchSizeFinder")
        and getattr(cb, "_early_exit", False)
        for cb in getattr(trainer, "callbacks", [])
    )


def _never(trainer: Any) -> bool:
    return False


_LIGHTNING = Hook("Trainer", "fit", "ckpt_path", Layout.LIGHTNING, _lightning_places, _tuning)
HOOKS = {
    "transformers.trainer": Hook(
        "Trainer", "train", "resume_from_checkpoint", Layout.HF, _hf_places, _never
    ),
    "lightning.pytorch.trainer.trainer": _LIGHTNING,
    "pytorch_lightning.trainer.trainer": _LIGHTNING,
}

_lock = threading.Lock()
_resumed = False


def choose(hook: Hook, trainer: Any, env: dict[str, str]) -> Found | None:
    """The checkpoint a first, unset call of ``hook`` resumes from, if any."""
    given = env.get(RESUME_FROM_ENV)
    found = at(Path(given)) if given else None
    if found is not None and found.layout is hook.layout:
        return found
    if int(env.get("AIR_ATTEMPT", "1")) <= 1:
        return None
    since = float(env.get(JOB_STARTED_ENV, "0"))
    own = [latest(p, since, (hook.layout,), depth) for p, depth in hook.own_places(trainer)]
    candidates = [f for f in own if f is not None]
    return max(candidates, key=lambda f: f.written) if candidates else None


def wrap(hook: Hook, method: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(method)

    @functools.wraps(method)
    def resuming(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _resumed
        try:
            if hook.aside(self):
                return method(self, *args, **kwargs)
            bound = signature.bind_partial(self, *args, **kwargs)
            with _lock:
                first, _resumed = not _resumed, True
            found = None
            if first and bound.arguments.get(hook.param) is None:
                found = choose(hook, self, dict(os.environ))
        except Exception as err:  # never in the way of the training itself
            print(f"[air] not resuming: {err!r}", file=sys.stderr, flush=True)
            found = None
        if found is None:
            return method(self, *args, **kwargs)
        step = f", step {found.step}" if found.step is not None else ""
        print(f"[air] resuming from {found.path}{step}", file=sys.stderr, flush=True)
        bound.arguments[hook.param] = str(found.path)
        return method(*bound.args, **bound.kwargs)

    resuming.__air_autoresume__ = True  # type: ignore[attr-defined]
    return resuming


def patch(module: ModuleType, hook: Hook) -> None:
    cls = getattr(module, hook.cls, None)
    method = getattr(cls, hook.method, None)
    if cls is None or method is None or getattr(method, "__air_autoresume__", False):
        return
    setattr(cls, hook.method, wrap(hook, method))


#: One patch per hooked module, the same object each time (``when_imported`` keeps one).
_PATCHES = {name: functools.partial(patch, hook=hook) for name, hook in HOOKS.items()}


def install() -> None:
    """Hook the libraries when (if ever) they are imported; those already are, now."""
    for name, patching in _PATCHES.items():
        when_imported(name, patching)
