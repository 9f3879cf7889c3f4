"""What the report says the checks ran on: the driver, CUDA, GPUs, Python and torch."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import pynvml

from jupyter_air.gpu.nvml import Nvml


def nvml_library() -> str:
    """The NVML library this process loaded: its path, or that it is the test double."""
    if hasattr(pynvml.nvmlLib, "fake_nvml_call_count"):
        return "FAKE: tests/fake_nvml (no real driver; values are the scenario's)"
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libnvidia-ml" in line:
            return line.split()[-1]
    return "unknown"


def is_fake() -> bool:
    return hasattr(pynvml.nvmlLib, "fake_nvml_call_count")


def describe(nvml: Nvml) -> dict[str, Any]:
    status = nvml.status()
    facts: dict[str, Any] = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "nvml_available": status.available,
        "nvml_reason": status.reason,
        "driver_version": status.driver_version,
        "cuda_driver_version": status.cuda_driver_version,
        "nvml_library": nvml_library() if status.available else None,
        "pynvml": getattr(pynvml, "__version__", None) or _version("nvidia-ml-py"),
        "jupyter_air": _version("jupyter_air"),
    }
    for gpu in nvml.inventory():
        facts[f"gpu {gpu.index}"] = (
            f"{gpu.name}, {gpu.mem_total_mib} MiB, power limit {gpu.power_limit_w} W, "
            f"MIG {gpu.mig_mode}, virtualization {gpu.virtualization}, {gpu.uuid}"
        )
    return facts


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
