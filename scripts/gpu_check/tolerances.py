"""How far jupyter_air's reading of a value may be from nvidia-smi's, and why.

Both read the same NVML of the same driver, so identities and capacities must agree
to the rounding of the units. Values that move while a GPU computes are compared
with the span of our two readings taken just before and just after nvidia-smi's
(``bracket``), widened by the tolerance: nvidia-smi starts, initialises NVML and
reads in tens of milliseconds, in which utilization, power and temperature move.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """``field``: ours (a GpuInfo / GpuReading attribute); ``smi``: nvidia-smi's query
    field; agreement within ``max(absolute, relative * |smi|)``, or exact when both
    are zero and the value is text."""

    field: str
    smi: str
    unit: str
    absolute: float = 0.0
    relative: float = 0.0
    bracket: bool = False
    why: str = ""

    def allowed(self, smi_value: float) -> float:
        return max(self.absolute, self.relative * abs(smi_value))

    def describe(self) -> str:
        if not self.absolute and not self.relative:
            return "exact"
        parts = [f"±{self.absolute:g} {self.unit}"] if self.absolute else []
        if self.relative:
            parts.append(f"±{self.relative:.0%}")
        span = " around our readings before and after" if self.bracket else ""
        return " or ".join(parts) + span


#: nvidia-smi's fields in the order ``smi.query_gpus`` asks for them.
GPU_FIELDS: tuple[Tolerance, ...] = (
    Tolerance("name", "name", "", why="the same string from the same driver"),
    Tolerance("uuid", "uuid", "", why="the same string from the same driver"),
    Tolerance(
        "mem_total_mib",
        "memory.total",
        "MiB",
        absolute=1,
        why="ours rounds bytes to MiB, nvidia-smi truncates: at most 1 MiB apart",
    ),
    Tolerance(
        "power_limit_w",
        "enforced.power.limit",
        "W",
        absolute=0.5,
        why="the same enforced limit in mW; nvidia-smi prints W with two decimals",
    ),
    Tolerance(
        "mem_used_mib",
        "memory.used",
        "MiB",
        absolute=2,
        bracket=True,
        why=(
            "the job's process holds its memory still while compared; 1 MiB of rounding "
            "each side (ours keeps fractions, nvidia-smi truncates)"
        ),
    ),
    Tolerance(
        "util",
        "utilization.gpu",
        "%",
        absolute=10,
        bracket=True,
        why=(
            "NVML's utilization is the share of its last sample period (1/6 s to 1 s by "
            "product) with a kernel running; reads ms apart may fall in different periods. "
            "Under a steady matrix-product loop both sit near 100; 10 points still catches "
            "a wrong field (memory utilization) or a scale error"
        ),
    ),
    Tolerance(
        "temp_c",
        "temperature.gpu",
        "°C",
        absolute=2,
        bracket=True,
        why="the die warms by about a degree a second under load; nvidia-smi prints whole °C",
    ),
    Tolerance(
        "power_w",
        "power.draw",
        "W",
        absolute=15,
        relative=0.10,
        bracket=True,
        why=(
            "board power swings by tens of watts within milliseconds under load; both read "
            "nvmlDeviceGetPowerUsage, whose averaging window the driver chooses; a mW/W "
            "slip is a factor of 1000, far outside"
        ),
    ),
)

#: One compute process, matched by pid.
PROCESS_MEMORY = Tolerance(
    "process used_mib",
    "used_memory",
    "MiB",
    absolute=1,
    why="the same per-process count in bytes; ours rounds to MiB, nvidia-smi truncates",
)

DRIVER_VERSION = Tolerance(
    "driver_version", "driver_version", "", why="the same string from the same driver"
)

TABLE: tuple[Tolerance, ...] = (*GPU_FIELDS, PROCESS_MEMORY, DRIVER_VERSION)
