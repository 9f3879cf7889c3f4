"""Step marks with no change to the user's code: the HF Trainer and Lightning are hooked
once they are imported (``import_hooks``), as resuming hooks them; a plain loop marks a
step at each ``log_metrics(step=...)`` of each rank that calls it (the points are rank
0's); ``jupyter_air.step()`` for the rest.

- HF Trainer: ``Trainer.train`` adds a ``TrainerCallback`` (``on_step_begin`` /
  ``on_step_end``: ``state.global_step``, ``state.max_steps`` as the plan) and counts the
  samples and tokens of each ``training_step``'s inputs (every micro-batch of a step);
- Lightning: ``Trainer.fit`` adds a ``Callback`` (``on_train_batch_start`` / ``_end``:
  ``trainer.global_step``, ``estimated_stepping_batches`` as the plan, the batch's size);
- a plain loop: ``log_metrics(step=N)``, whose cadence gives the step time (``Source.LOOP``).

Installed in every rank (a cell, a function, an ``air run`` script through the rank's
``sitecustomize``, a warm session). Never in the training's way: an error in a hook
prints one ``[air]`` line and turns that hook off; ``AIR_PERF=0`` turns them all off.
Tokens are ``input_ids``' elements, or the attention mask's ones while the batch is still
on the CPU (summing a GPU tensor would wait for the GPU at every step).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

from ..import_hooks import when_imported
from . import flops, phases, profiler
from .marks import Source, current, enabled

P = ParamSpec("P")
R = TypeVar("R")

_off: set[str] = set()


def guarded(name: str) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """``fn``, until it first raises: then one ``[air]`` line, and a no-op from then on."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R | None]:
        @functools.wraps(fn)
        def guarding(*args: P.args, **kwargs: P.kwargs) -> R | None:
            if name in _off:
                return None
            try:
                return fn(*args, **kwargs)
            except Exception as err:
                _off.add(name)
                print(f"[air] step marks from {name} are off: {err!r}", file=sys.stderr, flush=True)
                return None

        return guarding

    return decorate


def install() -> None:
    """Hook the libraries when (if ever) they are imported; those already are, now."""
    if not enabled(os.environ):
        return
    current()  # a first step with no begin is counted from the rank's start
    flops.install()  # one step's FLOPs, counted once, for MFU
    phases.install()  # each step's split: data, compute, comm (for stragglers)
    profiler.install()  # torch.profiler for the next N steps when asked (air profile)
    when_imported("transformers.trainer", _patch_hf)
    when_imported("lightning.pytorch.trainer.trainer", _patch_lightning)
    when_imported("pytorch_lightning.trainer.trainer", _patch_lightning)


@guarded("log_metrics")
def loop_step(step: int) -> None:
    """A rank's ``log_metrics(step=step)``: its cadence is the loop's."""
    marks = current()
    if marks is not None:
        marks.step(Source.LOOP, int(step))


@guarded("jupyter_air.step")
def step(samples: int | None = None, tokens: int | None = None, total: int | None = None) -> None:
    """Mark the end of one training step of this rank, with its batch's samples and
    tokens when known: for a loop whose steps the hooks cannot see. ``total``: the run's
    planned number of steps, for its progress and ETA (given once, or again when it
    changes). Outside a job, or with ``AIR_PERF=0``, it does nothing."""
    marks = current()
    if marks is not None:
        if total is not None:
            marks.plan(Source.STEP, total)
        marks.step(Source.STEP, samples=samples, tokens=tokens)


def batch_size(batch: Any) -> tuple[int | None, int | None]:
    """(samples, tokens) of one batch: the first dimension of its ``input_ids`` (or of its
    first tensor), the tokens of its ``input_ids``; None where there is no telling."""
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        ids = batch.get("input_ids")
        if _tensor(ids):
            mask = batch.get("attention_mask")
            if _tensor(mask) and mask.shape == ids.shape and mask.device.type == "cpu":
                return int(ids.shape[0]), int(mask.sum())
            return int(ids.shape[0]), int(ids.numel())
        values: Any = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        values = batch
    else:
        values = [batch]
    for value in values:
        if _tensor(value) and len(value.shape) > 0:
            return int(value.shape[0]), None
        if isinstance(value, (list, tuple, dict)):
            return batch_size(value)
    return None, None


def _tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "device") and hasattr(value, "numel")


class _Batches:
    """Samples and tokens of the micro-batches of the step under way."""

    def __init__(self) -> None:
        self.samples: int | None = 0
        self.tokens: int | None = 0
        self.seen = False

    def add(self, batch: Any) -> None:
        samples, tokens = batch_size(batch)
        self.seen = True
        self.samples = None if samples is None or self.samples is None else self.samples + samples
        self.tokens = None if tokens is None or self.tokens is None else self.tokens + tokens

    def take(self) -> tuple[int | None, int | None]:
        found = (self.samples, self.tokens) if self.seen else (None, None)
        self.samples, self.tokens, self.seen = 0, 0, False
        return found


def _wrapped(cls: Any, method: str, before: Callable[[Any], None]) -> None:
    """``cls.method`` calls ``before(self)`` first; once, whatever patches it since."""
    original = getattr(cls, method, None)
    if original is None or getattr(original, "__air_perf__", False):
        return

    @functools.wraps(original)
    def marking(self: Any, *args: Any, **kwargs: Any) -> Any:
        before(self)
        return original(self, *args, **kwargs)

    marking.__air_perf__ = True  # type: ignore[attr-defined]
    setattr(cls, method, marking)


def _patch_hf(module: ModuleType) -> None:
    from transformers.trainer_callback import TrainerCallback

    class AirSteps(TrainerCallback):  # type: ignore[misc]  # transformers is not followed (pyproject)
        """Marks each optimizer step of this rank."""

        def __init__(self) -> None:
            self.batches = _Batches()

        @guarded("the HF Trainer")
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks = current()
            if marks is not None and state.max_steps:
                marks.plan(Source.HF, state.max_steps)

        @guarded("the HF Trainer")
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks = current()
            if marks is not None:
                marks.begin()

        @guarded("the HF Trainer")
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            samples, tokens = self.batches.take()
            marks = current()
            if marks is not None:
                marks.step(Source.HF, state.global_step, samples, tokens)

    @guarded("the HF Trainer")
    def attach(trainer: Any) -> None:
        if current() is None or any(
            isinstance(cb, AirSteps) for cb in trainer.callback_handler.callbacks
        ):
            return
        steps = AirSteps()
        trainer.add_callback(steps)
        training_step = trainer.training_step  # the instance's: a subclass's own too

        @functools.wraps(training_step)
        def counting(*args: Any, **kwargs: Any) -> Any:
            count(args[1] if len(args) > 1 else kwargs.get("inputs"))
            return training_step(*args, **kwargs)

        @guarded("the HF Trainer's batches")
        def count(inputs: Any) -> None:
            steps.batches.add(inputs)

        trainer.training_step = counting

    _wrapped(module.Trainer, "train", attach)


def _patch_lightning(module: ModuleType) -> None:
    package = module.__name__.split(".trainer.")[0]  # lightning.pytorch or pytorch_lightning
    callbacks = importlib.import_module(f"{package}.callbacks")  # imported by the trainer

    class AirSteps(callbacks.Callback):  # type: ignore[misc,name-defined]
        """Marks each optimizer step of this rank (``global_step`` moving on)."""

        def __init__(self) -> None:
            self.batches = _Batches()
            self.step: int | None = None

        @guarded("Lightning")
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.step = trainer.global_step
            marks = current()
            if marks is not None:
                marks.plan(Source.LIGHTNING, trainer.estimated_stepping_batches)

        @guarded("Lightning")
        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            marks = current()
            if marks is not None and not self.batches.seen:
                marks.begin()
            self.batches.add(batch)

        @guarded("Lightning")
        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if trainer.global_step == self.step:  # a micro-batch: the step goes on
                return
            self.step = trainer.global_step
            samples, tokens = self.batches.take()
            marks = current()
            if marks is not None:
                marks.step(Source.LIGHTNING, trainer.global_step, samples, tokens)

    @guarded("Lightning")
    def attach(trainer: Any) -> None:
        if current() is not None and not any(isinstance(cb, AirSteps) for cb in trainer.callbacks):
            trainer.callbacks.insert(0, AirSteps())

    _wrapped(module.Trainer, "fit", attach)
