"""Turning a rank's raw stdout/stderr bytes into timestamped log records.

One record per line (``\\n``): ``<unix ms>\\t<kind><level>\\t<text>``, kind ``O``/``E`` for a
line of stdout/stderr and ``o``/``e`` for a progress update, level ``I``/``W``/``E``
(see ``levels``). Carriage-return updates (tqdm and friends) become progress records,
throttled, so a progress bar is a handful of records rather than thousands of lines.
Lines longer than a pipe buffer are joined before they are written.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TextIO

from ..paths import private_opener
from .levels import INFO, NAMES, LevelDetector

#: Record kinds in a log file: a line of stdout / stderr, or a progress update of either.
LINE = {"out": "O", "err": "E"}
PROGRESS = {"out": "o", "err": "e"}
PROGRESS_EVERY = 0.25  # seconds between two progress records of one stream


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
        self._pending = b""
        self._last_progress = 0.0
        self._held_progress: str | None = None
        self._levels = LevelDetector()

    def feed(self, data: bytes) -> None:
        """One read of the pipe: its complete lines become records in one write."""
        buffer = self._pending + data
        complete = buffer.rfind(b"\n") + 1
        records: list[tuple[str, str]] = []
        if complete:
            self._held_progress = None
            text = _decode(buffer[:complete])
            for line in text.split("\n")[:-1]:
                if "\r" in line:  # what a terminal shows: the text after the last \r
                    line = line.rstrip("\r").rsplit("\r", 1)[-1]
                records.append((self._line_kind + self._levels.level(line), line))
        rest = buffer[complete:]
        cr = rest.rfind(b"\r")
        if cr >= 0:
            shown = rest[:cr].rsplit(b"\r", 1)[-1]
            if shown:
                self._progress(_decode(shown), records)
            rest = rest[cr + 1 :]
        self._pending = rest
        self._log.write_many(records)

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
            line = _decode(self._pending.rsplit(b"\r", 1)[-1])
            self._log.write(self._line_kind + self._levels.level(line), line)
            self._pending = b""
        elif self._held_progress is not None:
            self._log.write(self._progress_kind + INFO, self._held_progress)
        self._held_progress = None


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def plain_lines(path: Path) -> list[str]:
    """A rank log as a terminal would have shown it: lines, and a progress bar's last state."""
    out: list[str] = []
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
                out.append(text)
    if progress is not None:
        out.append(progress)
    return out
