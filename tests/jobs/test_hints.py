"""Efficiency hints: idle GPUs, full memory, silent ranks on idle GPUs; the file and tags."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from jupyter_air.jobs.node.hints import (
    GpuSample,
    Hint,
    HintRecorder,
    HintWatch,
    Thresholds,
    rank_gpus,
    read_hints,
    write_hints,
)
from jupyter_air.jobs.store import JobStore
from tests.conftest import WriteScenario
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario

LIMITS = Thresholds(idle_util=20, idle_window=60, memory_full=95, silent_after=30)
FREE = GpuSample(util=5, mem_used_mib=1000, mem_total_mib=80_000)
BUSY = GpuSample(util=90, mem_used_mib=1000, mem_total_mib=80_000)


def watch_with(samples: list[dict[int, GpuSample]], step: float = 10) -> HintWatch:
    watch = HintWatch(LIMITS, {0: 0, 1: 1}, started=0)
    for i, readings in enumerate(samples):
        watch.add(i * step, readings)
    return watch


def test_gpus_idle_for_a_whole_window_raise_the_idle_hint_with_their_mean() -> None:
    watch = watch_with([{0: FREE, 1: FREE}] * 8)
    [hint] = watch.hints(now=70, last_output={0: 69, 1: 69})
    assert hint.kind == "idle_gpu"
    assert hint.value == 5
    assert "GPUs 0, 1 averaged 5 % utilization over the last 60 s" in hint.text
    assert "input-bound" in hint.text
    assert hint.tag == "air.hint.idle_gpu"


def test_no_idle_hint_before_a_whole_window_was_watched() -> None:
    watch = watch_with([{0: FREE, 1: FREE}] * 3)
    assert watch.hints(now=30, last_output={0: 29, 1: 29}) == []


def test_busy_gpus_and_a_busy_past_outside_the_window_count_right() -> None:
    busy = watch_with([{0: BUSY, 1: BUSY}] * 8)
    assert busy.hints(now=70, last_output={0: 69, 1: 69}) == []
    # Busy long ago, idle for the last window: the old samples no longer count.
    recovered = watch_with([{0: BUSY, 1: BUSY}] * 8 + [{0: FREE, 1: FREE}] * 8)
    assert [h.kind for h in recovered.hints(now=150, last_output={0: 149, 1: 149})] == ["idle_gpu"]


def test_other_gpus_of_the_machine_do_not_count() -> None:
    watch = HintWatch(LIMITS, {0: 1}, started=0)
    for i in range(8):
        watch.add(i * 10, {0: FREE, 1: BUSY})
    assert watch.hints(now=70, last_output={0: 69}) == []


def test_a_gpu_above_the_memory_threshold_is_named_with_its_share() -> None:
    full = GpuSample(util=99, mem_used_mib=78_000, mem_total_mib=80_000)
    watch = watch_with([{0: BUSY, 1: full}])
    [hint] = watch.hints(now=10, last_output={0: 9, 1: 9})
    assert hint.kind == "memory_full"
    assert hint.value == 97.5
    assert hint.text.startswith("GPU 1 memory at 98 % of 78 GiB")


def test_a_rank_silent_while_its_gpu_is_idle_looks_hung() -> None:
    watch = watch_with([{0: BUSY, 1: FREE}] * 4)
    hints = watch.hints(now=40, last_output={0: 39, 1: 5})
    assert [(h.kind, h.value) for h in hints] == [("silent_rank", 35)]
    assert "rank 1 has printed nothing for 35 s while GPU 1 is idle (5 %)" in hints[0].text


def test_a_silent_rank_on_a_busy_gpu_is_just_computing() -> None:
    watch = watch_with([{0: BUSY, 1: BUSY}] * 4)
    assert watch.hints(now=40, last_output={}) == []


def test_thresholds_from_the_environment_and_bad_values_keep_defaults() -> None:
    limits = Thresholds.from_env(
        {"AIR_HINT_IDLE_WINDOW": "12", "AIR_HINT_MEMORY_FULL": "x", "AIR_HINT_SILENT_AFTER": "-1"}
    )
    assert limits == Thresholds(idle_window=12)


def test_rank_gpus_from_each_ranks_visible_devices() -> None:
    assert rank_gpus(["2", "3", None, "GPU-1234"]) == {0: 2, 1: 3}


def test_the_recorder_writes_a_private_file_and_tags_each_kind_once(tmp_path: Path) -> None:
    now = [0.0]
    tags: list[tuple[str, str]] = []
    recorder = HintRecorder(
        tmp_path, lambda key, text: tags.append((key, text)), LIMITS, clock=lambda: now[0]
    )
    recorder.on_sample({0: FREE})  # before the ranks start: nothing to say
    assert read_hints(tmp_path) == {"gpus": [], "hints": []}
    recorder.start({0: 0, 1: 1}, lambda: {0: now[0], 1: now[0]})
    assert read_hints(tmp_path) == {"gpus": [0, 1], "hints": []}
    for t in range(0, 80, 10):
        now[0] = float(t)
        recorder.on_sample({0: FREE, 1: FREE})
    doc = read_hints(tmp_path)
    assert [h["kind"] for h in doc["hints"]] == ["idle_gpu"]
    assert [key for key, _ in tags] == ["air.hint.idle_gpu"]
    assert stat.S_IMODE((tmp_path / "hints.json").stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*.tmp"))


def test_every_rank_silent_a_while_is_told_and_again_each_while_till_one_is_heard_from(
    tmp_path: Path,
) -> None:
    now, heard, told = [1000.0], {0: 1000.0, 1: 1000.0}, []
    recorder = HintRecorder(
        tmp_path,
        lambda key, text: None,
        Thresholds(stalled_after=60),
        clock=lambda: now[0],
        marks=lambda: tmp_path / "perf",
        on_stall=told.append,
        straggler_interval=3600,
    )
    recorder.start({}, lambda: dict(heard))  # no GPU: told all the same
    heard[1], now[0] = 1040.0, 1090.0  # rank 1 printed 50 s ago
    recorder.stall_check()
    assert told == []
    now[0] = 1101.0
    recorder.stall_check()
    now[0] = 1160.0
    recorder.stall_check()
    assert told == [61.0], "once in each while they stay silent"
    now[0] = 1200.0
    recorder.stall_check()
    assert told == [61.0, 160.0], "again a while later: the first look may be too early"
    (tmp_path / "perf").mkdir()
    mark = tmp_path / "perf" / "rank-0.jsonl"  # a step mark is a rank heard from
    mark.write_text("{}\n")
    os.utime(mark, (1195.0, 1195.0))
    recorder.stall_check()
    now[0] = 1256.0
    recorder.stall_check()
    assert told == [61.0, 160.0, 61.0]
    recorder.close()


def test_a_damaged_hints_file_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / "hints.json").write_text('{"gpus": ["x", 1], "hints": [{"no": "text"}, 3]}')
    assert read_hints(tmp_path) == {"gpus": [1], "hints": []}
    (tmp_path / "hints.json").write_text("not json")
    assert read_hints(tmp_path) == {"gpus": [], "hints": []}


async def test_the_gpu_panel_shows_a_running_jobs_hints_beside_its_processes(
    jp_fetch: Any, scenario: WriteScenario, store: JobStore
) -> None:
    job = store.create(job_spec("command", command=["true"]))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    attempt_dir = store.attempt_dir(job.id, 1)
    attempt_dir.mkdir(parents=True, exist_ok=True)
    idle = Hint("idle_gpu", "GPU 0 averaged 3 % utilization over the last 5 min", 3.0)
    write_hints(attempt_dir, [0], [idle], 0.0)
    rank = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "AIR_JOB_ID": job.id, "RANK": "0"},
    )
    try:
        scenario(Scenario(gpus=[FakeGpu(processes=[(rank.pid, 2 * 1024**3)])]))
        answer = await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
        (process,) = json.loads(answer.body)["state"][0]["processes"]
        assert process["owner"]["id"] == job.id
        assert process["owner"]["hints"] == [idle.text]

        store.update(job.id, status="SUCCEEDED")  # an ended job's hints are history
        answer = await jp_fetch("jupyter-air", "gpu", "sample", method="POST", body=b"")
        (process,) = json.loads(answer.body)["state"][0]["processes"]
        assert "hints" not in process["owner"]
    finally:
        rank.kill()
        rank.wait()
