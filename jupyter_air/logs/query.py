"""Reading a job's logs back: filtered, time-ordered across ranks, in pages.

Every rank's log file is time-ordered, so an attempt's lines are a merge of its files.
Filters on level, node, rank and text are applied to the raw bytes with one compiled
regular expression per file read, so only matching lines are ever decoded. A search
given as a regular expression runs on RE2 (linear time, and it lets go of the GIL), in
one record's text at a time. A cursor is one byte offset per file: paging forward and
following a running job are the same.
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
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import re2  # type: ignore[import-untyped]

from ..job_dir import AttemptDir
from .capture import char_boundary
from .levels import AT_LEAST, NAMES

_STREAMS = {b"O": "out", b"E": "err"}
_LEVELS = {code.encode(): name for code, name in NAMES.items()}

#: Bytes read from one file in one call; a page needs more only for one longer record.
CHUNK = 1 << 20
#: A record longer than this is returned cut, with a marker saying how much is left out
#: (capture writes none: it splits lines at ``capture.LINE_LIMIT``).
RECORD_LIMIT = 4 * CHUNK


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
        if self.search is not None:
            try:
                self.search.encode()
            except UnicodeEncodeError:
                raise BadFilter("search must be valid UTF-8 text") from None
        if self.regex and self.search:
            _regex(self.search)  # refused here, before any file is read

    def pattern(self) -> re.Pattern[bytes]:
        """One line record that passes the level filter and a plain-text search (progress
        records never do); a regular expression is tried on the record's text apart."""
        levels = AT_LEAST[self.level].encode()
        text = b".*"
        if self.search and not self.regex:
            text = b".*?(?i:" + re.escape(self.search.encode()) + b").*"  # any case
        return re.compile(rb"^(\d+)\t([OE])([" + levels + rb"])\t(" + text + rb")$", re.MULTILINE)


@lru_cache(maxsize=64)
def _regex(search: str) -> Any:
    """The search as an RE2 pattern, any case, that never matches a newline (so never
    across records); RE2 refuses what would take more than linear time."""
    options = re2.Options()
    options.case_sensitive = False
    options.never_nl = True
    options.never_capture = True
    options.log_errors = False
    try:
        return re2.compile(search.encode(), options)
    except re2.error as err:
        reason = err.args[0].decode(errors="replace") if err.args else "invalid"
        raise BadFilter(
            "search is not a valid regular expression for RE2 (which has no backreference "
            f"and no lookaround: it runs in linear time): {reason}"
        ) from None


#: Anchors mean the text's bounds only when the text is searched alone (see _regex_candidates).
_ANCHORS = re.compile(r"[\^$]|\\[Az]")


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
    return [
        LogFile(f.node, f.rank, f.path)
        for f in AttemptDir(attempt_dir).rank_logs()
        if (flt.node is None or flt.node == f.node) and (flt.rank is None or flt.rank == f.rank)
    ]


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
        data, end, eof = read_records(f.path, offsets.get(str(f.path), 0))
        at_end = at_end and eof
        scanned.append(end)
        per_file.append(list(_matches(pattern, data, end, index, f, flt)))
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
            data, end, eof = read_records(f.path, position)
            last.extend(_matches(pattern, data, end, index, f, flt))
            done, position = eof or end == position, end
            if done:
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


def read_records(path: Path, start: int) -> tuple[bytes, int, bool]:
    """Complete records from ``start``: (data, the file offset where they end, whether
    that is the file's end). At most CHUNK bytes, or one longer record alone (see
    ``_long_record``). A record not ended yet (being written, or cut by a crash) waits."""
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(CHUNK)
        complete = data.rfind(b"\n") + 1
        if complete or len(data) < CHUNK:
            eof = complete == len(data) and len(data) < CHUNK
            return data[:complete], start + complete, eof
        return _long_record(f, start, data)


def _long_record(f: BinaryIO, start: int, head: bytes) -> tuple[bytes, int, bool]:
    """The record at ``start``, longer than CHUNK: whole up to RECORD_LIMIT bytes, cut
    beyond with a marker. The rest is read in CHUNK steps to find its end, so memory
    stays bounded whatever a file holds; the data returned then stands for more bytes
    of the file than its length (it ends where the record does)."""
    kept = bytearray(head)
    length = len(head)
    while True:
        more = f.read(CHUNK)
        newline = more.find(b"\n")
        piece = more if newline < 0 else more[:newline]
        kept += piece[: max(RECORD_LIMIT + 4 - len(kept), 0)]  # 4: to cut between characters
        length += len(piece)
        if newline >= 0:
            break
        if len(more) < CHUNK:
            return b"", start, False
    if length > RECORD_LIMIT:
        del kept[char_boundary(kept, RECORD_LIMIT) :]
        kept += f" [{length - len(kept)} more bytes of this line not shown]".encode()
    eof = newline + 1 == len(more) < CHUNK
    return bytes(kept) + b"\n", start + length + 1, eof


def _candidates(
    pattern: re.Pattern[bytes], data: bytes, flt: LogFilter
) -> Iterator[re.Match[bytes]]:
    """Matches of the record pattern that pass the text search. With a plain substring,
    only lines holding it are tried (found with one ``bytes.find`` pass, as grep would)."""
    if not flt.search:
        yield from pattern.finditer(data)
        return
    if flt.regex:
        yield from _regex_candidates(pattern, data, flt.search)
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


def _regex_candidates(
    pattern: re.Pattern[bytes], data: bytes, search: str
) -> Iterator[re.Match[bytes]]:
    """Records whose text alone holds a match of the regular expression. With an anchor,
    every record of the level is tried. Without, one RE2 pass over the whole read finds
    the only lines that can match (RE2 never crosses a newline here, and the tab before a
    text is a word boundary as its start is), and a match that begins in the record's
    prefix is looked for again in the text."""
    regex = _regex(search)
    if _ANCHORS.search(search):  # ^ $ \A \z: the text's bounds, so the text searched alone
        for record in pattern.finditer(data):
            if regex.search(record.group(4)) is not None:
                yield record
        return
    position = 0
    while (hit := regex.search(data, position)) is not None:
        if (at := hit.start()) == len(data):
            return  # an empty match after the last line
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)  # data holds complete lines only
        m = pattern.match(data, start, end)
        if m is not None and (at >= m.start(4) or regex.search(data, m.start(4), end)):
            yield m
        position = end + 1


def _matches(
    pattern: re.Pattern[bytes], data: bytes, end: int, index: int, f: LogFile, flt: LogFilter
) -> Iterator[Match]:
    """The lines of ``data``, which ends at file offset ``end``, that pass the filter."""
    since = -math.inf if flt.since is None else flt.since
    until = math.inf if flt.until is None else flt.until
    node, rank, base = f.node, f.rank, end - len(data)
    for m in _candidates(pattern, data, flt):
        stamp, stream, level, text = m.groups()
        ts = int(stamp) / 1000.0
        if since <= ts <= until:
            line = LogLine(
                ts, node, rank, _STREAMS[stream], _LEVELS[level], text.decode("utf-8", "replace")
            )
            yield ts, index, base + m.end() + 1, line


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
    known = {f.path.parent.name + "/" + f.path.stem: f.path for f in files}
    offsets = {str(known[k]): v for k, v in compact.items() if k in known}
    for path, offset in offsets.items():
        if offset > Path(path).stat().st_size:  # log files only grow
            raise BadFilter("cursor is not one this server gave: it points past its file")
    return offsets
