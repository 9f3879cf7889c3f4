"""Reading a job's logs back: filtered, time-ordered across ranks, in pages.

Every rank's log file is time-ordered, so an attempt's lines are a merge of its files.
Filters on level, node, rank and text are applied to the raw bytes with one compiled
regular expression per file read, so only matching lines are ever decoded. A search
given as a regular expression runs on RE2 (linear time, and it lets go of the GIL), in
one record's text at a time. A cursor is one byte offset per file: paging forward and
following a running job are the same: a follower reads pages until one reaches the end
of every file, then waits.
"""

from __future__ import annotations

import base64
import bisect
import itertools
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

_STREAMS = {b"O": "out", b"E": "err", b"o": "out", b"e": "err"}
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
    #: Progress updates too (carriage-return redraws, which a cell shows in place).
    progress: bool = False

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
        """One record that passes the level filter and a plain-text search (a line, or a
        progress update if asked for); a regular expression is tried on the text apart."""
        levels = AT_LEAST[self.level].encode()
        kinds = b"OEoe" if self.progress else b"OE"
        text = b".*"
        if self.search and not self.regex:
            text = b".*?(?i:" + re.escape(self.search.encode()) + b").*"  # any case
        return re.compile(
            rb"^(\d+)\t([" + kinds + rb"])([" + levels + rb"])\t(" + text + rb")$", re.MULTILINE
        )


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


_STAMP = re.compile(rb"\d+")

#: Anchors mean the text's bounds only when the text is searched alone (see _regex_candidates).
_ANCHORS = re.compile(r"[\^$]|\\[Az]")


@dataclass(slots=True)  # not frozen: built once per matching line, cheaply
class LogLine:
    """A record of a rank's log: what every reader (the CLI, the server, a cell) gets."""

    t: float
    node: int
    rank: int
    stream: str  # out, err
    level: str  # info, warning, error
    text: str
    #: A progress update (only with ``LogFilter.progress``): the stream's line so far.
    progress: bool = False

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


@dataclass
class Page:
    lines: list[LogLine]
    cursor: str
    at_end: bool  # every file was read to its end


def read_page(
    attempt_dir: Path, flt: LogFilter, cursor: str | None = None, limit: int | None = 1000
) -> Page:
    """The first ``limit`` matching lines after ``cursor`` (from the start without one;
    ``limit=None``: all those read in this call), in time order across files.

    Each file gives at most one read (``read_records``). A file read short of its end
    may hold lines older than what others gave past its last one: the page stops there
    (the horizon), and the next page goes on from it, so pages are in time order.
    """
    files = log_files(attempt_dir, flt)
    offsets = _decode_cursor(cursor, files)
    pattern = flt.pattern()
    reads = [_FileRead(f, offsets.get(str(f.path), 0), pattern, flt) for f in files]
    at_end = all(r.eof for r in reads)
    horizon = min((r.last_stamp for r in reads if r.more), default=None)
    order: list[tuple[int, int, int]] = []
    for index, r in enumerate(reads):
        # Each file's times made non-decreasing (a clock stepping back), so that what a
        # page takes of a file is always a prefix of what was read.
        keys = list(itertools.accumulate(r.stamps, max))
        ready = len(keys) if horizon is None else bisect.bisect_right(keys, horizon)
        order.extend(zip(keys[:ready], itertools.repeat(index), range(ready)))
    if len(reads) > 1:
        order.sort()  # C-speed on the already sorted runs of each file: (time, file) order
    if limit is not None and len(order) > limit:
        del order[limit:]
    taken_per_file = [0] * len(reads)
    for _, index, position in order:
        taken_per_file[index] = position + 1
    per_file = [r.lines(taken_per_file[i]) for i, r in enumerate(reads)]
    lines = [per_file[index][position] for _, index, position in order]
    new_offsets = {
        str(r.file.path): r.offset_after(taken_per_file[index]) for index, r in enumerate(reads)
    }
    cut = any(taken_per_file[i] < len(r.stamps) for i, r in enumerate(reads))
    return Page(lines, _encode_cursor(new_offsets), at_end and not cut)


class _FileRead:
    """One read of one rank's log from ``start``: its matching records, parsed lazily."""

    def __init__(self, f: LogFile, start: int, pattern: re.Pattern[bytes], flt: LogFilter):
        self.file, self.start = f, start
        self._pattern, self._flt = pattern, flt
        self.data, self.end, self.eof = read_records(f.path, start)
        #: Complete records remain past this read (not just one being written).
        self.more = not self.eof and f.path.stat().st_size - start >= CHUNK
        found = (
            pattern.findall(self.data)
            if not flt.search
            else [m.groups() for m in _candidates(pattern, self.data, flt)]
        )
        if flt.since is not None or flt.until is not None:
            since = -math.inf if flt.since is None else flt.since
            until = math.inf if flt.until is None else flt.until
            self._kept: list[int] | None = [
                i for i, g in enumerate(found) if since <= int(g[0]) / 1000.0 <= until
            ]
            found = [found[i] for i in self._kept]
        else:
            self._kept = None
        self._records = found
        self.stamps = [int(g[0]) for g in found]

    @property
    def last_stamp(self) -> int:
        """The time of the last record read (of any kind, matching or not): what the
        file holds after this read is no older."""
        last = self.data.rfind(b"\n", 0, len(self.data) - 1) + 1
        stamp = _STAMP.match(self.data, last)
        return int(stamp.group()) if stamp else 0

    def lines(self, count: int, first: int = 0) -> list[LogLine]:
        """Records ``first`` to ``count`` (exclusive) as lines."""
        node, rank, streams, levels = self.file.node, self.file.rank, _STREAMS, _LEVELS
        return [
            LogLine(
                stamp / 1000.0,
                node,
                rank,
                streams[kind],
                levels[level],
                text.decode("utf-8", "replace"),
                kind in b"oe",
            )
            for stamp, (_, kind, level, text) in zip(
                self.stamps[first:count], self._records[first:count], strict=True
            )
        ]

    def offset_after(self, taken: int) -> int:
        """Where to read on once ``taken`` of the matching records were returned."""
        if taken == len(self.stamps):  # nothing left before where this read ended
            return self.end
        if taken == 0:
            return self.start
        nth = taken - 1 if self._kept is None else self._kept[taken - 1]
        match = next(itertools.islice(_candidates(self._pattern, self.data, self._flt), nth, None))
        return self.start + match.end() + 1


def read_tail(attempt_dir: Path, flt: LogFilter, count: int) -> Page:
    """The last ``count`` matching lines, and a cursor at the end (to follow from)."""
    files = log_files(attempt_dir, flt)
    pattern = flt.pattern()
    last: list[tuple[int, int, int, LogLine]] = []
    ends = {}
    for index, f in enumerate(files):
        kept: deque[tuple[int, int, int, LogLine]] = deque(maxlen=count)
        position = 0
        while True:
            read = _FileRead(f, position, pattern, flt)
            first = max(len(read.stamps) - count, 0)
            kept.extend(
                zip(
                    read.stamps[first:],
                    itertools.repeat(index),
                    itertools.count(first),
                    read.lines(len(read.stamps), first),
                )
            )
            done, position = read.eof or read.end == position, read.end
            if done:
                break
        ends[str(f.path)] = position
        last.extend(kept)
    merged = sorted(last) if len(files) > 1 else list(last)
    return Page([line for *_, line in merged[-count:]], _encode_cursor(ends), True)


def read_all(attempt_dir: Path, flt: LogFilter) -> Iterator[LogLine]:
    """Every matching line, a read of each file at a time (for downloads and the CLI)."""
    cursor = None
    while True:
        page = read_page(attempt_dir, flt, cursor, limit=None)
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
