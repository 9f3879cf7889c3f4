"""A log line as text, the same in downloads, ``air logs`` and the downloaded files."""

from __future__ import annotations

import time

from .query import LogLine


def format_line(line: LogLine) -> str:
    """``2026-11-29T08:30:13.250Z node 0 rank 1 WARNING text`` (UTC, to the millisecond)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(line.t))
    millis = round(line.t * 1000) % 1000
    where = f"node {line.node} rank {line.rank}"
    return f"{stamp}.{millis:03d}Z {where} {line.level.upper()} {line.text}\n"
