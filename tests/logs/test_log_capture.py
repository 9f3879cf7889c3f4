"""Rank output into log records: lines, progress bars, long lines, a crash mid-line."""

from __future__ import annotations

from pathlib import Path

from jupyter_air.logs.capture import RankLog, StreamSplitter, parse_record, plain_lines


def records(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        parsed = parse_record(line)
        assert parsed is not None
        out.append((parsed[1], parsed[3]))
    return out


def split(tmp_path: Path, *chunks: bytes, stream: str = "out") -> list[tuple[str, str]]:
    log = RankLog(tmp_path / "rank_0.log")
    splitter = StreamSplitter(log, stream)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.flush()
    log.close()
    return records(tmp_path / "rank_0.log")


def test_lines_split_across_chunks_become_one_record(tmp_path: Path) -> None:
    assert split(tmp_path, b"hel", b"lo\nwor", b"ld\n") == [("O", "hello"), ("O", "world")]


def test_stderr_lines_are_marked_apart(tmp_path: Path) -> None:
    assert split(tmp_path, b"oops\n", stream="err") == [("E", "oops")]


def test_a_line_longer_than_a_pipe_buffer_is_one_record(tmp_path: Path) -> None:
    long = b"x" * 200_000
    assert split(tmp_path, long[:65536], long[65536:], b"\n") == [("O", long.decode())]


def test_a_progress_bar_is_a_few_progress_records_and_its_final_line(tmp_path: Path) -> None:
    chunks = [f"\r{i}%".encode() for i in range(1000)] + [b"\r100%\n"]
    got = split(tmp_path, *chunks)
    assert got[-1] == ("O", "100%")
    assert all(kind == "o" for kind, _ in got[:-1])
    assert len(got) < 20, "throttled, not one record per update"


def test_the_last_words_before_a_crash_are_kept(tmp_path: Path) -> None:
    assert split(tmp_path, b"done\nhalf a li") == [("O", "done"), ("O", "half a li")]


def test_tabs_and_invalid_utf8_survive(tmp_path: Path) -> None:
    assert split(tmp_path, b"a\tb\xff\n") == [("O", "a\tb\ufffd")]


def test_plain_lines_are_what_a_terminal_showed(tmp_path: Path) -> None:
    log = RankLog(tmp_path / "r.log")
    for kind, text in [("O", "start"), ("o", "10%"), ("o", "50%"), ("O", "100%"), ("o", "7/9")]:
        log.write(kind + "I", text)
    log.close()
    assert list(plain_lines(tmp_path / "r.log")) == ["start", "100%", "7/9"]


def levels(tmp_path: Path, text: str, stream: str = "err") -> list[tuple[str, str]]:
    log = RankLog(tmp_path / "levels.log")
    splitter = StreamSplitter(log, stream)
    splitter.feed(text.encode())
    splitter.flush()
    log.close()
    out = []
    for line in (tmp_path / "levels.log").read_text().splitlines():
        parsed = parse_record(line)
        assert parsed is not None
        out.append((parsed[2], parsed[3]))
    return out


def test_a_python_traceback_is_error_through_its_exception_line(tmp_path: Path) -> None:
    text = (
        "before\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        "ValueError: boom\n"
        "after\n"
    )
    assert [lvl for lvl, _ in levels(tmp_path, text)] == [
        "info", "error", "error", "error", "error", "info",
    ]  # fmt: skip


def test_python_logging_pytorch_and_warnings_formats(tmp_path: Path) -> None:
    text = (
        "INFO:root:starting\n"
        "WARNING:root:learning rate is high\n"
        "2026-11-29 08:30:00,123 - trainer - ERROR - nan loss\n"
        "CRITICAL:root:giving up\n"
        "[W socket.cpp:697] [c10d] The client socket has failed to connect\n"
        "W1129 08:30:00.123 1234 ProcessGroupNCCL.cpp:123] NCCL slow\n"
        "/x/data.py:12: UserWarning: num_workers is large\n"
        "the error rate went down\n"
    )
    assert [lvl for lvl, _ in levels(tmp_path, text, stream="out")] == [
        "info", "warning", "error", "error", "warning", "warning", "warning", "info",
    ]  # fmt: skip
