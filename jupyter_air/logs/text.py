"""A log line as text, the same in downloads, ``air logs`` and the downloaded files."""

from __future__ import annotations

import time
from functools import lru_cache

from .query import LogLine

_LEVEL = {"info": "INFO", "warning": "WARNING", "error": "ERROR"}


def format_line(line: LogLine) -> str:
    """``2026-11-29T08:30:13.250Z node 0 rank 1 WARNING text`` (UTC, to the millisecond)."""
    seconds, millis = divmod(round(line.t * 1000), 1000)
    level = _LEVEL.get(line.level) or line.level.upper()
    return (
        f"{_second(seconds)}.{millis:03d}Z node {line.node} rank {line.rank} {level} {line.text}\n"
    )


@lru_cache(maxsize=1024)
def _second(seconds: int) -> str:
    """One second's stamp, made once: lines come many to a second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
