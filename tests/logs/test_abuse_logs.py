"""Logs under bad input and abuse: searches that must not stall the server, records and
lines of any length, cursors and settings that must be refused rather than obeyed."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from traitlets import TraitError

from jupyter_air.jobs.follow import LogFollower
from jupyter_air.jobs.retention import prune, retention_days
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs.capture import LINE_LIMIT, RankLog, StreamSplitter, parse_record, plain_lines
from jupyter_air.logs.query import (
    CHUNK,
    RECORD_LIMIT,
    BadFilter,
    LogFilter,
    read_all,
    read_page,
    read_tail,
)
from jupyter_air.server.app import AirExtension
from tests.factories import job_spec

MiB = 1 << 20


def write(attempt: Path, rank: int, records: list[tuple[float, str, str]]) -> Path:
    path = attempt / "logs" / "node_0" / f"rank_{rank}.log"
    log = RankLog(path)
    for ts, kind, text in records:
        log.write(kind, text, ts=ts)
    log.close()
    return path


def texts(lines: Any) -> list[str]:
    return [line.text for line in lines]


def cursor_of(offsets: dict[str, int]) -> str:
    return base64.urlsafe_b64encode(json.dumps(offsets).encode()).decode()


# -- item 1: searches ----------------------------------------------------------------------


@pytest.fixture
def attempt(tmp_path: Path) -> Path:
    write(tmp_path, 0, [(1.0, "EE", "boom"), (2.0, "OI", "secret info"), (3.0, "OI", "tail")])
    return tmp_path


@pytest.mark.parametrize("search", [r"boom\n.*secret", r"(?s)boom.*secret", r"boom[^x]+secret"])
def test_a_regex_never_matches_across_records_and_so_past_the_level_filter(
    attempt: Path, search: str
) -> None:
    assert read_page(attempt, LogFilter(level="error", search=search, regex=True)).lines == []
    assert read_page(attempt, LogFilter(search=search, regex=True)).lines == []


def test_anchors_are_the_bounds_of_one_record_s_text(attempt: Path) -> None:
    assert texts(read_page(attempt, LogFilter(search="^boom$", regex=True)).lines) == ["boom"]
    assert texts(read_page(attempt, LogFilter(search=r"^SECRET", regex=True)).lines) == [
        "secret info"
    ]
    assert read_page(attempt, LogFilter(search="^info", regex=True)).lines == []


def test_a_regex_is_case_insensitive_and_linear(attempt: Path) -> None:
    write(attempt, 1, [(4.0, "OI", "a" * 5000 + "!")])
    assert texts(read_page(attempt, LogFilter(search=r"T\w+L", regex=True)).lines) == ["tail"]
    catastrophic = LogFilter(search="(a+)+b", regex=True)
    assert read_page(attempt, catastrophic).lines == []  # Python's re: 2**5000 steps


@pytest.mark.parametrize(
    ("search", "why"),
    [
        (r"(a)\1", r"invalid escape sequence: \\1"),  # a backreference
        (r"(?=a)", r"invalid perl operator: \(\?="),  # lookahead
        (r"(?<!a)b", r"invalid perl operator: \(\?<!"),  # lookbehind
        ("\\u0041", r"invalid escape sequence: \\u"),  # fine for Python's re on str only
        ("(", r"missing \)"),
    ],
)
def test_a_regex_re2_cannot_take_is_refused_saying_why(search: str, why: str) -> None:
    with pytest.raises(BadFilter, match=why) as err:
        LogFilter(search=search, regex=True)
    assert "no backreference and no lookaround" in str(err.value)


@pytest.mark.parametrize("regex", [False, True])
def test_a_search_that_is_not_utf8_text_is_refused(attempt: Path, regex: bool) -> None:
    with pytest.raises(BadFilter, match="UTF-8"):
        read_page(attempt, LogFilter(search="\udcff", regex=regex))  # as argv gives \xff


@pytest.mark.parametrize("offset", [2**63, 2**64 + 7, 10**30])
def test_a_cursor_with_a_huge_offset_is_refused(attempt: Path, offset: int) -> None:
    with pytest.raises(BadFilter, match="cursor"):
        read_page(attempt, LogFilter(), cursor=cursor_of({"node_0/rank_0": offset}))


def test_a_cursor_past_the_end_of_its_file_is_refused(attempt: Path) -> None:
    size = (attempt / "logs/node_0/rank_0.log").stat().st_size
    assert read_page(attempt, LogFilter(), cursor=cursor_of({"node_0/rank_0": size})).at_end
    with pytest.raises(BadFilter, match="cursor"):
        read_page(attempt, LogFilter(), cursor=cursor_of({"node_0/rank_0": size + 1}))


@pytest.fixture
def catastrophic_job(store: JobStore) -> str:
    """A finished job whose 8 rank logs each hold lines on which ``(a+)+b`` backtracks for
    more than a second in Python's ``re`` (and microseconds in RE2), among 2 MB of others."""
    job = store.create(job_spec("command", command=["true"], nproc_per_node=8))
    store.start_attempt(job.id, 1, None)
    attempt = store.attempt_dir(job.id, 1)
    ordinary = [(float(i), "OI", f"step {i} loss 0.5") for i in range(8000)]
    for rank in range(8):
        write(attempt, rank, [*ordinary, *[(9000.0, "OI", "a" * 21)] * 8])
    store.end_attempt(job.id, 1, "SUCCEEDED", [0] * 8)
    store.update(job.id, status="SUCCEEDED", ended=10_000.0)
    return job.id


async def test_the_server_answers_while_a_catastrophic_regex_runs(
    jp_fetch: Any, catastrophic_job: str
) -> None:
    params = {"search": "(a+)+b", "regex": "1"}
    search = asyncio.ensure_future(
        jp_fetch("jupyter-air", "jobs", catastrophic_job, "logs", params=params)
    )
    slowest = 0.0
    while not search.done():
        start = time.monotonic()
        assert (await jp_fetch("api", "status")).code == 200
        slowest = max(slowest, time.monotonic() - start)
    assert slowest < 1.0, f"GET api/status took {slowest:.1f} s while the search ran"
    assert json.loads((await search).body)["lines"] == []


async def get_error(jp_fetch: Any, job_id: str, **params: str) -> HTTPClientError:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-air", "jobs", job_id, "logs", params=params)
    return err.value


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"search": "(?=a)", "regex": "1"}, "invalid perl operator: (?="),
        ({"search": "\\u0041", "regex": "1"}, "invalid escape sequence: \\u"),
        ({"cursor": cursor_of({"node_0/rank_0": 2**64})}, "cursor"),
    ],
)
async def test_bad_searches_and_cursors_are_400s_that_say_why(
    jp_fetch: Any, catastrophic_job: str, params: dict[str, str], message: str
) -> None:
    err = await get_error(jp_fetch, catastrophic_job, **params)
    assert err.code == 400
    assert err.response is not None
    assert message in json.loads(err.response.body)["error"]["message"]


# -- item 3: records longer than the reader's window ----------------------------------------


@pytest.fixture
def long_record(tmp_path: Path) -> Path:
    """Rank 0 holds a line, a 3 MiB record, and a line; rank 1 a line at each end."""
    write(tmp_path, 0, [(1.0, "OI", "before"), (2.0, "OI", "x" * 3 * MiB), (3.0, "OI", "after")])
    write(tmp_path, 1, [(0.5, "OI", "r1 first"), (4.0, "OI", "r1 last")])
    return tmp_path


def test_a_record_longer_than_the_window_is_returned_and_later_lines_follow(
    long_record: Path,
) -> None:
    assert 3 * MiB > CHUNK
    expected = ["before", "x" * 3 * MiB, "after"]
    lines = list(read_all(long_record, LogFilter()))
    assert [line.text for line in lines if line.rank == 0] == expected
    assert [line.text for line in lines if line.rank == 1] == ["r1 first", "r1 last"]
    assert texts(read_tail(long_record, LogFilter(), 3).lines) == [*expected[1:], "r1 last"]
    assert texts(read_all(long_record, LogFilter(search="AFTER"))) == ["after"]
    assert texts(read_all(long_record, LogFilter(search="^x+$", regex=True))) == [expected[1]]
    pages, cursor = [], None
    for _ in range(10):
        page = read_page(long_record, LogFilter(rank=0), cursor, limit=1)
        pages.append(texts(page.lines))
        cursor = page.cursor
        if page.at_end and not page.lines:
            break
    assert [line for page in pages for line in page] == expected


def test_a_record_beyond_the_limit_is_cut_with_a_marker_and_later_lines_follow(
    tmp_path: Path,
) -> None:
    huge = "y" * (RECORD_LIMIT + 5 * MiB)
    write(tmp_path, 0, [(1.0, "OI", "before"), (2.0, "OI", huge), (3.0, "OI", "after")])
    before, cut, after = texts(read_all(tmp_path, LogFilter()))
    assert (before, after) == ("before", "after")
    shown, marker = cut.rsplit(" [", 1)
    assert huge.startswith(shown)
    assert RECORD_LIMIT - 100 < len(shown) <= RECORD_LIMIT
    assert marker == f"{len(huge) - len(shown)} more bytes of this line not shown]"
    assert texts(read_tail(tmp_path, LogFilter(), 1).lines) == ["after"]


def test_a_long_record_still_being_written_waits_for_its_end(tmp_path: Path) -> None:
    path = write(tmp_path, 0, [(1.0, "OI", "before")])
    with path.open("a") as f:
        f.write("2000\tOI\t" + "z" * 2 * MiB)
    assert texts(read_all(tmp_path, LogFilter())) == ["before"]
    with path.open("a") as f:
        f.write("z\n3000\tOI\tafter\n")
    assert texts(read_all(tmp_path, LogFilter())) == ["before", "z" * (2 * MiB + 1), "after"]


def test_air_logs_follow_ends_after_a_long_record(
    store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_air import cli

    job = store.create(job_spec("command", command=["true"]))
    store.start_attempt(job.id, 1, None)
    write(
        store.attempt_dir(job.id, 1),
        0,
        [(1.0, "OI", "before"), (2.0, "OI", "x" * 2 * MiB), (3.0, "OI", "after")],
    )
    store.end_attempt(job.id, 1, "SUCCEEDED", [0])
    store.update(job.id, status="SUCCEEDED", ended=4.0)
    assert cli.main(["logs", job.id, "--follow"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.rsplit(" ", 1)[-1][:8] for line in out] == ["before", "x" * 8, "after"]


def test_the_kernel_s_follower_takes_a_long_record_and_split_characters_whole(
    store: JobStore,
) -> None:
    job = store.create(job_spec("command", command=["true"]))
    path = store.attempt_dir(job.id, 1) / "logs" / "node_0" / "rank_0.log"
    path.parent.mkdir(parents=True)
    follower = LogFollower(store, job.id)
    record = f"1000\tOI\t{'é' * MiB}\n2000\tOI\tafter\n".encode()
    half = 3 * MiB // 2 + 1  # the middle of an é
    path.write_bytes(record[:half])
    first = follower.poll()
    with path.open("ab") as f:
        f.write(record[half:])
    got = first + follower.poll()
    assert [r.text for r in got] == ["é" * MiB, "after"]


# -- item 4: the splitter --------------------------------------------------------------------


def split_records(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parsed = parse_record(line)
        assert parsed is not None
        out.append((parsed[1], parsed[3]))
    return out


def reads(data: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    """``data`` as a pipe gives it, one read at a time."""
    for at in range(0, len(data), size):
        yield data[at : at + size]


def test_a_huge_line_without_newline_is_written_in_bounded_records_as_it_comes(
    tmp_path: Path,
) -> None:
    log = RankLog(tmp_path / "rank_0.log")
    splitter = StreamSplitter(log, "out")
    line = "".join(f"{i:08d}" for i in range(5 * MiB // 8)).encode()
    for data in reads(line):
        splitter.feed(data)
    written = (tmp_path / "rank_0.log").stat().st_size
    assert written >= len(line) - LINE_LIMIT - (1 << 16), "held back, not written"
    splitter.feed(b"\nnext\n")
    splitter.flush()
    log.close()
    records = split_records(tmp_path / "rank_0.log")
    assert records[-1] == ("O", "next")
    assert {kind for kind, _ in records[:-1]} == {"O"}
    assert all(len(text) <= LINE_LIMIT + (1 << 16) for _, text in records)
    assert "".join(text for _, text in records[:-1]).encode() == line, "no byte lost"


def test_a_huge_line_is_cut_between_characters(tmp_path: Path) -> None:
    log = RankLog(tmp_path / "rank_0.log")
    splitter = StreamSplitter(log, "err")
    line = ("é" * LINE_LIMIT).encode()
    for data in reads(line, 1 << 16 | 1):  # odd reads: they end inside characters
        splitter.feed(data)
    splitter.flush()
    log.close()
    records = split_records(tmp_path / "rank_0.log")
    assert len(records) > 1
    assert "".join(text for _, text in records) == "é" * LINE_LIMIT


def test_a_huge_progress_update_is_bounded_too(tmp_path: Path) -> None:
    log = RankLog(tmp_path / "rank_0.log")
    splitter = StreamSplitter(log, "out")
    for data in reads(b"\r" + b"p" * 3 * MiB):
        splitter.feed(data)
    assert (tmp_path / "rank_0.log").stat().st_size > MiB
    splitter.feed(b"\rdone\n")
    splitter.flush()
    log.close()
    assert split_records(tmp_path / "rank_0.log")[-1] == ("O", "done")


def test_plain_lines_streams_a_log(tmp_path: Path) -> None:
    log = RankLog(tmp_path / "r.log")
    for kind, text in [("O", "start"), ("o", "10%"), ("O", "100%"), ("o", "7/9")]:
        log.write(kind + "I", text)
    log.close()
    lines = plain_lines(tmp_path / "r.log")
    assert iter(lines) is lines, "an iterator, not a list read whole"
    assert list(lines) == ["start", "100%", "7/9"]


# -- item 14: retention ----------------------------------------------------------------------


def finished_job(store: JobStore) -> str:
    job = store.create(job_spec("command", command=["true"]))
    write(store.attempt_dir(job.id, 1), 0, [(1.0, "OI", "kept")])
    store.update(job.id, status="SUCCEEDED", ended=time.time() - 3600)
    return job.id


@pytest.mark.parametrize("days", [-1.0, -math.inf, math.nan])
def test_the_server_refuses_a_negative_retention(days: float) -> None:
    with pytest.raises(TraitError, match="log_retention_days"):
        AirExtension(log_retention_days=days)


@pytest.mark.parametrize("days", [-1.0, math.nan])
def test_pruning_refuses_a_negative_retention(store: JobStore, days: float) -> None:
    job_id = finished_job(store)
    with pytest.raises(ValueError, match="days"):
        prune(store, days)
    assert store.job_dir(job_id).exists()


@pytest.mark.parametrize("raw", ["-1", "-0.5", "nan", "-inf", "a week"])
def test_a_bad_retention_in_the_environment_keeps_every_log(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    job_id = finished_job(store)
    monkeypatch.setenv("AIR_LOG_RETENTION_DAYS", raw)
    assert prune(store, retention_days()) == []
    assert store.job_dir(job_id).exists()
