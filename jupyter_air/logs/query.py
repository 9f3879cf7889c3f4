"""Reading a job's logs back: filtered, time-ordered across ranks, in pages.

Every rank's log file is time-ordered, so an attempt's lines are a merge of its files.
Filters on level, node, rank and text are applied to the raw bytes with one compiled
regular expression per file read, so only matching lines are ever decoded. A search
given as a regular expression runs on RE2 (linear time, and it lets go of the GIL), in
one record's text at a time. A cursor is one byte offset per file: paging forward and
following a running job are the same: a follower reads pages until one reaches the end
of every file, then waits. A terminal's pages (``read_text_page``) are the same pages
as text, made from runs of records (a rank's bursts of lines of one time) rather than
from a ``LogLine`` per line.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import math
import operator
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Generic, Literal, TypeVar

import re2  # type: ignore[import-untyped]

from ..job_dir import AttemptDir
from .capture import char_boundary
from .levels import AT_LEAST, NAMES, LevelName
from .text import RunText, format_line

_T = TypeVar("_T")
_STAMP_OF = operator.itemgetter(0)

#: The stream a line was printed on.
Stream = Literal["out", "err"]

_STREAMS: dict[bytes, Stream] = {b"O": "out", b"E": "err", b"o": "out", b"e": "err"}
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
        kinds, levels = self._codes()
        text = b".*"
        if self.search and not self.regex:
            text = b".*?(?i:" + re.escape(self.search.encode()) + b").*"  # any case
        return re.compile(
            rb"^(\d+)\t([" + kinds + rb"])([" + levels + rb"])\t(" + text + rb")$", re.MULTILINE
        )

    def run_pattern(self) -> re.Pattern[bytes]:
        """Consecutive records that pass the level filter (a search is not applied) and
        share one stamp, kind and level: groups (1) their prefix ``<stamp>\\t<kind><level>\\t``
        and (2) the stamp."""
        kinds, levels = self._codes()
        first = rb"((\d+)\t[" + kinds + rb"][" + levels + rb"]\t)"
        return re.compile(rb"^" + first + rb"[^\n]*\n(?:\1[^\n]*\n)*", re.MULTILINE)

    def _codes(self) -> tuple[bytes, bytes]:
        """The record kinds and the level codes that pass."""
        return (b"OEoe" if self.progress else b"OE"), AT_LEAST[self.level].encode()

    def keeps_time(self, stamp: bytes) -> bool:
        """A record's stamp (ms) is within ``since`` and ``until``."""
        since = -math.inf if self.since is None else self.since
        until = math.inf if self.until is None else self.until
        return since <= int(stamp) / 1000.0 <= until


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
    stream: Stream
    level: LevelName
    text: str
    #: A progress update (only with ``LogFilter.progress``): the stream's line so far.
    progress: bool = False


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

    @property
    def count(self) -> int:
        return len(self.lines)


@dataclass
class TextPage:
    """A page as a terminal shows it: ``text.format_line`` of each of its lines."""

    text: str
    count: int  # lines in ``text``
    cursor: str
    at_end: bool


#: A page of either kind: lines (``read_page``) or their text (``read_text_page``).
AnyPage = TypeVar("AnyPage", Page, TextPage)


def read_page(
    attempt_dir: Path, flt: LogFilter, cursor: str | None = None, limit: int | None = 1000
) -> Page:
    """The first ``limit`` matching lines after ``cursor`` (from the start without one;
    ``limit=None``: all those read in this call), in time order across files.

    Each file gives at most one read (``read_records``). A file read short of its end
    may hold lines older than what others gave past its last one: the page stops there
    (the horizon), and the next page goes on from it, so pages are in time order.
    """
    pattern = flt.pattern()
    merged = _Merged(attempt_dir, flt, cursor, limit, lambda f, at: _FileRead(f, at, pattern, flt))
    return Page(merged.in_order(_FileRead.lines), merged.cursor, merged.at_end)


def read_text_page(
    attempt_dir: Path, flt: LogFilter, cursor: str | None = None, limit: int | None = None
) -> TextPage:
    """``read_page``'s lines as text, the same page (same lines, order and cursor),
    each line as ``text.format_line`` makes it.

    Without a search or a limit, made without a ``LogLine`` per line: a rank writes
    its lines in bursts of one stamp (``capture``), so a page is read as runs of
    records of one stamp, kind and level, each run formatted as a whole in C (its
    records' prefixes replaced by their head), and decoded once.
    """
    if flt.search or limit is not None:  # a page of records, not runs
        page = read_page(attempt_dir, flt, cursor, limit)
        return TextPage("".join(map(format_line, page.lines)), page.count, page.cursor, page.at_end)
    pattern = flt.run_pattern()
    merged = _Merged(attempt_dir, flt, cursor, None, lambda f, at: _RunRead(f, at, pattern, flt))
    runs: list[bytes] = merged.in_order(_RunRead.texts)
    data = b"".join(runs)
    # Decoded once, not line by line: invalid UTF-8 is replaced the same way, since
    # every line ends with an ASCII newline, where a decoder always starts afresh.
    text = data.decode("utf-8", "replace")
    return TextPage(text, data.count(b"\n"), merged.cursor, merged.at_end)


class _Read(ABC):
    """One read of one rank's log from ``start``: what a page needs of any kind of read."""

    def __init__(self, f: LogFile, start: int) -> None:
        self.file, self.start = f, start
        self.data, self.end, self.eof = read_records(f.path, start)
        #: Complete records remain past this read (not just one being written).
        self.more = not self.eof and f.path.stat().st_size - start >= CHUNK
        #: The time of each item read, in the file's order.
        self.stamps: list[int] = []

    @property
    def last_stamp(self) -> int:
        """The time of the last record read (of any kind, matching or not): what the
        file holds after this read is no older."""
        last = self.data.rfind(b"\n", 0, len(self.data) - 1) + 1
        stamp = _STAMP.match(self.data, last)
        return int(stamp.group()) if stamp else 0

    @abstractmethod
    def offset_after(self, taken: int) -> int:
        """Where to read on once ``taken`` of the items were returned."""


_R = TypeVar("_R", bound=_Read)


class _FileRead(_Read):
    """A read's matching records, parsed lazily."""

    def __init__(self, f: LogFile, start: int, pattern: re.Pattern[bytes], flt: LogFilter):
        super().__init__(f, start)
        self._pattern, self._flt = pattern, flt
        found = (
            pattern.findall(self.data)
            if not flt.search
            else [m.groups() for m in _candidates(pattern, self.data, flt)]
        )
        #: Every line read is a match (the common case): the nth match is the nth line.
        self._every_line = len(found) == self.data.count(b"\n")
        if flt.since is not None or flt.until is not None:
            self._kept: list[int] | None = [i for i, g in enumerate(found) if flt.keeps_time(g[0])]
            found = [found[i] for i in self._kept]
        else:
            self._kept = None
        self._records = found
        self.stamps = list(map(int, map(_STAMP_OF, found)))

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
        if taken == len(self.stamps):  # nothing left before where this read ended
            return self.end
        if taken == 0:
            return self.start
        nth = taken - 1 if self._kept is None else self._kept[taken - 1]
        if self._every_line:  # after the (nth + 1)th newline, found in C
            return self.start + len(self.data) - len(self.data.split(b"\n", nth + 1)[-1])
        match = next(itertools.islice(_candidates(self._pattern, self.data, self._flt), nth, None))
        return self.start + match.end() + 1


class _RunRead(_Read):
    """A read's matching records as runs of one stamp, kind and level (``run_pattern``);
    the time filter applies to a run as a whole, since its records share one time."""

    def __init__(self, f: LogFile, start: int, pattern: re.Pattern[bytes], flt: LogFilter):
        super().__init__(f, start)
        runs: Iterator[re.Match[bytes]] = pattern.finditer(self.data)
        if flt.since is not None or flt.until is not None:
            runs = (run for run in runs if flt.keeps_time(run.group(2)))
        self._runs = list(runs)
        self.stamps = [int(run.group(2)) for run in self._runs]

    def texts(self, count: int) -> list[bytes]:
        """The first ``count`` runs as ``format_line`` makes their lines, encoded."""
        text = RunText(self.file.node, self.file.rank)
        return [text(*run.group(0, 1)) for run in self._runs[:count]]

    def offset_after(self, taken: int) -> int:
        if taken == len(self.stamps):
            return self.end
        return self.start + (self._runs[taken - 1].end() if taken else 0)


class _Merged(Generic[_R]):
    """One read of every file, merged in time order: which items (records, or runs of
    records of one time) a page takes of each file, in what order, and the cursor after
    them."""

    def __init__(
        self,
        attempt_dir: Path,
        flt: LogFilter,
        cursor: str | None,
        limit: int | None,
        read: Callable[[LogFile, int], _R],
    ) -> None:
        files = log_files(attempt_dir, flt)
        offsets = _decode_cursor(cursor, files)
        self.reads = [read(f, offsets.get(str(f.path), 0)) for f in files]
        # Each file's times made non-decreasing (a clock stepping back), so that what a
        # page takes of a file is always a prefix of what was read.
        keys = [_non_decreasing(r.stamps) for r in self.reads]
        # The horizon: no file read short of its end holds older records past its read,
        # unless its clock stepped back. Then it is the greatest time the file gave, so
        # that this file's records at least are all taken and the page moves on.
        horizon = min(
            (
                max(r.last_stamp, k[-1] if k else 0)
                for r, k in zip(self.reads, keys, strict=True)
                if r.more
            ),
            default=None,
        )
        ready = [len(k) if horizon is None else bisect.bisect_right(k, horizon) for k in keys]
        self._order = _time_order([k[:n] for k, n in zip(keys, ready, strict=True)])
        self.taken = ready
        if limit is not None and len(self._order) > limit:
            del self._order[limit:]
            self._order, self.taken = _first_of(self._order, ready)
        new_offsets = {
            str(r.file.path): r.offset_after(taken)
            for r, taken in zip(self.reads, self.taken, strict=True)
        }
        self.cursor = _encode_cursor(new_offsets)
        cut = any(taken < len(r.stamps) for r, taken in zip(self.reads, self.taken, strict=True))
        self.at_end = all(r.eof for r in self.reads) and not cut

    def in_order(self, make: Callable[[_R, int], list[_T]]) -> list[_T]:
        """What ``make`` makes of the items taken of each file, one per item, in time
        order."""
        per_file = [make(r, taken) for r, taken in zip(self.reads, self.taken, strict=True)]
        if len(per_file) == 1:
            return per_file[0]
        laid = list(itertools.chain.from_iterable(per_file))
        return list(map(laid.__getitem__, self._order))


def _non_decreasing(stamps: list[int]) -> list[int]:
    """The stamps, each raised to the greatest before it where a clock stepped back."""
    if all(map(operator.le, stamps, itertools.islice(stamps, 1, None))):  # as usual
        return stamps
    return list(itertools.accumulate(stamps, max))


def _time_order(keys: list[list[int]]) -> list[int]:
    """The order of the files' items laid end to end by (time, file, position): each
    file's keys are sorted, so a stable sort by time alone keeps files and positions in
    order where times are equal. All of it runs in C, whatever the interleaving."""
    if len(keys) == 1:
        return list(range(len(keys[0])))
    laid = list(itertools.chain.from_iterable(keys))
    return sorted(range(len(laid)), key=laid.__getitem__)


def _first_of(order: list[int], counts: list[int]) -> tuple[list[int], list[int]]:
    """An order cut short (a page's limit) made an order of the records it still holds,
    laid end to end, and how many it holds of each file: always a prefix of the file's
    records, since the order is by time, then file, then position."""
    starts = [0, *itertools.accumulate(counts)]
    located, taken = [], [0] * len(counts)
    for i in order:
        f = bisect.bisect_right(starts, i) - 1
        located.append((f, i - starts[f]))
        taken[f] += 1
    kept_starts = [0, *itertools.accumulate(taken)]
    return [kept_starts[f] + position for f, position in located], taken


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
    for page in _every_page(read_page, attempt_dir, flt):
        yield from page.lines


def read_all_text(attempt_dir: Path, flt: LogFilter) -> Iterator[TextPage]:
    """``read_all``'s lines as text, a page (a read of each file) at a time."""
    return _every_page(read_text_page, attempt_dir, flt)


def _every_page(
    read: Callable[[Path, LogFilter, str | None, int | None], AnyPage],
    attempt_dir: Path,
    flt: LogFilter,
) -> Iterator[AnyPage]:
    cursor = None
    while True:
        page = read(attempt_dir, flt, cursor, None)
        yield page
        if page.at_end or (not page.count and page.cursor == cursor):
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
