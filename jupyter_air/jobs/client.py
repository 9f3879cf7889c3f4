"""Following a job's output: for the kernel."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..logs.capture import parse_record
from ..logs.query import read_records
from .store import JobStore


@dataclass(frozen=True)
class Record:
    attempt: int
    node: int
    rank: int
    ts: float
    kind: str  # O / E: a line of stdout / stderr; o / e: a progress update
    level: str  # info, warning, error
    text: str


class LogFollower:
    """Reads the records rank log files gained since the last call, attempt by attempt."""

    def __init__(self, store: JobStore, job_id: str) -> None:
        self._job_dir = store.job_dir(job_id)
        self._offsets: dict[Path, int] = {}

    def poll(self) -> list[Record]:
        records: list[Record] = []
        for path, attempt, node, rank in self._files():
            records.extend(self._read(path, attempt, node, rank))
        records.sort(key=lambda r: (r.attempt, r.ts))
        return records

    def _files(self) -> Iterator[tuple[Path, int, int, int]]:
        for attempt_dir in sorted(self._job_dir.glob("attempt_*"), key=_number):
            for node_dir in sorted((attempt_dir / "logs").glob("node_*"), key=_number):
                for path in sorted(node_dir.glob("rank_*.log"), key=_number):
                    yield path, _number(attempt_dir), _number(node_dir), _number(path)

    def _read(self, path: Path, attempt: int, node: int, rank: int) -> list[Record]:
        """The records ended since the last call, read as the logs view reads them: a
        window at a time, a record of any length whole (or cut with a marker), one still
        being written left for the next call."""
        out = []
        offset = self._offsets.get(path, 0)
        while True:
            data, end, eof = read_records(path, offset)
            for line in data.decode("utf-8", errors="replace").split("\n")[:-1]:
                parsed = parse_record(line)
                if parsed is not None:
                    out.append(Record(attempt, node, rank, *parsed))
            done, offset = eof or end == offset, end
            if done:
                break
        self._offsets[path] = offset
        return out


def _number(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])
