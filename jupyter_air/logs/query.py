"""Reading a job's logs back: filtered, time-ordered across ranks, in pages.

Every rank's log file is time-ordered, so an attempt's lines are a merge of its files.
Filters on level, node, rank and text are applied to the raw bytes with one compiled
regular expression per file read, so only matching lines are ever decoded. A cursor is
one byte offset per file: paging forward and following a running job are the same.
"""

from __future__ import annotations

import base64
import heapq
import json
import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .levels import AT_LEAST, NAMES

_STREAMS = {b"O": "out", b"E": "err"}
_LEVELS = {code.encode(): name for code, name in NAMES.items()}

#: Bytes read from one file in one call; a page never needs more than this of a file.
CHUNK = 1 << 20


class BadFilter(ValueError):
    """A filter or cursor that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class LogFilter:
    node: int | None = None
    rank: int | None = None
    level: str = "info"
    since: float | None = None
    until: float | None = None
    search: str | None = None
    regex: bool = False

    def __post_init__(self) -> None:
        if self.level not in AT_LEAST:
            raise BadFilter(f"level must be one of info, warning, error; got {self.level!r}")
        for name in ("node", "rank"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise BadFilter(f"{name} must be >= 0, got {value}")
        if self.regex and self.search:
            try:
                re.compile(self.search)
            except re.error as err:
                raise BadFilter(f"search is not a valid regular expression: {err}") from None

    def pattern(self) -> re.Pattern[bytes]:
        """One line record that passes the level and text filters (progress records never do)."""
        levels = AT_LEAST[self.level].encode()
        text = b".*"
        if self.search:
            needle = self.search.encode() if self.regex else re.escape(self.search.encode())
            text = b".*?(?i:" + needle + b").*"  # case-insensitive for the text only
        return re.compile(rb"^(\d+)\t([OE])([" + levels + rb"])\t(" + text + rb")$", re.MULTILINE)


@dataclass(slots=True)  # not frozen: built once per matching line, cheaply
class LogLine:
    t: float
    node: int
    rank: int
    stream: str
    level: str
    text: str

    def as_json(self) -> dict[str, object]:
        return {
            "t": self.t,
            "node": self.node,
            "rank": self.rank,
            "stream": self.stream,
            "level": self.level,
            "text": self.text,
        }


@dataclass(frozen=True)
class LogFile:
    node: int
    rank: int
    path: Path


def log_files(attempt_dir: Path, flt: LogFilter) -> list[LogFile]:
    """The rank logs of an attempt that the node and rank filters keep, in a fixed order."""
    found = []
    for path in (attempt_dir / "logs").glob("node_*/rank_*.log"):
        node, rank = _number(path.parent.name), _number(path.stem)
        if node is None or rank is None:
            continue
        if (flt.node is None or flt.node == node) and (flt.rank is None or flt.rank == rank):
            found.append(LogFile(node, rank, path))
    return sorted(found, key=lambda f: (f.node, f.rank))


#: (time, file index, end offset, line): tuples that merge in time, then file, order.
Match = tuple[float, int, int, LogLine]


@dataclass
class Page:
    lines: list[LogLine]
    cursor: str
    at_end: bool  # every file was read to its end


def read_page(
    attempt_dir: Path, flt: LogFilter, cursor: str | None = None, limit: int = 1000
) -> Page:
    """The first ``limit`` matching lines after ``cursor`` (from the start without one)."""
    files = log_files(attempt_dir, flt)
    offsets = _decode_cursor(cursor, files)
    pattern = flt.pattern()
    per_file: list[list[Match]] = []
    scanned: list[int] = []
    at_end = True
    for index, f in enumerate(files):
        start = offsets.get(str(f.path), 0)
        data, complete_to, eof = _read_lines(f.path, start)
        at_end = at_end and eof
        scanned.append(start + complete_to)
        per_file.append(list(_matches(pattern, data, start, index, f, flt)))
    taken: list[LogLine] = []
    consumed = [0] * len(files)
    last_end = [offsets.get(str(f.path), 0) for f in files]
    for _, index, end, line in heapq.merge(*per_file):  # (time, file) order: node, rank
        if len(taken) == limit:
            at_end = False
            break
        taken.append(line)
        consumed[index] += 1
        last_end[index] = end
    new_offsets = {
        # A file whose matches were all taken has nothing left before where it was read to.
        str(f.path): scanned[i] if consumed[i] == len(per_file[i]) else last_end[i]
        for i, f in enumerate(files)
    }
    return Page(taken, _encode_cursor(new_offsets), at_end)


def read_tail(attempt_dir: Path, flt: LogFilter, count: int) -> Page:
    """The last ``count`` matching lines, and a cursor at the end (to follow from)."""
    files = log_files(attempt_dir, flt)
    pattern = flt.pattern()
    per_file = []
    ends = {}
    for index, f in enumerate(files):
        last: deque[Match] = deque(maxlen=count)
        position = 0
        while True:
            data, complete_to, eof = _read_lines(f.path, position)
            last.extend(_matches(pattern, data, position, index, f, flt))
            position += complete_to
            if eof or not complete_to:
                break
        ends[str(f.path)] = position
        per_file.append(list(last))
    merged = list(heapq.merge(*per_file))
    return Page([line for *_, line in merged[-count:]], _encode_cursor(ends), True)


def read_all(attempt_dir: Path, flt: LogFilter) -> Iterator[LogLine]:
    """Every matching line, in pages (for downloads and the CLI)."""
    cursor = None
    while True:
        page = read_page(attempt_dir, flt, cursor, limit=10_000)
        yield from page.lines
        if page.at_end or (not page.lines and page.cursor == cursor):
            return  # the end, or only a record still being written (or cut by a crash)
        cursor = page.cursor


def _read_lines(path: Path, start: int) -> tuple[bytes, int, bool]:
    """Complete lines from ``start`` (at most CHUNK bytes): data, its length, whether EOF."""
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(CHUNK)
        eof = len(data) < CHUNK
    complete = data.rfind(b"\n") + 1
    return data[:complete], complete, eof and complete == len(data)


def _candidates(
    pattern: re.Pattern[bytes], data: bytes, flt: LogFilter
) -> Iterator[re.Match[bytes]]:
    """Matches of the record pattern; with a plain substring search, only lines holding
    the substring are tried (found with one ``bytes.find`` pass, as grep would)."""
    if not flt.search or flt.regex:
        yield from pattern.finditer(data)
        return
    lower, needle = data.lower(), flt.search.encode().lower()
    position = 0
    while (hit := lower.find(needle, position)) >= 0:
        start = data.rfind(b"\n", 0, hit) + 1
        end = data.find(b"\n", hit)  # data holds complete lines only
        m = pattern.match(data, start, end)
        if m is not None:
            yield m
        position = end + 1


def _matches(
    pattern: re.Pattern[bytes], data: bytes, base: int, index: int, f: LogFile, flt: LogFilter
) -> Iterator[Match]:
    since = -math.inf if flt.since is None else flt.since
    until = math.inf if flt.until is None else flt.until
    node, rank = f.node, f.rank
    for m in _candidates(pattern, data, flt):
        stamp, stream, level, text = m.groups()
        ts = int(stamp) / 1000.0
        if since <= ts <= until:
            line = LogLine(
                ts, node, rank, _STREAMS[stream], _LEVELS[level], text.decode("utf-8", "replace")
            )
            yield ts, index, base + m.end() + 1, line


def _number(name: str) -> int | None:
    _, _, digits = name.rpartition("_")
    return int(digits) if digits.isdigit() else None


def _encode_cursor(offsets: dict[str, int]) -> str:
    compact = {Path(k).parent.name + "/" + Path(k).stem: v for k, v in offsets.items()}
    return base64.urlsafe_b64encode(json.dumps(compact).encode()).decode()


def _decode_cursor(cursor: str | None, files: list[LogFile]) -> dict[str, int]:
    if not cursor:
        return {}
    try:
        compact = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(compact, dict) or not all(
            isinstance(v, int) and v >= 0 for v in compact.values()
        ):
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        raise BadFilter("cursor is not one this server gave") from None
    known = {f.path.parent.name + "/" + f.path.stem: str(f.path) for f in files}
    return {known[k]: v for k, v in compact.items() if k in known}
