"""Reading logs back: merged across ranks in time order, filtered, paged, followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.logs.capture import RankLog
from jupyter_air.logs.query import BadFilter, LogFilter, read_all, read_page, read_tail


def write(attempt: Path, node: int, rank: int, records: list[tuple[float, str, str]]) -> None:
    log = RankLog(attempt / "logs" / f"node_{node}" / f"rank_{rank}.log")
    for ts, kind, text in records:
        log.write(kind, text, ts=ts)
    log.close()


@pytest.fixture
def attempt(tmp_path: Path) -> Path:
    write(tmp_path, 0, 0, [(1.0, "OI", "r0 start"), (3.0, "EW", "r0 WARNING slow"),
                           (4.0, "oI", "50%"), (5.0, "OI", "r0 done")])  # fmt: skip
    write(tmp_path, 0, 1, [(2.0, "OI", "r1 start"), (3.5, "EE", "r1 Traceback"),
                           (6.0, "OI", "r1 Done")])  # fmt: skip
    return tmp_path


def texts(lines: list) -> list[str]:  # type: ignore[type-arg]
    return [line.text for line in lines]


def test_lines_of_all_ranks_in_time_order_without_progress_records(attempt: Path) -> None:
    page = read_page(attempt, LogFilter())
    assert texts(page.lines) == [
        "r0 start", "r1 start", "r0 WARNING slow", "r1 Traceback", "r0 done", "r1 Done",
    ]  # fmt: skip
    assert page.at_end
    assert (page.lines[2].level, page.lines[2].stream, page.lines[2].rank) == ("warning", "err", 0)


def test_filters_by_rank_level_time_and_text(attempt: Path) -> None:
    assert texts(read_page(attempt, LogFilter(rank=1)).lines) == [
        "r1 start", "r1 Traceback", "r1 Done",
    ]  # fmt: skip
    assert texts(read_page(attempt, LogFilter(level="warning")).lines) == [
        "r0 WARNING slow", "r1 Traceback",
    ]  # fmt: skip
    assert texts(read_page(attempt, LogFilter(level="error")).lines) == ["r1 Traceback"]
    assert texts(read_page(attempt, LogFilter(since=3.0, until=5.0)).lines) == [
        "r0 WARNING slow", "r1 Traceback", "r0 done",
    ]  # fmt: skip
    assert texts(read_page(attempt, LogFilter(search="DONE")).lines) == ["r0 done", "r1 Done"]
    assert texts(read_page(attempt, LogFilter(search=r"r\d start", regex=True)).lines) == [
        "r0 start", "r1 start",
    ]  # fmt: skip


def test_pages_continue_where_the_last_one_stopped(attempt: Path) -> None:
    first = read_page(attempt, LogFilter(), limit=4)
    assert texts(first.lines) == ["r0 start", "r1 start", "r0 WARNING slow", "r1 Traceback"]
    assert not first.at_end
    second = read_page(attempt, LogFilter(), cursor=first.cursor, limit=4)
    assert texts(second.lines) == ["r0 done", "r1 Done"]
    assert second.at_end


def test_following_returns_only_lines_written_since(attempt: Path) -> None:
    tail = read_tail(attempt, LogFilter(), 2)
    assert texts(tail.lines) == ["r0 done", "r1 Done"]
    assert read_page(attempt, LogFilter(), cursor=tail.cursor).lines == []
    write(attempt, 0, 1, [(7.0, "OI", "r1 late line")])
    assert texts(read_page(attempt, LogFilter(), cursor=tail.cursor).lines) == ["r1 late line"]


def test_a_line_still_being_written_waits_for_its_end(attempt: Path) -> None:
    with (attempt / "logs" / "node_0" / "rank_0.log").open("a") as f:
        f.write("8000\tOI\thalf")
    page = read_page(attempt, LogFilter(rank=0))
    assert "half" not in texts(page.lines)
    assert not page.at_end


def test_read_all_goes_through_every_page(attempt: Path) -> None:
    assert len(list(read_all(attempt, LogFilter()))) == 6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": "debug"}, "level must be one of info, warning, error"),
        ({"rank": -1}, "rank must be >= 0"),
        ({"search": "(", "regex": True}, "not a valid regular expression"),
    ],
)
def test_bad_filters_say_what_is_wrong(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(BadFilter, match=message):
        LogFilter(**kwargs)


def test_a_forged_cursor_is_refused(attempt: Path) -> None:
    with pytest.raises(BadFilter, match="cursor"):
        read_page(attempt, LogFilter(), cursor="not-a-cursor")


def test_read_all_ends_at_a_record_cut_by_a_crash(attempt: Path) -> None:
    with (attempt / "logs" / "node_0" / "rank_0.log").open("a") as f:
        f.write("9000\tOI\tcut by a crash")
    assert len(list(read_all(attempt, LogFilter()))) == 6
