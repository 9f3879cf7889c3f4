"""The dense peak FLOP/s of the GPUs we know, by NVML name and data type: MFU's denominator.

Figures are the vendor's datasheet figures *without* sparsity: where a datasheet gives
only the 2:4-sparse tensor figure (marked with an asterisk there), the dense one is half
of it. ``fp32`` is the plain (non-tensor) FP32 rate; ``tf32`` the tensor cores' rate for
FP32 matmuls that PyTorch lets run as TF32. A GPU we do not know, a dtype a GPU has no
figure for, or a MIG slice (whose share of the GPU is not a fixed fraction of the peak)
has no peak: the caller shows why instead of a number.

Sources (NVIDIA datasheets, TFLOP/s, dense):

- H100 SXM / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" datasheet (2023-2024): FP32 67 /
  51 / 60; TF32 989* / 756* / 835*; BF16 and FP16 1,979* / 1,513* / 1,671*; FP8
  3,958* / 3,026* / 3,341*.
- H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" datasheet (2024): the H100 SXM's and
  NVL's figures (FP32 67 / 60, TF32 989* / 835*, BF16 1,979* / 1,671*, FP8 3,958* / 3,341*).
- GH200: "NVIDIA GH200 Grace Hopper Superchip" datasheet: its GPU has the H100 SXM's.
- A100 (40 GB and 80 GB, SXM4 and PCIe alike): "NVIDIA A100 Tensor Core GPU" datasheet:
  FP32 19.5, TF32 156, BF16 312, FP16 312.
- A30: datasheet: FP32 10.3, TF32 82, BF16 165, FP16 165.
- A40: datasheet: FP32 37.4, TF32 74.8, BF16 149.7, FP16 149.7.
- A10: datasheet: FP32 31.2, TF32 62.5, BF16 125, FP16 125. The A10G (AWS G5) has no
  datasheet of NVIDIA's; it is the A10's GA102 and is given the A10's figures.
- L4: datasheet: FP32 30.3, TF32 120*, BF16 242*, FP16 242*, FP8 485*.
- L40: datasheet: FP32 90.5, TF32 90.5, BF16 181.05, FP16 181.05, FP8 362.
- L40S: datasheet: FP32 91.6, TF32 183, BF16 362.05, FP16 362.05, FP8 733.
- V100 SXM2 / PCIe / V100S: "NVIDIA Tesla V100" datasheets: FP32 15.7 / 14 / 16.4,
  tensor (FP16) 125 / 112 / 130; no BF16, TF32 or FP8 tensor cores.
- T4: datasheet: FP32 8.1, FP16 (mixed precision) 65; no BF16, TF32 or FP8.
- B200: "NVIDIA HGX B200" datasheet, 8 GPUs: FP32 600, TF32 18 PF*, BF16 and FP16
  36 PF*, FP8 72 PF*; per GPU: FP32 75, TF32 1,125, BF16 2,250, FP8 4,500.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

TERA = 1e12


class Dtype(enum.StrEnum):
    """The data type a step's matmuls ran in (the ``dtype`` of the ``flops`` mark)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class NoPeak(ValueError):
    """No peak to divide by; the message says why, in words a user reads."""


@dataclass(frozen=True)
class Model:
    """One GPU model: its name as we show it and its dense peaks in TFLOP/s."""

    name: str
    tflops: Mapping[Dtype, float]


@dataclass(frozen=True)
class Peak:
    """The peak of one GPU for one dtype."""

    model: str
    dtype: Dtype
    flops: float  # FLOP/s

    def __str__(self) -> str:
        return f"the {self.model}'s dense {self.dtype} peak ({self.flops / TERA:,.1f} TFLOP/s)"


def _model(name: str, fp32: float, tf32: float | None, half: float, fp8: float | None) -> Model:
    """A model with BF16 and FP16 at the same rate ``half``; None: no such tensor cores."""
    rates = {Dtype.FP32: fp32, Dtype.TF32: tf32, Dtype.BF16: half, Dtype.FP16: half, Dtype.FP8: fp8}
    return Model(name, {dtype: rate for dtype, rate in rates.items() if rate is not None})


_H100_SXM = _model("H100 SXM", 67, 989 / 2, 1979 / 2, 3958 / 2)
_H100_NVL = _model("H100 NVL", 60, 835 / 2, 1671 / 2, 3341 / 2)
_V100_SXM = Model("V100 SXM2", {Dtype.FP32: 15.7, Dtype.FP16: 125})

#: (pattern on the NVML name, model), the first match wins: specific names come first.
MODELS: tuple[tuple[re.Pattern[str], Model], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), model)
    for pattern, model in (
        (r"\bGH200\b", _model("GH200", 67, 989 / 2, 1979 / 2, 3958 / 2)),
        (r"\bH200\b.*\bNVL\b", _model("H200 NVL", 60, 835 / 2, 1671 / 2, 3341 / 2)),
        (r"\bH200\b", _model("H200 SXM", 67, 989 / 2, 1979 / 2, 3958 / 2)),
        (r"\bH100\b.*\bNVL\b", _H100_NVL),
        (r"\bH100\b.*\bPCIe\b", _model("H100 PCIe", 51, 756 / 2, 1513 / 2, 3026 / 2)),
        (r"\bH100\b", _H100_SXM),
        (r"\bB200\b", _model("B200", 75, 1125, 2250, 4500)),
        (r"\bA100\b", _model("A100", 19.5, 156, 312, None)),
        (r"\bA30\b", _model("A30", 10.3, 82, 165, None)),
        (r"\bA40\b", _model("A40", 37.4, 74.8, 149.7, None)),
        (r"\bA10G\b", _model("A10G", 31.2, 62.5, 125, None)),
        (r"\bA10\b", _model("A10", 31.2, 62.5, 125, None)),
        (r"\bL40S\b", _model("L40S", 91.6, 183, 362.05, 733)),
        (r"\bL40\b", _model("L40", 90.5, 90.5, 181.05, 362)),
        (r"\bL4\b", _model("L4", 30.3, 120 / 2, 242 / 2, 485 / 2)),
        (r"\bV100S\b", Model("V100S PCIe", {Dtype.FP32: 16.4, Dtype.FP16: 130})),
        (r"\bV100\b.*\bPCIe\b", Model("V100 PCIe", {Dtype.FP32: 14, Dtype.FP16: 112})),
        (r"\bV100\b", _V100_SXM),
        (r"\bT4\b", Model("T4", {Dtype.FP32: 8.1, Dtype.FP16: 65})),
    )
)

#: NVML names a MIG slice: "NVIDIA A100-SXM4-40GB MIG 1g.5gb", or its "MIG-<uuid>".
_MIG = re.compile(r"(\bMIG\b|^MIG-)", re.IGNORECASE)


def model_of(name: str) -> Model:
    """The model an NVML name is of; raises NoPeak for a MIG slice or a name we do not know."""
    if _MIG.search(name):
        raise NoPeak(f"MIG slice '{name}': a slice's share of the GPU's peak is not known")
    for pattern, model in MODELS:
        if pattern.search(name):
            return model
    raise NoPeak(f"unknown GPU '{name}'")


def peak(name: str | None, dtype: str) -> Peak:
    """The dense peak of the GPU NVML calls ``name`` for ``dtype`` ("bf16", "tf32", ...).

    Raises NoPeak: no GPU (``name`` None), an unknown GPU or dtype, a MIG slice, or a
    dtype the GPU has no tensor cores for (a V100's bf16)."""
    if name is None:
        raise NoPeak("no GPU")
    model = model_of(name)
    try:
        kind = Dtype(dtype)
    except ValueError:
        raise NoPeak(f"no peak for dtype '{dtype}'") from None
    if kind not in model.tflops:
        raise NoPeak(f"the {model.name} has no {kind} peak (no {kind} tensor cores)")
    return Peak(model.name, kind, model.tflops[kind] * TERA)
