"""``air usage``: your GPU-hours over the last day or week, idle ones, and the jobs that
held the GPUs (``metrics.gpu_hours``; the GPU panel's usage view shows the same)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ..identity import os_user
from ..metrics.gpu_hours import usage_document
from ..metrics.settings import AirMetrics
from .common import CliError, _output, _service


def add_commands(sub: Any) -> None:
    """Register ``air usage``."""
    usage = sub.add_parser(
        "usage",
        help="your GPU-hours, idle GPU-hours and the jobs that held the GPUs",
        description="GPU-hours of your jobs over a window, from the jobs' own records: "
        "when each attempt ran, which GPUs it held, and its samples' utilization (a "
        "sample under the idle threshold counts as idle).",
    )
    usage.add_argument(
        "--since",
        default="24h",
        help="the window: hours or days back, e.g. 24h or 7d (default 24h)",
    )
    usage.add_argument(
        "--idle-threshold",
        type=float,
        default=AirMetrics.idle_threshold.default_value,
        help="utilization (%%) under which a held GPU counts as idle (default %(default)s)",
    )
    _output(usage)
    usage.set_defaults(func=_usage)


def _usage(args: argparse.Namespace) -> int:
    if not 0 <= args.idle_threshold <= 100:
        raise CliError(f"--idle-threshold must be a percent, got {args.idle_threshold:g}")
    service = _service()
    try:
        doc = usage_document(service.store, os_user(), args.since, time.time(), args.idle_threshold)
    except ValueError as err:
        raise CliError(f"--since: {err}") from None
    if args.output == "json":
        print(json.dumps(doc, indent=2))
        return 0
    print(f"GPU usage, last {doc['window']} (idle: under {doc['idle_threshold']:g} %)")
    if not doc["users"]:
        print("  no job of yours held a GPU in that window")
    for user in doc["users"]:
        print(
            f"  {user['user']}: {user['gpu_hours']:.2f} GPU-hours, "
            f"{user['idle_gpu_hours']:.2f} idle"
        )
        for job in user["jobs"]:
            print(
                f"    {job['job']}  {job['gpus']} GPU(s)  {job['gpu_hours']:.2f} h  "
                f"idle {job['idle_gpu_hours']:.2f} h  {job['name'] or ''}".rstrip()
            )
    return 0
