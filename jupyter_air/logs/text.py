"""A log line as text, the same in downloads, ``air logs`` and the downloaded files."""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING

from .levels import NAMES

if TYPE_CHECKING:
    from .query import LogLine

_LEVEL = {"info": "INFO", "warning": "WARNING", "error": "ERROR"}


def format_line(line: LogLine) -> str:
    """``2026-11-29T08:30:13.250Z node 0 rank 1 WARNING text`` (UTC, to the millisecond)."""
    seconds, millis = divmod(round(line.t * 1000), 1000)
    level = _LEVEL.get(line.level) or line.level.upper()
    return (
        f"{_second(seconds)}.{millis:03d}Z node {line.node} rank {line.rank} {level} {line.text}\n"
    )


class RunText:
    """Runs of one rank's records (``LogFilter.run_pattern``: consecutive records of one
    stamp, kind and level, as a rank writes a burst of lines) as ``format_line`` makes
    their lines, encoded, without a ``LogLine`` each: a run's records' prefixes are all
    replaced by its lines' head in one C call, the head made once per stamp and level."""

    def __init__(self, node: int, rank: int) -> None:
        self._heads = _Heads(f"Z node {node} rank {rank} ")

    def __call__(self, run: bytes, prefix: bytes) -> bytes:
        """``run``'s lines, each of whose records begins with ``prefix``: a record's
        text holds no newline, so ``\\n`` and the prefix only ever begin a record."""
        head = self._heads[prefix]
        return head + run[len(prefix) :].replace(b"\n" + prefix, b"\n" + head)


class _Heads(dict[bytes, bytes]):
    """``2026-11-29T08:30:13.250Z node 0 rank 1 WARNING `` by prefix of the records
    (``<stamp>\\t<kind><level>\\t``)."""

    def __init__(self, after_millis: str) -> None:
        super().__init__()
        self._after_millis = after_millis

    def __missing__(self, prefix: bytes) -> bytes:
        stamp, level = prefix[:-4], prefix[-2:-1]
        # The same arithmetic as format_line on LogLine.t (the stamp / 1000.0).
        seconds, millis = divmod(round(int(stamp) / 1000.0 * 1000), 1000)
        name = _LEVEL[NAMES[level.decode()]]
        head = self[prefix] = f"{_second(seconds)}.{millis:03d}{self._after_millis}{name} ".encode()
        return head


@lru_cache(maxsize=1024)
def _second(seconds: int) -> str:
    """One second's stamp, made once: lines come many to a second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
