"""A rank's side of the job's guards (``jobs.guards``), for the HF Trainer and Lightning.

Their metrics go to MLflow by their own loggers, not through the attempt's journal,
so a guard on ``loss`` would never see them: the hook appends the values of the guarded
metrics, and only those, to the attempt's guard points (the journal's format, never
shipped), on rank 0, as the trainer logs them (the HF Trainer's ``on_log``; Lightning's
``callback_metrics`` at its logging steps). ``jupyter_air.log_metrics`` needs none of
this: its points are in the journal already.

A ``checkpoint`` guard that fires leaves a request in the attempt's directory (``SAVE``).
The ranks must save at the same step, or one would wait in a collective for the
others: rank 0 sees the request at the end of a step and names a step two later
(``SAVE_AT``), which no rank of a data-parallel job can have finished yet; every rank
saves at the end of that step (the HF Trainer's ``should_save``, Lightning's
``save_checkpoint``) and stops training; rank 0 says where it went (``SAVED``). A rank
looks for the files at each step's end: one ``stat``, no waiting. The trainer's own
places hold the checkpoint, where a retry resumes from by itself (``autoresume``).

Installed at a rank's start by ``autoresume_site/sitecustomize.py`` when the job has
guards (``GUARDS_ENV``). An error in a hook prints one ``[air]`` line and turns the
hook off: never in the training's way.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..import_hooks import when_imported
from ..tracking.journal import ATTEMPT_RUN, Writer
from .guards import Action, readable

#: What the supervisor gives every rank of a job with guards (JSON: the attempt's
#: directory, the guarded metrics, whether a guard may ask for a checkpoint).
GUARDS_ENV = "AIR_GUARDS"
#: Files of the attempt's directory.
POINTS = "guard_points.jsonl"
SAVE = "guard_save"
SAVE_AT = "guard_save_at"
SAVED = "guard_saved"
#: Written by rank 0 when a trainer that can save is hooked (its name).
TRAINER = "guard_trainer"


def rank_env(guards: Sequence[str], attempt_dir: Path) -> dict[str, str]:
    """``GUARDS_ENV`` for the ranks of an attempt of a job with these guards."""
    parsed = readable(guards)
    if not parsed:
        return {}
    said = {
        "dir": str(attempt_dir),
        "metrics": sorted({g.metric for g in parsed}),
        "save": any(Action.CHECKPOINT in g.actions for g in parsed),
    }
    return {GUARDS_ENV: json.dumps(said)}


def wanted(env: Mapping[str, str]) -> bool:
    return bool(env.get(GUARDS_ENV))


@dataclass
class _Guarded:
    """This rank's guards, as the supervisor said them."""

    dir: Path
    metrics: frozenset[str]
    save: bool
    rank: int
    world: int
    #: The step every rank saves at, once rank 0 named it; and whether this rank did.
    at: int | None = None
    saved: bool = False
    _points: Writer | None = field(default=None, repr=False)

    def journal(self, step: int, logged: Mapping[str, Any]) -> None:
        """The guarded metrics among ``logged``, into the guard points (rank 0)."""
        values = {k: float(v) for k, v in logged.items() if k in self.metrics}
        if not values or self.rank != 0:
            return
        if self._points is None:
            self._points = Writer(self.dir / POINTS)
        self._points.append(ATTEMPT_RUN, values, step)

    def trainer(self, name: str) -> None:
        """A trainer that can save is hooked: the supervisor may ask it to."""
        if self.save and self.rank == 0:
            (self.dir / TRAINER).write_text(name)

    def due(self, step: int) -> bool:
        """Whether this rank saves, then stops, at the end of training step ``step``."""
        if not self.save or self.saved:
            return False
        if self.at is None:
            if self.rank == 0 and (self.dir / SAVE).exists():
                self.at = step + (2 if self.world > 1 else 0)
                _write(self.dir / SAVE_AT, str(self.at))
            elif self.rank != 0 and (self.dir / SAVE_AT).exists():
                self.at = int((self.dir / SAVE_AT).read_text())
        return self.at is not None and step >= self.at

    def done(self, where: str) -> None:
        """The checkpoint is saved (rank 0 says where)."""
        self.saved = True
        if self.rank == 0:
            _write(self.dir / SAVED, where)
        print(f"[air] a guard asked for a checkpoint: saved {where}", file=sys.stderr, flush=True)


def _write(path: Path, text: str) -> None:
    """Whole or not at all, for a reader in another process."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


_guarded: _Guarded | None = None
_off: set[str] = set()


def _from_env() -> _Guarded | None:
    try:
        said = json.loads(os.environ.get(GUARDS_ENV) or "null")
        if not said:
            return None
        return _Guarded(
            Path(said["dir"]),
            frozenset(said["metrics"]),
            bool(said["save"]),
            int(os.environ.get("RANK", "0")),
            int(os.environ.get("WORLD_SIZE", "1")),
        )
    except (ValueError, KeyError, TypeError) as err:
        print(f"[air] the job's guards are off in this rank: {err!r}", file=sys.stderr, flush=True)
        return None


def _try(name: str, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)``, unless a hook of ``name`` failed before: the first failure prints
    one ``[air]`` line and turns them off."""
    if name in _off or _guarded is None:
        return
    try:
        fn(_guarded, *args)
    except Exception as err:
        _off.add(name)
        print(f"[air] guards in {name} are off: {err!r}", file=sys.stderr, flush=True)


def install() -> None:
    """Hook the trainers when (if ever) they are imported, in a rank of a job with
    guards."""
    global _guarded
    _guarded = _from_env()
    if _guarded is None:
        return
    when_imported("transformers.trainer", _patch_hf)
    when_imported("lightning.pytorch.trainer.trainer", _patch_lightning)
    when_imported("pytorch_lightning.trainer.trainer", _patch_lightning)


def _before(cls: Any, method: str, attach: Callable[[Any], None]) -> None:
    """``cls.method`` calls ``attach(self)`` first; once, whatever patches it since."""
    original = getattr(cls, method, None)
    if original is None or getattr(original, "__air_guards__", False):
        return

    @functools.wraps(original)
    def attaching(self: Any, *args: Any, **kwargs: Any) -> Any:
        attach(self)
        return original(self, *args, **kwargs)

    attaching.__air_guards__ = True  # type: ignore[attr-defined]
    setattr(cls, method, attaching)


HF = "the HF Trainer"
LIGHTNING = "Lightning"


def _patch_hf(module: ModuleType) -> None:
    from transformers.trainer_callback import TrainerCallback

    class AirGuards(TrainerCallback):  # type: ignore[misc]  # transformers is not followed (pyproject)
        """The guarded metrics the Trainer logs; a save, then a stop, when asked."""

        saving = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            _try(HF, _Guarded.trainer, HF)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            _try(HF, _Guarded.journal, state.global_step, logs or {})

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            _try(HF, self._save_when_due, state, control)

        def _save_when_due(self, guarded: _Guarded, state: Any, control: Any) -> None:
            if guarded.due(state.global_step):
                self.saving = control.should_save = control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.saving:
                self.saving = False
                where = str(Path(args.output_dir, f"checkpoint-{state.global_step}").absolute())
                _try(HF, _Guarded.done, where)

    def attach(trainer: Any) -> None:
        if not any(isinstance(cb, AirGuards) for cb in trainer.callback_handler.callbacks):
            trainer.add_callback(AirGuards())

    _before(module.Trainer, "train", lambda trainer: _try(HF, lambda _: attach(trainer)))


def _patch_lightning(module: ModuleType) -> None:
    package = module.__name__.split(".trainer.")[0]  # lightning.pytorch or pytorch_lightning
    callbacks = importlib.import_module(f"{package}.callbacks")

    class AirGuards(callbacks.Callback):  # type: ignore[misc,name-defined]
        """The guarded metrics at each logging step; a save, then a stop, when asked."""

        def __init__(self) -> None:
            self.step: int | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.step = trainer.global_step
            _try(LIGHTNING, _Guarded.trainer, LIGHTNING)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if trainer.global_step != self.step:  # else a micro-batch: the step goes on
                self.step = trainer.global_step
                _try(LIGHTNING, self._step_ended, trainer)

        @staticmethod
        def _step_ended(guarded: _Guarded, trainer: Any) -> None:
            step = trainer.global_step
            every = max(1, int(getattr(trainer, "log_every_n_steps", 1) or 1))
            if trainer.is_global_zero and step % every == 0:
                metrics = trainer.callback_metrics
                guarded.journal(step, {k: metrics[k] for k in guarded.metrics if k in metrics})
            if guarded.due(step):
                place = getattr(trainer.checkpoint_callback, "dirpath", None)
                path = Path(place or Path(trainer.default_root_dir, "checkpoints"))
                path = path.absolute() / f"guard-step={step}.ckpt"
                trainer.save_checkpoint(path)  # every rank calls it: it is collective
                trainer.should_stop = True
                guarded.done(str(path))

    def attach(trainer: Any) -> None:
        if not any(isinstance(cb, AirGuards) for cb in trainer.callbacks):
            trainer.callbacks.append(AirGuards())

    _before(module.Trainer, "fit", lambda trainer: _try(LIGHTNING, lambda _: attach(trainer)))
