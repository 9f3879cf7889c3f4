"""Turning a rank's raw stdout/stderr bytes into timestamped log records.

One record per line (``\\n``): ``<unix ms>\\t<kind><level>\\t<text>``, kind ``O``/``E`` for a
line of stdout/stderr and ``o``/``e`` for a progress update, level ``I``/``W``/``E``
(see ``levels``). Carriage-return updates (tqdm and friends) become progress records,
throttled, so a progress bar is a handful of records rather than thousands of lines.
Lines longer than a pipe buffer are joined before they are written; a line longer than
LINE_LIMIT is written as it comes, in records of about that size, so a rank printing
without newlines costs bounded memory and every byte still reaches the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from ..paths import private_opener
from .levels import INFO, NAMES, LevelDetector

#: Record kinds in a log file: a line of stdout / stderr, or a progress update of either.
LINE = {"out": "O", "err": "E"}
PROGRESS = {"out": "o", "err": "e"}
PROGRESS_EVERY = 0.25  # seconds between two progress records of one stream
#: Bytes of a line held back waiting for its end: beyond, they are written as a record
#: (records of a long line are LINE_LIMIT bytes, plus at most one read from the pipe).
LINE_LIMIT = 1 << 20


def parse_record(line: str) -> tuple[float, str, str, str] | None:
    """(unix seconds, kind, level name, text) of one log-file line; None if not a record."""
    parts = line.rstrip("\n").split("\t", 2)
    if len(parts) != 3 or not parts[0].isdigit() or len(parts[1]) != 2:
        return None
    return int(parts[0]) / 1000.0, parts[1][0], NAMES.get(parts[1][1], "info"), parts[2]


class RankLog:
    """The log file of one rank; both of its streams write here."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: TextIO = open(path, "a", encoding="utf-8", opener=private_opener)  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, kind: str, text: str, ts: float | None = None) -> None:
        self.write_many([(kind, text)], ts)

    def write_many(self, records: list[tuple[str, str]], ts: float | None = None) -> None:
        """Records that arrived together: one timestamp, one write, flushed at once (so
        followers see them and a crash of the supervisor loses nothing already read)."""
        if not records:
            return
        stamp = int((time.time() if ts is None else ts) * 1000)
        text = "".join(f"{stamp}\t{kind}\t{line}\n" for kind, line in records)
        with self._lock:
            self._file.write(text)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class StreamSplitter:
    """Feeds one stream's bytes and writes complete records to a RankLog."""

    def __init__(self, log: RankLog, stream: str) -> None:
        self._log = log
        self._line_kind = LINE[stream]
        self._progress_kind = PROGRESS[stream]
        self._pending = bytearray()  # the line not ended yet (after its last \r)
        self._last_progress = 0.0
        self._held_progress: str | None = None
        self._levels = LevelDetector()

    def feed(self, data: bytes) -> None:
        """One read of the pipe: its complete lines become records in one write. Each
        byte is copied a bounded number of times, however long its line."""
        complete = data.rfind(b"\n") + 1
        records: list[tuple[str, str]] = []
        if complete:
            self._held_progress = None
            text = _decode(bytes(self._pending) + data[:complete])
            self._pending.clear()
            kind, level = self._line_kind, self._levels.level
            for line in text.split("\n")[:-1]:
                if "\r" in line:  # what a terminal shows: the text after the last \r
                    line = line.rstrip("\r").rsplit("\r", 1)[-1]
                records.append((kind + level(line), line))
        rest = data[complete:]
        cr = rest.rfind(b"\r")
        if cr >= 0:
            self._pending += rest[:cr]
            shown = self._pending.rsplit(b"\r", 1)[-1]
            if shown:
                self._progress(_decode(shown), records)
            self._pending[:] = rest[cr + 1 :]
        else:
            self._pending += rest
        while len(self._pending) >= LINE_LIMIT:
            cut = char_boundary(self._pending, LINE_LIMIT)
            records.append(self._line(_decode(self._pending[:cut])))
            del self._pending[:cut]
        self._log.write_many(records)

    def _line(self, text: str) -> tuple[str, str]:
        return self._line_kind + self._levels.level(text), text

    def _progress(self, text: str, records: list[tuple[str, str]]) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY:
            self._last_progress = now
            self._held_progress = None
            records.append((self._progress_kind + INFO, text))
        else:
            self._held_progress = text

    def flush(self) -> None:
        """At end of stream: the last progress state and any unterminated line."""
        if self._pending:
            self._log.write(*self._line(_decode(self._pending)))
            self._pending.clear()
        elif self._held_progress is not None:
            self._log.write(self._progress_kind + INFO, self._held_progress)
        self._held_progress = None


def _decode(data: bytes | bytearray) -> str:
    return data.decode("utf-8", errors="replace")


def char_boundary(data: bytes | bytearray, limit: int) -> int:
    """The last cut at or before ``limit`` that splits no UTF-8 character of ``data``
    (``limit`` itself when the bytes there are not UTF-8)."""
    cut = min(limit, len(data))
    for at in range(cut, max(cut - 4, 0), -1):  # a character has 3 continuation bytes at most
        if at == len(data) or data[at] & 0xC0 != 0x80:
            return at
    return cut


def plain_lines(path: Path) -> Iterator[str]:
    """A rank log as a terminal would have shown it: lines, and a progress bar's last
    state; read as it is consumed, never whole."""
    progress: str | None = None
    with path.open(encoding="utf-8", errors="replace") as f:
        for raw in f:
            record = parse_record(raw)
            if record is None:
                continue
            _, kind, _, text = record
            if kind in PROGRESS.values():
                progress = text
            else:
                progress = None
                yield text
    if progress is not None:
        yield progress
