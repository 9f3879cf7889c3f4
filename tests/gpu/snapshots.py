"""What a node's GPU sampler writes with an attempt, taken here from the fake driver.

The sampler is stopped once it has answered: its XID watch would hold NVML initialized
in the test process after the test (``tests/nvml_guard.py``).
"""

from __future__ import annotations

from typing import Any

from jupyter_air.gpu.sampler import GpuSampler


def sampler_snapshot(samples: int = 1) -> dict[str, Any]:
    """The document of a sampler that took ``samples`` samples (the full history)."""
    sampler = GpuSampler(interval=3600.0)
    try:
        for _ in range(samples):
            sampler.sample_now()
        return sampler.snapshot()
    finally:
        sampler.stop()
