"""Step 2: jupyter_air's NVML readings against nvidia-smi's, taken at the same moment.

Each round reads every GPU through ``jupyter_air.gpu.nvml``, runs nvidia-smi, and
reads again; the values that move are compared with the span of our two readings
(see tolerances.py). One check per field sums up every GPU and every round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from jupyter_air.gpu.nvml import GpuInfo, GpuReading, Nvml

from . import smi
from .report import Compared, Report
from .tolerances import DRIVER_VERSION, GPU_FIELDS, PROCESS_MEMORY, TABLE, Tolerance

STEP = "2 nvml-vs-nvidia-smi"


def agreement(tol: Tolerance, ours: Sequence[Any], theirs: Any) -> tuple[bool, str]:
    """Whether our readings agree with nvidia-smi's value under ``tol``; a note if not."""
    present = [v for v in ours if v is not None]
    if theirs is None and not present:
        return True, "neither reports it"
    if theirs is None:
        return False, "only jupyter_air reports it"
    if len(present) < len(ours):
        return False, "only nvidia-smi reports it"
    if isinstance(theirs, str) or any(isinstance(v, str) for v in present):
        same = all(str(v) == str(theirs) for v in present)
        return same, "" if same else "different text"
    numbers = [float(v) for v in present]
    allowed = tol.allowed(float(theirs))
    if tol.bracket:
        low, high = min(numbers), max(numbers)
    else:
        low = high = numbers[0]
        if max(numbers) - min(numbers) > allowed:
            return False, "our own readings differ"
    if low - allowed <= float(theirs) <= high + allowed:
        return True, ""
    return False, f"off by more than {allowed:g} {tol.unit}".rstrip()


def _ours(info: GpuInfo, before: GpuReading, after: GpuReading, field: str) -> list[Any]:
    if hasattr(info, field):
        return [getattr(info, field)]
    return [getattr(before, field), getattr(after, field)]


def compare_round(nvml: Nvml, round_no: int, report: Report) -> list[smi.App]:
    """One round for every GPU; the compute processes nvidia-smi listed."""
    inventory = nvml.inventory()
    before = nvml.read_all()
    gpus = smi.query_gpus()
    apps = smi.query_apps()
    after = nvml.read_all()
    status = nvml.status()
    if len(gpus) != len(inventory):
        report.failed(
            "gpu_count", STEP, f"jupyter_air sees {len(inventory)} GPUs, nvidia-smi {len(gpus)}"
        )
        return apps
    for info, b, a, theirs in zip(inventory, before, after, gpus, strict=True):
        for tol in GPU_FIELDS:
            ok, note = agreement(tol, _ours(info, b, a, tol.field), theirs[tol.smi])
            report.compared.append(
                Compared(
                    info.index, round_no, tol.field, _ours(info, b, a, tol.field),
                    theirs[tol.smi], tol.describe(), ok, note,
                )
            )  # fmt: skip
        _compare_processes(
            info, b, [app for app in apps if app.gpu_uuid == info.uuid], round_no, report
        )
        ok, note = agreement(DRIVER_VERSION, [status.driver_version], theirs["driver_version"])
        report.compared.append(
            Compared(
                info.index, round_no, "driver_version", [status.driver_version],
                theirs["driver_version"], DRIVER_VERSION.describe(), ok, note,
            )
        )  # fmt: skip
    return apps


def _compare_processes(
    info: GpuInfo, reading: GpuReading, apps: list[smi.App], round_no: int, report: Report
) -> None:
    ours = {p.pid: p.used_mib for p in reading.processes}
    theirs = {app.pid: app.used_mib for app in apps}
    for pid in sorted(ours.keys() | theirs.keys()):
        if pid not in theirs:
            ok, note = False, "only jupyter_air lists it (a graphics process?)"
        elif pid not in ours:
            ok, note = False, "only nvidia-smi lists it"
        else:
            ok, note = agreement(PROCESS_MEMORY, [ours[pid]], theirs[pid])
        report.compared.append(
            Compared(
                info.index, round_no, f"process {pid} used_mib", [ours.get(pid)],
                theirs.get(pid), PROCESS_MEMORY.describe(), ok, note,
            )
        )  # fmt: skip


def compare(nvml: Nvml, report: Report, rounds: int, pause: float) -> list[smi.App]:
    """``rounds`` rounds ``pause`` s apart, then one check per field; the last apps."""
    report.tolerances = [{**asdict(t), "allowed": t.describe()} for t in TABLE]
    apps: list[smi.App] = []
    first = len(report.compared)
    for round_no in range(rounds):
        if round_no:
            time.sleep(pause)
        apps = compare_round(nvml, round_no, report)
    compared = report.compared[first:]
    fields = dict.fromkeys(
        "processes" if v.field.startswith("process ") else v.field for v in compared
    )
    fields.setdefault("processes")  # a check even when neither side lists a process
    for name in fields:
        rows = [
            v for v in compared
            if v.field == name or (name == "processes" and v.field.startswith("process "))
        ]  # fmt: skip
        bad = [v for v in rows if not v.agrees]
        detail = "; ".join(
            f"gpu {v.gpu} round {v.round} {v.field}: ours {v.ours}, nvidia-smi {v.smi} ({v.note})"
            for v in bad[:5]
        )
        if not bad:
            detail = f"{len(rows)} values agree" if rows else "neither lists a compute process"
        report.expect(f"nvml_vs_smi:{name}", STEP, not bad, detail)
    return apps
