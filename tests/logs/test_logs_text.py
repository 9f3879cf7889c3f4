"""The terminal's text of a job's logs, made from the records without a ``LogLine`` per
line (``read_text_page``, ``LogFollower.poll_text``): byte for byte what ``format_line``
makes of ``read_page``'s lines, page by page, with the same cursors, whatever the
records, the filters and where reads end."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jupyter_air.jobs.follow import LogFollower
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs import query
from jupyter_air.logs.query import LogFilter, read_all, read_all_text, read_page, read_text_page
from jupyter_air.logs.text import format_line
from tests.factories import job_spec

#: Texts as ranks print them: plain, non-ASCII, tabs, and bytes that are not UTF-8
#: (cut sequences, a lone continuation byte, a surrogate, 0xff), alone and mid-text.
TEXTS = [
    b"step 1 loss 0.25",
    b"",
    "épsilon · 進捗 🚀".encode(),
    b"a\ttab\tseparated",
    b"cut \xe2\x82",
    b"\x80 starts with a continuation byte",
    b"surrogate \xed\xa0\x80 here",
    b"\xff\xfe bad start",
    b"ends in a cut emoji \xf0\x9f\x9a",
    b"WARNING: disk almost full",
    b"Traceback (most recent call last):",
]
KINDS = [b"OI", b"OI", b"OI", b"EI", b"OW", b"EW", b"EE", b"oI", b"eI"]


def write_rank(
    attempt: Path, node: int, rank: int, seed: int, records: int = 600, *, ended: bool = False
) -> None:
    """Records in bursts of one stamp, seconds crossed mid-burst, a clock stepping back
    once, a line that is no record, and (unless ``ended``) a record still being written
    at the end."""
    chance = random.Random(seed)
    stamp = 1_764_655_199_990 + rank
    out, kind = bytearray(), KINDS[0]
    for i in range(records):
        if chance.random() < 0.2:
            stamp += chance.choice([1, 3, 7, 999, 1000])
        if i == records // 2:
            stamp -= 5000  # the supervisor's clock set back
        if i == records // 3:
            out += b"not a record\n"
        text = chance.choice(TEXTS) + f" #{i}".encode() * chance.randrange(0, 2)
        if chance.random() < 0.3:  # bursts of one kind and level, as ranks write them
            kind = chance.choice(KINDS)
        out += b"%d\t%s\t%s\n" % (stamp, kind, text)
    if not ended:
        out += b"%d\tOI\tstill being wri" % stamp
    path = attempt / "logs" / f"node_{node}" / f"rank_{rank}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))


@pytest.fixture
def attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two nodes of two ranks, read 2 KiB at a time: reads end mid-record everywhere."""
    monkeypatch.setattr(query, "CHUNK", 2048)
    for seed, (node, rank) in enumerate([(0, 0), (0, 1), (1, 2), (1, 3)]):
        write_rank(tmp_path, node, rank, seed)
    return tmp_path


FILTERS = {
    "default": LogFilter(),
    "progress": LogFilter(progress=True),
    "warning": LogFilter(level="warning"),
    "error": LogFilter(level="error"),
    "node": LogFilter(node=1),
    "rank": LogFilter(rank=0),
    "search": LogFilter(search="LOSS"),
    "search non-ASCII": LogFilter(search="進捗"),
    "regex": LogFilter(search=r"step \d", regex=True),
    "anchored regex": LogFilter(search=r"^a\t", regex=True),
    "since and until": LogFilter(since=1_764_655_201.0, until=1_764_655_260.5),
    "everything at once": LogFilter(node=0, level="warning", search="#1", progress=True),
}


@pytest.mark.parametrize("limit", [None, 3, 250])
@pytest.mark.parametrize("flt", FILTERS.values(), ids=FILTERS.keys())
def test_text_pages_are_format_line_of_read_page_byte_for_byte(
    attempt: Path, flt: LogFilter, limit: int | None
) -> None:
    cursor, pages, lines = None, 0, 0
    while True:
        page = read_page(attempt, flt, cursor, limit)
        text = read_text_page(attempt, flt, cursor, limit)
        assert text.text.encode() == "".join(map(format_line, page.lines)).encode()
        assert (text.count, text.cursor, text.at_end) == (len(page.lines), page.cursor, page.at_end)
        pages, lines = pages + 1, lines + text.count
        if page.at_end or page.cursor == cursor:
            break
        cursor = page.cursor
    assert pages > 2, "reads ended mid-file: pages cut at horizons and limits"
    assert lines > 0


def test_text_of_a_record_cut_by_a_read_boundary_comes_once_it_is_whole(attempt: Path) -> None:
    flt, cursor = LogFilter(rank=0), None
    while (page := read_text_page(attempt, flt, cursor)).cursor != cursor:
        cursor = page.cursor
    assert (page.text, page.count, page.at_end) == ("", 0, False)
    with (attempt / "logs" / "node_0" / "rank_0.log").open("ab") as f:
        f.write(b"tten\n")
    end = read_text_page(attempt, flt, cursor)
    assert end.text.endswith(" node 0 rank 0 INFO still being written\n")
    assert (end.count, end.at_end) == (1, True)


def test_the_follower_gives_the_same_text_as_its_lines(tmp_path: Path, store: JobStore) -> None:
    job = store.create(job_spec("command", command=["true"], max_retries=1))
    store.update(job.id, status="RUNNING")
    for number in (1, 2):
        for rank in (0, 1):
            attempt = store.attempt_dir(job.id, number)
            write_rank(attempt, 0, rank, seed=10 * number + rank, ended=True)
        store.start_attempt(job.id, number, None)
    store.update(job.id, status="FAILED")
    flt = LogFilter(progress=True)
    as_lines = [
        (attempt, "".join(map(format_line, lines)))
        for attempt, lines in LogFollower(store, job.id, flt).follow(interval=0.01)
    ]
    as_text = list(LogFollower(store, job.id, flt).follow_text(interval=0.01))
    assert as_text == as_lines
    assert [attempt for attempt, _ in as_text] == [1, 2]


def test_records_longer_than_a_read_come_the_same_whole_or_cut(tmp_path: Path) -> None:
    def record(ms: int, text: str) -> bytes:
        return f"{ms}\tOI\t{text}\n".encode()

    logs = tmp_path / "logs" / "node_0"
    logs.mkdir(parents=True)
    (logs / "rank_0.log").write_bytes(
        record(1000, "before")
        + record(2000, "é" * (query.CHUNK // 2 + 5))  # longer than a read: whole
        + record(3000, "y" * (query.RECORD_LIMIT + 1000))  # longer than a record: cut
        + record(3000, "same stamp")
        + record(4000, "after")
    )
    (logs / "rank_1.log").write_bytes(record(2500, "other") + record(3000, "x" * query.CHUNK))
    for flt in (LogFilter(), LogFilter(rank=0), LogFilter(since=2.5)):
        as_lines = "".join(map(format_line, read_all(tmp_path, flt)))
        assert "".join(page.text for page in read_all_text(tmp_path, flt)) == as_lines
    assert " more bytes of this line not shown]\n" in as_lines
