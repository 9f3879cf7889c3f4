"""Which collective a hung job waits in, and which rank never came (issue 39, item 1):
``jobs.hangs`` read on real recorders and stacks of 2 gloo ranks (``flight_dumps/``,
made by ``flight_dumps/ranks.py``), and ``node.flight_recorder``'s two sides on a real
rank: what it says when asked, what it keeps private, what turns it off."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.hangs import HangKind, HangReport, analyse, busy_in, stuck, where_in
from jupyter_air.jobs.node import flight_recorder, stacks
from jupyter_air.jobs.node.flight_recorder import OFF
from tests.waits import until

DUMPS = Path(__file__).parent / "flight_dumps"
#: A moment 12 s after the dumps' hung collective began.
NOW = 1796553656892927846 + 12 * 10**9


def recorded(case: str) -> tuple[dict[int, Any], dict[int, str]]:
    recorders = {r: json.loads((DUMPS / case / f"rank_{r}.fr.json").read_text()) for r in (0, 1)}
    dumps = {r: (DUMPS / case / f"rank_{r}.txt").read_text() for r in (0, 1)}
    return recorders, dumps


def test_the_rank_that_never_entered_the_collective_is_named_with_where_it_is() -> None:
    recorders, dumps = recorded("absent")
    report = analyse(recorders, {}, dumps, NOW)
    assert report is not None
    assert report.kind is HangKind.ABSENT
    assert report.line == (
        "rank 0 waits in all_reduce #5 (float32[1024], gloo); rank 1 never entered it: "
        "its last collective was #4 (broadcast), it is in load_batch (ranks.py:12) (stacks)"
    )
    assert report.details == (
        "rank 0: waits in all_reduce #5 (float32[1024], gloo) for 12 s, "
        "called from <module> (ranks.py:23)",
        "rank 1: never entered it; last collective #4 (broadcast); now in load_batch (ranks.py:12)",
    )
    assert (report.group, report.seq, report.op) == ("0", 5, "all_reduce")
    assert (report.waiting, report.culprits) == ((0,), (1,))
    assert HangReport.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_silent_ranks_are_stuck_unless_the_one_they_wait_for_is_busy_elsewhere() -> None:
    recorders, dumps = recorded("absent")
    report = analyse(recorders, {}, dumps, NOW)
    assert report is not None
    assert stuck(report, dumps), "rank 1 idles in load_batch: the others wait for nothing"
    working = {**dumps, 1: dumps[1].replace('(idle): "MainThread"', '(active+gil): "MainThread"')}
    assert working != dumps
    assert not stuck(report, working), "rank 1 computes (an evaluation): they wait for it"
    at_prompt = dumps[1].replace(
        "load_batch (ranks.py:12)", "readline (jupyter_air/jobs/rank_pdb.py:80)\n    load_batch"
    )
    assert at_prompt != dumps[1]
    assert not stuck(report, {**dumps, 1: at_prompt}), "rank 1 is stopped in the debugger"
    mismatch, mismatched_dumps = recorded("mismatch")
    disagree = analyse(mismatch, {}, mismatched_dumps, NOW)
    assert disagree is not None
    assert stuck(disagree, {}), "ranks in different collectives never meet, busy or not"
    assert not stuck(HangReport(HangKind.NONE, "no rank waits in a collective", ()), dumps)


def test_with_four_ranks_the_waiting_ones_are_listed_and_the_absent_one_named() -> None:
    recorders, dumps = recorded("absent")
    four = {0: recorders[0], 1: recorders[1], 2: copy.deepcopy(recorders[0]), 3: recorders[0]}
    report = analyse(four, {}, {1: dumps[1]}, NOW)
    assert report is not None
    assert report.line.startswith(
        "ranks 0, 2, 3 wait in all_reduce #5 (float32[1024], gloo); rank 1 never entered it"
    )


def test_ranks_in_different_collectives_at_the_same_number_are_a_mismatch() -> None:
    recorders, dumps = recorded("mismatch")
    report = analyse(recorders, {}, dumps, NOW)
    assert report is not None
    assert report.kind is HangKind.MISMATCH
    assert report.line == (
        "ranks disagree at collective #5: rank 0 in all_reduce (float32[1024], gloo); "
        "rank 1 in broadcast (int64[3, 4], gloo)"
    )
    assert report.culprits == (1,)
    assert "rank 1: waits in broadcast #5 (int64[3, 4], gloo)" in report.details[1]


def test_the_same_op_with_other_shapes_is_a_mismatch_too() -> None:
    recorders, _ = recorded("absent")
    other = copy.deepcopy(recorders[0])
    other["entries"][-1]["input_sizes"] = [[512]]
    report = analyse({0: recorders[0], 1: other}, {}, {}, NOW)
    assert report is not None
    assert report.kind is HangKind.MISMATCH
    assert "rank 1 in all_reduce (float32[512], gloo)" in report.line


def test_ranks_past_every_collective_wait_in_none() -> None:
    recorders, dumps = recorded("absent")
    done = {0: recorders[1], 1: recorders[1]}  # rank 1's: every call done, #4 the last
    report = analyse(done, {}, dumps, NOW)
    assert report is not None
    assert report.kind is HangKind.NONE
    assert report.line == "no rank waits in a collective (the last one of every rank: #4, done)"
    assert "rank 1: last collective #4 (broadcast); now in load_batch (ranks.py:12)" in (
        report.details
    )


def test_a_rank_without_a_recorder_is_said_and_no_recorder_at_all_says_nothing() -> None:
    recorders, _ = recorded("absent")
    report = analyse({0: recorders[0], 1: None}, {1: "no answer in 20 s"}, {}, NOW)
    assert report is not None
    assert report.kind is HangKind.WAITING
    assert report.line.endswith("every rank entered it; no recorder from rank 1")
    assert "rank 1: no recorder: no answer in 20 s" in report.details
    assert analyse({0: None, 1: None}, {0: OFF, 1: OFF}, {}, NOW) is None
    not_distributed = {0: flight_recorder.NO_GROUP, 1: flight_recorder.NO_GROUP}
    assert analyse({0: None, 1: None}, not_distributed, {}, NOW) is None, "nothing to say"
    unknown = analyse({0: None}, {0: "not asked: boom"}, {}, NOW)
    assert unknown is not None
    assert unknown.kind is HangKind.UNKNOWN


def test_where_a_rank_is_is_its_main_thread_s_innermost_frame_of_the_user_s_code() -> None:
    dump = textwrap.dedent(
        """\
        Thread 7 (idle): "MainThread"
            \x1b[32mclock_nanosleep\x1b[0m (\x1b[36mlibc.so.6\x1b[0m)
            get (queue.py:180)
            load_batch (train.py:40)
            <module> (train.py:77)
        Thread 8 (idle): "air-flight-recorder"
            _listen (jupyter_air/jobs/node/flight_recorder.py:137)
        """
    )
    assert where_in(dump) == "get (queue.py:180), from load_batch (train.py:40)"
    cell = 'Thread 7 (active): "MainThread"\n    <module> (<air_distributed cell>:5)\n'
    assert where_in(cell) == "<module> (<air_distributed cell>:5)"
    assert where_in(None) is None
    assert where_in('Thread 8 (idle): "other"\n    run (x.py:1)\n') is None


def test_where_a_rank_is_is_read_from_its_own_process_s_frames_only() -> None:
    """py-spy's header repeats a ``python -c`` rank's code, names no thread in a process
    that never imported ``threading``, and lists the rank's subprocesses after it."""
    dump = textwrap.dedent(
        """\
        Process 41: python -c
        import time
        def waiting(): time.sleep(600)
            wrapped (<string>:9)
        waiting()
        Python v3.11.7 (/usr/bin/python3.11)

        Thread 43 (idle)
            helper (tool.py:3)
        Thread 41 (idle)
            clock_nanosleep (libc.so.6)
            waiting (<string>:3)
            <module> (<string>:4)

        Process 57: python -c worker
        Python v3.11.7 (/usr/bin/python3.11)

        Thread 57 (active)
            work (<string>:1)
        """
    )
    assert where_in(dump) == "waiting (<string>:3)"
    assert not busy_in(dump), "the rank's main thread sleeps, its child works"
    named = dump.replace("Thread 41 (idle)", 'Thread 41 (idle): "MainThread"')
    assert where_in(named.replace("Thread 43 (idle)", 'Thread 43 (idle): "pool"')) == (
        "waiting (<string>:3)"
    )


def test_a_set_of_stacks_keeps_the_recorders_and_says_the_hang(tmp_path: Path) -> None:
    recorders, dumps = recorded("absent")
    taken = [stacks.RankStacks(r, 0, 100 + r, dumps[r], None, recorders[r], None) for r in (0, 1)]
    where = stacks.save(tmp_path, "s1", "asked for", taken)
    assert stat.S_IMODE((where / "rank_1.fr.json").stat().st_mode) == 0o600
    back = stacks.read(tmp_path, "s1")
    assert back is not None
    assert back.hang is not None
    assert back.hang.kind is HangKind.ABSENT
    assert back.stacks[1].recorder == recorders[1]
    assert "Collectives: rank 0 waits in all_reduce #5" in back.text()
    assert stacks.named_hang(tmp_path) == back.hang.line
    off = [stacks.RankStacks(0, 0, 1, "x", None, None, OFF)]
    stacks.save(tmp_path, "s2", "asked for", off)
    assert stacks.named_hang(tmp_path) == back.hang.line, "the latest set that named one"


def test_the_rank_environment_turns_the_recorder_on_or_off(tmp_path: Path) -> None:
    env = flight_recorder.rank_env({"PYTHONPATH": "/mine"}, tmp_path)
    assert env["TORCH_FR_BUFFER_SIZE"] == str(flight_recorder.DEFAULT_ENTRIES)
    assert env["AIR_FLIGHT_DIR"] == str(tmp_path)
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str(tmp_path)), "not /tmp"
    assert env["PYTHONPATH"].endswith(":/mine"), "the rank's sitecustomize answers"
    off = flight_recorder.rank_env({"AIR_FLIGHT_RECORDER": "0"}, tmp_path)
    assert off == {"TORCH_FR_BUFFER_SIZE": "0"}, "PyTorch's own default records 2000"
    mine = {"AIR_FLIGHT_RECORDER": "50", "TORCH_FR_BUFFER_SIZE": "7"}
    assert flight_recorder.rank_env(mine, tmp_path)["TORCH_FR_BUFFER_SIZE"] == "7"
    assert flight_recorder.entries({"AIR_FLIGHT_RECORDER": "50"}) == 50
    assert flight_recorder.entries({"AIR_FLIGHT_RECORDER": "lots"}) == 200


RANK = """\
import sys, time
from jupyter_air.jobs.node import flight_recorder
flight_recorder.start()
if sys.argv[1] == "group":
    import torch, torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    dist.all_reduce(torch.ones(4, dtype=torch.float16))
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.heavy
def test_a_real_rank_answers_from_its_thread_privately_and_not_when_off(tmp_path: Path) -> None:
    folder = tmp_path / "flight"

    def rank(kind: str, number: int, **extra: str) -> subprocess.Popen[str]:
        env = dict(os.environ, RANK=str(number), **extra)
        env.update(flight_recorder.rank_env(env, folder))
        return subprocess.Popen(
            [sys.executable, "-c", RANK, kind], env=env, stdout=subprocess.PIPE, text=True
        )

    ranks = {0: rank("group", 0), 1: rank("none", 1), 2: rank("none", 2, AIR_FLIGHT_RECORDER="0")}
    try:
        for p in ranks.values():
            assert p.stdout is not None
            assert p.stdout.readline() == "ready\n"
        until(lambda: (folder / "rank_1.ready").exists(), "rank 1 answers")
        # Its thread dumps the recorder: on a loaded machine that may take longer than
        # ``ANSWER_WAIT``, which is what a user asking about a hang on a busy node waits.
        found = flight_recorder.gather({r: p.pid for r, p in ranks.items()}, wait=120)
        trace = found[0].trace
        assert trace is not None, found[0].error
        (call,) = trace["entries"]
        assert (call["profiling_name"], call["collective_seq_id"]) == ("gloo:all_reduce", 1)
        assert (call["input_sizes"], call["input_dtypes"], call["retired"]) == (
            [[4]],
            ["Half"],
            True,
        )
        assert found[1].error == flight_recorder.NO_GROUP
        started = time.monotonic()
        assert flight_recorder.gather({2: ranks[2].pid})[2].error == OFF
        assert time.monotonic() - started < 2, "a rank with the recorder off is not waited for"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert [p.name for p in folder.iterdir() if p.is_dir()] == [], "answers not left behind"
        for kept in folder.iterdir():
            assert stat.S_IMODE(kept.stat().st_mode) == 0o600, kept
    finally:
        for p in ranks.values():
            p.kill()
            p.wait()
