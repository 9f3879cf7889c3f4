"""Step 4: what one sample of the server's sampler costs on this driver, against a bare
pynvml loop making the same NVML calls (bench/bench_gpu.py's baseline), alone and with
the host figures the sampler also reads (psutil), side by side in alternating rounds so
that drift in the machine's load hits all alike."""

from __future__ import annotations

import statistics
from typing import Any

import psutil
import pynvml

from bench.bench_gpu import bare_pynvml_sample, per_call, thread_sample
from jupyter_air.gpu.nvml import Nvml
from jupyter_air.gpu.sampler import GpuSampler


def sampler_vs_bare(nvml: Nvml, rounds: int, samples: int) -> dict[str, Any]:
    """Medians per sample in µs and the ratios. ``nvml`` is already initialised."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in nvml.inventory()]
    sampler = GpuSampler(nvml=nvml, interval=10.0, history=7200.0)
    take = thread_sample(sampler)
    take()

    def with_host() -> None:
        bare_pynvml_sample(handles)
        psutil.cpu_percent(interval=None)
        psutil.virtual_memory()

    bare, host, ours = [], [], []
    for _ in range(rounds):
        bare.append(per_call(lambda: bare_pynvml_sample(handles), samples))
        host.append(per_call(with_host, samples))
        ours.append(per_call(take, samples))
    b, h, s = statistics.median(bare), statistics.median(host), statistics.median(ours)
    return {
        "gpus": len(handles),
        "rounds_x_samples": f"{rounds} x {samples}",
        "bare_pynvml_us_per_sample": round(b * 1e6, 1),
        "bare_pynvml_plus_psutil_us_per_sample": round(h * 1e6, 1),
        "sampler_us_per_sample": round(s * 1e6, 1),
        "sampler_vs_bare_pynvml": round(s / b, 2),
        "sampler_vs_bare_pynvml_plus_psutil": round(s / h, 2),
    }
