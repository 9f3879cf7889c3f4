"""A job's MFU: the FLOPs its ranks do per step over what their GPUs could do meanwhile.

Each rank's ``flops`` line (``perf.flops``) gives one step's FLOPs of that rank, the
dtype they ran in and its GPU's NVML name; ``gpu.peaks`` gives that GPU's dense peak
for that dtype. With the job's step time ``T`` (``perf.progress``):
``MFU = sum(FLOPs of each rank) / (T x sum(peak of each rank's GPU))``. Ranks that have
no line yet are left out of both sums (ranks of one data-parallel job do the same
work). Absent, with the reason, for no GPU, an unknown one, FLOPs not counted, or no
step time yet: never a number made up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..gpu.peaks import TERA, NoPeak, Peak, peak
from .marks import parse, rank_files

#: The ``flops`` line comes after a rank's first few steps: the head of its file.
_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Mfu:
    """``value`` a fraction (0.41 for 41 %) or None; ``why`` how it was computed, or why
    it is absent."""

    value: float | None
    why: str


def of_job(perf_dir: Path, step_time_s: float | None) -> Mfu:
    """The MFU of the job whose marks are in ``perf_dir``, at ``step_time_s`` a step."""
    lines = {rank: line for rank, line in _flops_lines(perf_dir).items() if line is not None}
    if not lines:
        return Mfu(None, "FLOPs not counted yet (a rank counts its second step)")
    flops = 0.0
    peaks: list[Peak] = []
    for rank, line in lines.items():
        gpu, why = _text(line.get("gpu")), _text(line.get("why"))
        if gpu is None:
            return Mfu(None, _on_rank(why or "no GPU", rank, len(lines)))
        counted = line.get("flops")
        if not isinstance(counted, int | float) or isinstance(counted, bool) or counted <= 0:
            return Mfu(None, _on_rank(f"FLOPs not counted: {why or 'no figure'}", rank, len(lines)))
        try:
            peaks.append(peak(gpu, str(line.get("dtype"))))
        except NoPeak as err:
            return Mfu(None, _on_rank(str(err), rank, len(lines)))
        flops += counted
    if step_time_s is None or step_time_s <= 0:
        return Mfu(None, "no step time yet")
    capacity = sum(p.flops for p in peaks) * step_time_s
    value = flops / capacity
    how = _how(lines, flops, peaks)
    if value > 1:
        return Mfu(None, f"{value:.0%} of the peak, which cannot be: {how}")
    return Mfu(value, how)


def _how(lines: dict[int, dict[str, Any]], flops: float, peaks: list[Peak]) -> str:
    """How the figure was had, in one sentence."""
    ranks = len(lines)
    kinds = {line.get("how") for line in lines.values()}
    source = (
        "counted by PyTorch's FlopCounterMode"
        if kinds == {"counted"}
        else "estimated as 6 x parameters x tokens (the FLOP counter saw none; a decoder's rule)"
    )
    gpus = sorted({str(p) for p in peaks})
    per_rank = f"{_amount(flops / ranks)} a step" + (
        f" per rank ({ranks} ranks)" if ranks > 1 else ""
    )
    text = f"{per_rank}, {source}, against {'; '.join(gpus)}"
    if any(line.get("cpu") for line in lines.values()):
        text += "; the step ran on the CPU, so the GPU's peak does not apply to it"
    return text


def _amount(flops: float) -> str:
    return f"{flops / TERA:,.4g} TFLOP" if flops >= TERA else f"{flops / 1e9:,.4g} GFLOP"


def _on_rank(why: str, rank: int, ranks: int) -> str:
    return why if ranks == 1 else f"{why} (rank {rank})"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _flops_lines(perf_dir: Path) -> dict[int, dict[str, Any] | None]:
    """Each rank's latest ``flops`` line in the head of its file (None: none yet)."""
    found: dict[int, dict[str, Any] | None] = {}
    for rank, path in rank_files(perf_dir).items():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            head = os.read(fd, _HEAD_BYTES)
        except OSError:
            continue
        finally:
            os.close(fd)
        lines, _ = parse(head)
        found[rank] = next((line for line in reversed(lines) if "flops" in line), None)
    return found
