"""Step 2b: what the driver answers to the hardware queries of issue 39, recorded as it
said it (the fake driver plays each; only a real one says which it has): the clocks
event (throttle) reasons under both names, the SM clock and its maximum, the ECC
counters, retired pages, remapped rows, and an XID event set opened and waited on.

A query the GPU does not support is no failure (a consumer GPU has no ECC; page
retirement is pre-Ampere, row remapping Ampere on; no events on MIG or vGPU): the
report records the reason. Any other error is one.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import pynvml

from jupyter_air.gpu.faults import XidWatch, throttles
from jupyter_air.gpu.nvml import UNAVAILABLE_ERRORS, Nvml

from .report import Report

STEP = "2b hardware"
#: NVML's words for "this GPU does not report that" (``nvml.UNAVAILABLE_ERRORS``).
UNAVAILABLE_TEXTS = frozenset(str(pynvml.NVMLError(code)) for code in UNAVAILABLE_ERRORS)
CLOCK_REASON_NAMES = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)


def check_hardware(nvml: Nvml, report: Report) -> None:
    for info, reading in zip(nvml.inventory(), nvml.read_all(), strict=True):
        health = reading.health
        names = clock_reason_names(info.index)
        said: dict[str, Any] = {
            **asdict(health),
            "throttles": [t.value for t in throttles(health.clock_reasons)],
            "max_sm_clock_mhz": info.max_sm_clock_mhz,
            "clock_reasons_by_name": names,
        }
        report.machine[f"gpu {info.index} hardware"] = said
        errors = {k: v for k, v in health.unavailable.items() if v not in UNAVAILABLE_TEXTS}
        report.expect(
            f"hardware_queries:{info.index}", STEP, reading.status != "ok" or not errors,
            f"errors {errors}; {said}" if errors else str(said),
        )  # fmt: skip
        answered = [n for n, v in names.items() if isinstance(v, int)]
        report.expect(
            f"clock_reasons_names:{info.index}", STEP,
            bool(answered) or "clock_reasons" in health.unavailable,
            f"{names}; jupyter_air read {health.clock_reasons}",
        )  # fmt: skip
    watch_xids(report)


def clock_reason_names(index: int) -> dict[str, int | str]:
    """What each name of the throttle-reasons query answers here: a bitmask or an error."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    answers: dict[str, int | str] = {}
    for name in CLOCK_REASON_NAMES:
        try:
            answers[name] = int(getattr(pynvml, name)(handle))
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, AttributeError) as err:
            answers[name] = f"{type(err).__name__}: {err}"
    return answers


def watch_xids(report: Report, timeout: float = 10.0) -> None:
    """An XID watch opens its event set, and one wait comes back (an event or a timeout)."""
    watch = XidWatch(Nvml(retry_interval=0), wait_ms=200).start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (
            watch.watching or watch.refused or watch.reason != XidWatch.NOT_STARTED
        ):
            time.sleep(0.05)  # the set is being opened
        came_back = watch.caught_up(time.time(), timeout=timeout)
        events = [asdict(e) for e in watch.events()]
        report.machine["xid_event_set"] = {
            "watching": watch.watching, "refused": watch.refused, "reason": watch.reason,
            "events": events,
        }  # fmt: skip
        refused = watch.refused and all(r in UNAVAILABLE_TEXTS for r in watch.refused.values())
        report.expect(
            "xid_event_set", STEP, (watch.watching and came_back) or bool(refused),
            f"watching {watch.watching}, a wait came back {came_back}, refused by GPU "
            f"{watch.refused}, reason {watch.reason}, events {events}",
        )  # fmt: skip
    finally:
        watch.stop()
