"""One training step's FLOPs of this rank, counted once, for MFU (``perf.mfu``).

The first step mark ends a warm-up step (lazy initialisation, autotuning); PyTorch's own
``FlopCounterMode`` is then entered, and left at the next mark: what it saw between the
two marks is one step's FLOPs (divided by the steps between them, for a loop marked every
few steps). The counter is imported only then and runs for that one step: every other
step of the rank runs as it would without us. The result is one ``flops`` line of the
rank's marks, with the data type most of those FLOPs ran in and the NVML name of the
rank's GPU:

``{"flops": 1.2e12, "how": "counted", "dtype": "bf16", "gpu": "NVIDIA H100 80GB HBM3"}``

Where the counter sees no FLOPs (kernels it cannot see: compiled graphs, custom CUDA or
Triton kernels) a decoder's ``6 x parameters x tokens`` stands in (``"how": "6nd"``),
when the step mark gave the batch's tokens. Where neither can be had, or the rank has
no GPU, ``flops`` is null and ``why`` says why. ``"cpu": true``: the step's matmuls ran
on the CPU, so the GPU's peak is no fair measure of them. A warm session's rank counts
again in each cell's folder.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .marks import Marks, current, parse, rank_file

if TYPE_CHECKING:
    import torch

#: How much of the rank's own marks file is read back for the counted step's tokens.
_TAIL_BYTES = 64 * 1024


class Stage(enum.Enum):
    WAITING = "waiting for a warm-up step to end"
    COUNTING = "counting one step"
    DONE = "counted"


_installed: set[int] = set()


def install(marks: Marks | None = None) -> None:
    """Count one step's FLOPs of this rank once its marks have a step (a no-op outside a
    job, with ``AIR_PERF=0``, or a second time)."""
    marks = marks or current()
    if marks is None or id(marks) in _installed:
        return
    _installed.add(id(marks))
    marks.on_step(StepFlops(marks).at_mark)


class StepFlops:
    """The listener of one process's step marks that counts a step once per folder."""

    def __init__(self, marks: Marks) -> None:
        self._marks = marks
        self._folder = marks.folder
        self.stage = Stage.WAITING
        self._count: Count | None = None
        self._since = 0
        self._thread = 0
        self._gpu: str | None = None

    def at_mark(self, step: int) -> None:
        counting_here = self.stage is Stage.COUNTING and threading.get_ident() == self._thread
        if self.stage is Stage.COUNTING and not counting_here:
            return  # the mode is the counting thread's: only that thread may leave it
        if self._marks.folder != self._folder:  # a warm session's next cell: count afresh
            self._folder = self._marks.folder
            if counting_here:  # the last cell ended mid-count: nothing of it is kept
                with contextlib.suppress(Exception):
                    self._stop()
            self.stage = Stage.WAITING
        if self.stage is Stage.WAITING:
            self._start(step)
        elif self.stage is Stage.COUNTING:
            self._finish(step)

    def _start(self, step: int) -> None:
        if "torch" not in sys.modules:
            self._give_up(None, "this rank does not use PyTorch")
            return
        try:
            gpu, why = rank_gpu()
        except Exception as err:  # NVML misbehaving costs the figure, never the rank
            gpu, why = None, f"the rank's GPU could not be read: {err!r}"
        if gpu is None:
            self._give_up(None, why)
            return
        self._gpu, self._since, self._thread = gpu, step, threading.get_ident()
        try:
            self._count = Count()
        except Exception as err:
            self._give_up(gpu, f"the FLOP counter could not start: {err!r}")
            return
        self.stage = Stage.COUNTING

    def _stop(self) -> Result:
        count, self._count = self._count, None
        assert count is not None
        return count.stop()

    def _finish(self, step: int) -> None:
        try:
            result = self._stop()
        except Exception as err:
            self._give_up(self._gpu, f"the FLOP counter failed: {err!r}")
            return
        if step <= self._since:  # the numbering started over: count the next step
            self.stage = Stage.WAITING
            return
        steps = step - self._since
        line: dict[str, Any] = {"gpu": self._gpu}
        if result.flops > 0:
            line.update(flops=result.flops / steps, how="counted", dtype=result.dtype)
        else:
            tokens = self._tokens(step)
            if result.parameters and tokens:
                line.update(flops=6.0 * result.parameters * tokens, how="6nd", dtype=result.dtype)
            else:
                self._give_up(self._gpu, _why_not_counted(result.parameters, tokens))
                return
        if result.on_cpu:
            line["cpu"] = True
        self._marks.note(**line)
        self.stage = Stage.DONE

    def _give_up(self, gpu: str | None, why: str) -> None:
        self._marks.note(flops=None, how=None, dtype=None, gpu=gpu, why=why)
        self.stage = Stage.DONE

    def _tokens(self, step: int) -> int | None:
        """This rank's tokens in ``step``, as its own step line gave them."""
        path = rank_file(Path(self._marks.folder), int(os.environ.get("RANK", "0")))
        try:
            with path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
                lines, _ = parse(f.read())
        except OSError:
            return None
        for line in reversed(lines):
            if line.get("s") == step and "dt" in line:  # a step line, no other kind's
                tokens = line.get("k")
                return tokens if isinstance(tokens, int) and tokens > 0 else None
        return None


def _why_not_counted(parameters: int, tokens: int | None) -> str:
    missing = "the batch's tokens are unknown" if parameters else "no module with parameters ran"
    if parameters and tokens is None:
        missing += " (give them: jupyter_air.step(tokens=...))"
    return f"the FLOP counter saw none (compiled or custom kernels?) and {missing}"


def rank_gpu() -> tuple[str | None, str]:
    """The NVML name of this rank's GPU, or None and why there is none.

    The GPU is the first of ``CUDA_VISIBLE_DEVICES`` (an index or a UUID, as the job's
    environment gives it), or the ``LOCAL_RANK``-th when that is unset. A slice of a GPU
    in MIG mode is named as one (the peak table knows it has no peak)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible is not None else None
    if first in ("", "-1"):
        return None, "no GPU"
    if first is not None and first.upper().startswith("MIG-"):
        return first, ""
    from jupyter_air.gpu.nvml import Nvml

    nvml = Nvml()
    try:
        status = nvml.status()
        if not status.available:
            return None, f"no GPU ({status.reason})" if status.reason else "no GPU"
        gpus = nvml.inventory()
    finally:
        nvml.shutdown()
    if first is None:
        first = str(int(os.environ.get("LOCAL_RANK", "0") or 0) % len(gpus))
    found = [g for g in gpus if first in (str(g.index), g.uuid)]
    if not found or found[0].name is None:
        return None, f"no GPU: CUDA_VISIBLE_DEVICES={first} is none of NVML's"
    gpu = found[0]
    return (f"{gpu.name} MIG" if gpu.mig_mode else gpu.name), ""


@dataclass(frozen=True)
class Result:
    """What one counted step showed: its FLOPs, the data type most of them ran in, the
    parameters of the outermost modules that ran (for 6ND), and whether the matmuls ran
    on the CPU."""

    flops: int
    dtype: str
    parameters: int
    on_cpu: bool


class Count:
    """``FlopCounterMode`` entered now, on this thread, until ``stop``.

    Each of the counter's formulas is wrapped to add its FLOPs to its inputs' data type;
    global module hooks note the outermost modules run (their parameters and, for 6ND,
    the dtype they run in)."""

    def __init__(self) -> None:
        import torch
        from torch.nn.modules import module
        from torch.utils import flop_counter

        self._torch = torch
        self._by_dtype: Counter[str] = Counter()
        self._on_cpu = 0
        self._depth = 0
        #: The outermost modules run, with the dtype each computes in and whether on the CPU.
        self._roots: dict[int, tuple[torch.nn.Module, str, bool]] = {}
        mapping = {op: self._tallied(op, f) for op, f in flop_counter.flop_registry.items()}
        self._counter = flop_counter.FlopCounterMode(display=False, custom_mapping=mapping)
        self._hooks = [
            module.register_module_forward_pre_hook(self._entering),
            module.register_module_forward_hook(self._left),
        ]
        try:
            self._counter.__enter__()  # type: ignore[no-untyped-call]
        except BaseException:
            self._unhook()
            raise

    def stop(self) -> Result:
        try:
            self._counter.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        finally:
            self._unhook()
        total = int(self._counter.get_total_flops())
        if self._by_dtype:
            dtype = self._by_dtype.most_common(1)[0][0]
            on_cpu = self._on_cpu * 2 > sum(self._by_dtype.values())
        else:  # the counter saw nothing: the dtype the modules run in
            kinds = Counter((kind, cpu) for _, kind, cpu in self._roots.values())
            dtype, on_cpu = kinds.most_common(1)[0][0] if kinds else ("fp32", False)
        seen: set[int] = set()
        parameters = 0
        for root, _, _ in self._roots.values():
            for p in root.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    parameters += p.numel()
        self._roots.clear()
        return Result(total, dtype, parameters, on_cpu)

    def _unhook(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _tallied(self, op: Any, formula: Callable[..., int]) -> Callable[..., int]:
        conv = "conv" in str(op)

        def count(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
            flops = int(formula(*args, out_val=out_val, **kwargs))
            tensor = next((a for a in args if isinstance(a, self._torch.Tensor)), None)
            if tensor is not None:
                self._by_dtype[self._label(tensor.dtype, tensor.is_cuda, conv)] += flops
                self._on_cpu += flops if tensor.device.type == "cpu" else 0
            return flops

        count._get_raw = True  # type: ignore[attr-defined]  # the counter passes tensors
        return count

    def _label(self, dtype: torch.dtype, cuda: bool, conv: bool) -> str:
        torch = self._torch
        if dtype is torch.float32:
            tf32 = (
                torch.backends.cudnn.allow_tf32
                if conv
                else torch.get_float32_matmul_precision() != "highest"
            )
            return "tf32" if cuda and tf32 else "fp32"
        if dtype.is_floating_point and dtype.itemsize == 1:
            return "fp8"
        return _DTYPES.get(str(dtype), str(dtype).removeprefix("torch."))

    def _entering(self, mod: torch.nn.Module, _args: Any) -> None:
        if self._depth == 0 and id(mod) not in self._roots:
            param = next(mod.parameters(), None)
            if param is not None:
                self._roots[id(mod)] = (mod, self._running_dtype(param), not param.is_cuda)
        self._depth += 1

    def _left(self, _mod: torch.nn.Module, _args: Any, _out: Any) -> None:
        self._depth = max(0, self._depth - 1)

    def _running_dtype(self, param: torch.Tensor) -> str:
        """The dtype a module whose parameter is ``param`` computes in: autocast's when
        it is on, else its parameters'."""
        device = param.device.type
        if self._torch.is_autocast_enabled(device):
            return self._label(self._torch.get_autocast_dtype(device), param.is_cuda, False)
        return self._label(param.dtype, param.is_cuda, False)


_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float64": "fp64"}
