"""``nvidia-smi`` queried the way a person checks a GPU, parsed into plain values.

The command is the ``nvidia-smi`` on PATH: on a machine without a GPU the tests put a
fake first on PATH (tests/gpu/fake_nvidia_smi.py) that answers from the fake driver's
scenario file.
"""

from __future__ import annotations

import csv
import subprocess
from dataclasses import dataclass
from typing import Any

from .tolerances import GPU_FIELDS

#: What nvidia-smi prints for a value it cannot give.
MISSING = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[Insufficient Permissions]")

GPU_QUERY = ("index", *(t.smi for t in GPU_FIELDS), "driver_version")
APP_QUERY = ("gpu_uuid", "pid", "process_name", "used_memory")


class SmiError(RuntimeError):
    """nvidia-smi could not be run, or said something we cannot read."""


@dataclass(frozen=True)
class App:
    gpu_uuid: str
    pid: int
    process_name: str | None
    used_mib: float | None


def _run(args: list[str], timeout: float = 30) -> list[list[str]]:
    try:
        proc = subprocess.run(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SmiError(f"nvidia-smi could not be run: {err}") from err
    if proc.returncode != 0:
        raise SmiError(f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    rows = csv.reader(proc.stdout.splitlines(), skipinitialspace=True)
    return [[cell.strip() for cell in row] for row in rows if row]


def _value(text: str) -> Any:
    """None for a value nvidia-smi cannot give, a number where it is one, else the text."""
    if text in MISSING:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def query_gpus() -> list[dict[str, Any]]:
    """One dict per GPU, keyed by nvidia-smi's field names, in NVML index order."""
    rows = _run([f"--query-gpu={','.join(GPU_QUERY)}"])
    gpus = []
    for row in rows:
        if len(row) != len(GPU_QUERY):
            raise SmiError(f"expected {len(GPU_QUERY)} fields {GPU_QUERY}, got {row}")
        gpu = {name: _value(cell) for name, cell in zip(GPU_QUERY, row, strict=True)}
        for text_field in ("name", "uuid", "driver_version"):  # "12.0" stays text
            gpu[text_field] = row[GPU_QUERY.index(text_field)]
        gpus.append(gpu)
    return sorted(gpus, key=lambda g: g["index"])


def query_apps() -> list[App]:
    """Every compute process nvidia-smi lists, on any GPU."""
    apps = []
    for row in _run([f"--query-compute-apps={','.join(APP_QUERY)}"]):
        if len(row) != len(APP_QUERY):
            raise SmiError(f"expected {len(APP_QUERY)} fields {APP_QUERY}, got {row}")
        used = _value(row[3])
        apps.append(
            App(row[0], int(row[1]), row[2] or None, used if isinstance(used, float) else None)
        )
    return apps
