"""Following a job's logs: every line once, in time order, attempt by attempt, whatever
the ranks write and however their writes are cut."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs import follow
from jupyter_air.jobs.follow import LogFollower, outcome
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs import query
from jupyter_air.logs.query import CHUNK, RECORD_LIMIT, LogFilter, LogLine
from tests.factories import job_spec


def rank_log(store: JobStore, job_id: str, attempt: int, rank: int) -> Path:
    path = store.attempt_dir(job_id, attempt) / "logs" / "node_0" / f"rank_{rank}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def record(ms: int, text: str, kind: str = "OI") -> bytes:
    return f"{ms}\t{kind}\t{text}\n".encode()


def followed(follower: LogFollower) -> list[tuple[int, LogLine]]:
    return [(attempt, line) for attempt, lines in follower.follow(interval=0.01) for line in lines]


@pytest.fixture
def job_id(store: JobStore) -> str:
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING")
    return job.id


def test_interleaved_ranks_written_in_cut_pieces_come_whole_once_and_in_order(
    store: JobStore, job_id: str
) -> None:
    per_rank = 60_000  # about 3 reads of a rank's file
    expected = {rank: [f"rank {rank} line {i} " + "x" * (i % 40) for i in range(per_rank)]
                for rank in (0, 1)}  # fmt: skip
    data = {
        # Rank 1 writes twice as often: the ranks' files interleave unevenly in time.
        rank: b"".join(record(1_000_000 + i * (2 - rank), text) for i, text in enumerate(texts))
        for rank, texts in expected.items()
    }
    paths = {rank: rank_log(store, job_id, 1, rank) for rank in (0, 1)}
    store.start_attempt(job_id, 1, None)

    def write() -> None:
        """Each rank's bytes in random pieces, records cut anywhere, then the job's end."""
        chance = random.Random(7)
        position = dict.fromkeys(data, 0)
        files = {rank: paths[rank].open("ab") for rank in data}
        while any(position[r] < len(data[r]) for r in data):
            rank = chance.choice([r for r in data if position[r] < len(data[r])])
            size = chance.randrange(1, 200_000)
            files[rank].write(data[rank][position[rank] : position[rank] + size])
            files[rank].flush()
            position[rank] += size
        for f in files.values():
            f.close()
        store.update(job_id, status="SUCCEEDED")

    writer = threading.Thread(target=write)
    writer.start()
    got = followed(LogFollower(store, job_id))
    writer.join()
    for rank in (0, 1):
        assert [line.text for _, line in got if line.rank == rank] == expected[rank]
    # Read again once written: one time order across the ranks' files, read by reads.
    again = followed(LogFollower(store, job_id))
    assert len(again) == 2 * per_rank
    times = [line.t for _, line in again]
    assert times == sorted(times)


def test_a_clock_stepping_back_in_one_file_loses_no_line(store: JobStore, job_id: str) -> None:
    stamps = [5000, 3000, 4000, 9000]  # the supervisor's clock was set back once
    rank_log(store, job_id, 1, 0).write_bytes(
        b"".join(record(ms, f"a{ms}") for ms in stamps) + b"9500\tOI\t" + b"x" * CHUNK + b"\n"
    )
    rank_log(store, job_id, 1, 1).write_bytes(b"".join(record(ms, f"b{ms}") for ms in (3500, 8000)))
    store.start_attempt(job_id, 1, None)
    store.update(job_id, status="SUCCEEDED")
    texts = [line.text[:6] for _, line in followed(LogFollower(store, job_id))]
    assert sorted(texts) == sorted(["a5000", "a3000", "a4000", "a9000", "b3500", "b8000", "x" * 6])
    assert [t for t in texts if t.startswith("a")] == ["a5000", "a3000", "a4000", "a9000"]


def test_huge_lines_come_whole_or_cut_with_a_marker_and_the_next_lines_follow(
    store: JobStore, job_id: str
) -> None:
    long, huge = "é" * (CHUNK // 2 + 5), "y" * (RECORD_LIMIT + 1000)
    rank_log(store, job_id, 1, 0).write_bytes(
        record(1000, "before") + record(2000, long) + record(3000, huge) + record(4000, "after")
    )
    rank_log(store, job_id, 1, 1).write_bytes(record(2500, "other rank"))
    store.start_attempt(job_id, 1, None)
    store.update(job_id, status="SUCCEEDED")
    texts = [line.text for _, line in followed(LogFollower(store, job_id))]
    assert texts[:3] == ["before", long, "other rank"]
    assert texts[3].startswith("y" * 1000)
    assert texts[3].endswith(" more bytes of this line not shown]")
    assert len(texts[3].encode()) < RECORD_LIMIT + 100
    assert texts[4:] == ["after"]


def test_attempts_are_followed_in_turn_each_read_to_its_end(store: JobStore, job_id: str) -> None:
    rank_log(store, job_id, 1, 0).write_bytes(record(1000, "first try") + record(1100, "failed"))
    store.start_attempt(job_id, 1, None)
    follower = LogFollower(store, job_id)
    assert [line.text for line in follower.poll()] == ["first try", "failed"]
    with rank_log(store, job_id, 1, 1).open("ab") as f:
        f.write(record(1200, "late line of attempt 1"))
    rank_log(store, job_id, 2, 0).write_bytes(record(900, "second try"))  # an earlier clock
    store.start_attempt(job_id, 2, None)
    store.update(job_id, status="SUCCEEDED")
    rest = [(attempt, line.text) for attempt, line in followed(follower)]
    assert rest == [(1, "late line of attempt 1"), (2, "second try")]


def test_one_attempt_only_and_progress_updates_when_asked(store: JobStore, job_id: str) -> None:
    rank_log(store, job_id, 1, 0).write_bytes(record(1, "one") + record(2, "50%", "oI"))
    rank_log(store, job_id, 2, 0).write_bytes(record(3, "two"))
    store.start_attempt(job_id, 1, None)
    store.start_attempt(job_id, 2, None)
    store.update(job_id, status="FAILED")
    only_first = LogFollower(store, job_id, LogFilter(progress=True), retries=False)
    lines = [line for _, line in followed(only_first)]
    assert [(line.text, line.progress, line.stream) for line in lines] == [
        ("one", False, "out"),
        ("50%", True, "out"),
    ]
    assert [line.text for _, line in followed(LogFollower(store, job_id, attempt=2))] == ["two"]


def test_a_stop_ends_following_a_job_that_goes_on(store: JobStore, job_id: str) -> None:
    rank_log(store, job_id, 1, 0).write_bytes(record(1, "still running"))
    store.start_attempt(job_id, 1, None)
    stops = iter([False, False, True])
    got = list(LogFollower(store, job_id).follow(stop=lambda: next(stops), interval=0.01))
    assert [[line.text for line in lines] for _, lines in got] == [["still running"]]


def test_following_ends_with_the_last_attempt_s_outcome_not_the_job_s_later_record(
    store: JobStore,
) -> None:
    """A job nobody's kernel follows (``air run``) is recorded as ended only after its
    run's MLflow tail; ``--watch`` ends as soon as the outcome is known."""
    job_id = store.create(job_spec("command", command=["true"], max_retries=1)).id
    store.update(job_id, status="RUNNING")
    rank_log(store, job_id, 1, 0).write_bytes(record(1, "try 1"))
    store.start_attempt(job_id, 1, None)
    assert outcome(store, job_id) is None, "still running"
    store.end_attempt(job_id, 1, "FAILED", [1], 0, "rank 0 exited with code 1")
    assert outcome(store, job_id) is None, "a retry is left: the job goes on"
    rank_log(store, job_id, 2, 0).write_bytes(record(2, "try 2"))
    store.start_attempt(job_id, 2, None)
    store.end_attempt(job_id, 2, "FAILED", [1], 0, "rank 0 exited with code 1")
    assert outcome(store, job_id) == ("FAILED", "rank 0 exited with code 1")
    assert store.get(job_id).status == "RUNNING", "the job's own end is not recorded yet"
    assert [(attempt, line.text) for attempt, line in followed(LogFollower(store, job_id))] == [
        (1, "try 1"),
        (2, "try 2"),
    ]
    store.update(job_id, status="CANCELLED", message="cancelled")
    assert outcome(store, job_id) == ("CANCELLED", "cancelled"), "the job's record wins"


def test_a_success_is_the_outcome_at_once_whatever_retries_are_left(store: JobStore) -> None:
    job_id = store.create(job_spec("command", command=["true"], max_retries=3)).id
    store.update(job_id, status="RUNNING")
    store.start_attempt(job_id, 1, None)
    store.end_attempt(job_id, 1, "SUCCEEDED", [0, 0])
    assert outcome(store, job_id) == ("SUCCEEDED", None)


def test_a_clock_stepping_back_within_one_read_neither_stalls_nor_loses_lines(
    store: JobStore, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read whose first record is later than its last (the clock was set back between
    them), short of its file's end: the page still takes it, and the next read goes on."""
    monkeypatch.setattr(query, "CHUNK", 64)
    stamps = [9000, *range(1000, 1020)]
    rank_log(store, job_id, 1, 0).write_bytes(b"".join(record(ms, f"a{ms}") for ms in stamps))
    store.start_attempt(job_id, 1, None)
    store.update(job_id, status="SUCCEEDED")
    texts = [line.text for _, line in followed(LogFollower(store, job_id))]
    assert texts == [f"a{ms}" for ms in stamps]


def test_a_chatty_attempt_is_read_without_a_look_at_the_job_store(
    store: JobStore, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a read that gives nothing asks the store (a retry? the outcome?): a job that
    has written more each time its follower looks costs no query per read."""
    log = rank_log(store, job_id, 1, 0)
    store.start_attempt(job_id, 1, None)
    written = iter(range(20))

    def more_written() -> bool:
        """Called before each read: 50 more lines each time, 20 times, then the end."""
        if (burst := next(written, None)) is None:
            store.update(job_id, status="SUCCEEDED")
        else:
            with log.open("ab") as f:
                f.write(b"".join(record(burst, f"line {burst}.{i}") for i in range(50)))
        return False

    asked: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(store, name)
        return lambda *args: asked.append(name) or real(*args)

    for name in ("get", "attempts"):
        monkeypatch.setattr(store, name, counted(name))
    got = list(LogFollower(store, job_id).follow_text(stop=more_written, interval=0.01))
    assert len(got) == 20
    assert sum(text.count("\n") for _, text in got) == 20 * 50
    assert len(asked) <= 2, asked  # once read out: a later attempt? the outcome?


def test_an_attempt_cut_by_a_crash_mid_record_does_not_keep_its_follower_busy(
    store: JobStore,
) -> None:
    """The attempt's last record never ends (its writer died mid-record), so it is never
    read to its end; its retry's existence must not make the follower spin: it ends
    with the outcome, as it does without a retry."""
    job_id = store.create(job_spec("command", command=["true"], max_retries=1)).id
    store.update(job_id, status="RUNNING")
    rank_log(store, job_id, 1, 0).write_bytes(record(1, "try 1") + b"2\tOI\tcut by a cra")
    store.start_attempt(job_id, 1, None)
    rank_log(store, job_id, 2, 0).write_bytes(record(3, "try 2"))
    store.start_attempt(job_id, 2, None)
    store.update(job_id, status="FAILED")
    looks = itertools.count()
    got = list(LogFollower(store, job_id).follow(stop=lambda: next(looks) > 100, interval=0))
    assert [(attempt, line.text) for attempt, lines in got for line in lines] == [(1, "try 1")]
    assert next(looks) < 10, "it ended by itself"


def test_a_quiet_job_s_store_is_asked_when_it_changed_or_once_a_second(
    store: JobStore, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that writes nothing costs its follower no look at the store per poll: one
    when something was committed (here the outcome, seen at the next poll), and one a
    second besides (a supervisor killed outright commits nothing)."""
    monkeypatch.setattr(follow, "LOOK_EVERY", 0.5)
    store.start_attempt(job_id, 1, None)
    asked: list[float] = []
    real = store.attempts
    monkeypatch.setattr(store, "attempts", lambda *a: asked.append(time.monotonic()) or real(*a))
    polls = itertools.count()
    started = time.monotonic()

    def end_later() -> bool:
        """After 1.2 s of polls every 10 ms, the job succeeds."""
        next(polls)
        if asked and asked[-1] - started >= 1.2 and store.get(job_id).status == "RUNNING":
            store.end_attempt(job_id, 1, "SUCCEEDED", [0])
            store.update(job_id, status="SUCCEEDED")
        return time.monotonic() - started > 30

    assert list(LogFollower(store, job_id).follow(stop=end_later, interval=0.01)) == []
    assert next(polls) > 60, "it polled every 10 ms"
    assert 3 <= len(asked) <= 5, asked  # at 0, 0.5, 1.0(, 1.5) s, then the outcome's commit
    assert time.monotonic() - started < 5, "the outcome ended following at once"


def test_polls_of_a_quiet_attempt_ask_for_a_later_one_only_when_the_store_changed(
    store: JobStore, job_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel polls its cell's job ten times a second: read out, the attempt asks the
    store for a later attempt once, then again only after a commit (or a second)."""
    rank_log(store, job_id, 1, 0).write_bytes(record(1, "try 1"))
    store.start_attempt(job_id, 1, None)
    asked: list[str] = []
    real = store.attempts
    monkeypatch.setattr(store, "attempts", lambda *a: asked.append("attempts") or real(*a))
    follower = LogFollower(store, job_id)
    assert [line.text for line in follower.poll()] == ["try 1"]
    for _ in range(20):
        assert follower.poll() == []
    assert len(asked) == 1, asked
    rank_log(store, job_id, 2, 0).write_bytes(record(2, "try 2"))
    store.start_attempt(job_id, 2, None)
    assert follower.poll() == []  # this poll sees the later attempt: the next reads it
    assert [line.text for line in follower.poll()] == ["try 2"]
    assert len(asked) == 2, asked
