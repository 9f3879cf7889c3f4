"""The straggler hint, from marks files as ranks write them (issue 38, item 4): a rank
slower in its compute or in waiting for data is named with its phase; noise, a few slow
steps, a slowdown too small to matter and the waits that a straggler causes in the
others name no one. Then one real job of 4 gloo ranks under DDP, one rank slowed in its
backward and another in its data loader: both named, in the hints and on the run."""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from jupyter_air.jobs.node.hints import HintRecorder, read_hints
from jupyter_air.jobs.running import job_details
from jupyter_air.jobs.store import JobStore
from jupyter_air.perf.marks import Phase
from jupyter_air.perf.stragglers import Rule, Straggler, Watch
from tests.air_cli import air
from tests.waits import until, wait_settled

#: One rank's step: seconds by phase, and by place of its compute.
Step = tuple[dict[str, float], dict[str, float]]


def normal(jitter: random.Random) -> Step:
    """A DDP step of a rank that waits for nobody: 170 ms of compute, little else."""
    backward = 0.12 * jitter.uniform(0.9, 1.1)
    other = 0.05 * jitter.uniform(0.9, 1.1)
    phases = {"data": 0.001, "compute": backward + other, "comm": 0.004}
    return phases, {"backward": backward, "other": other}


def write(perf: Path, ranks: int, steps: range, step: Callable[[int, int], Step]) -> None:
    """Append ``steps`` of every rank to its marks file; ``step(rank, s)`` says each."""
    perf.mkdir(exist_ok=True)
    for rank in range(ranks):
        with (perf / f"rank-{rank}.jsonl").open("a") as f:
            for s in steps:
                phases, parts = step(rank, s)
                dt = sum(phases.values())
                f.write(json.dumps({"s": s, "t": 1.0 + s, "dt": dt, "src": "hf", "ph": phases}))
                f.write("\n")
                if s % 10 == 0:  # as perf.phases notes them
                    f.write(json.dumps({"cs": parts, "s": s, "steps": 10, "t": 1.0 + s}) + "\n")


def test_a_rank_slowed_in_its_backward_is_named_though_every_step_lasts_as_long(
    tmp_path: Path,
) -> None:
    jitter = random.Random(1)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 3:  # 150 ms more of backward; it waits for nobody
            parts["backward"] += 0.15
            phases["compute"] += 0.15
        else:  # the others wait for it in DDP's all-reduce: their steps are as long
            phases["comm"] += 0.15
        return phases, parts

    write(tmp_path, 4, range(1, 301), step)
    (found,) = Watch(tmp_path).update()
    assert (found.rank, found.phase, found.part) == (3, Phase.COMPUTE, "backward")
    assert re.fullmatch(
        r"rank 3: 1\.9x the others' compute \(backward\) for the last 200 steps "
        r"\(3[12]\d ms vs 1[67]\d ms a step\)",
        found.text,
    ), found.text


def test_a_rank_slowed_in_its_data_loader_is_named(tmp_path: Path) -> None:
    jitter = random.Random(2)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 1:
            phases["data"] += 0.15
        else:
            phases["comm"] += 0.15
        return phases, parts

    write(tmp_path, 4, range(1, 41), step)
    (found,) = Watch(tmp_path).update()
    assert (found.rank, found.phase, found.part) == (1, Phase.DATA, None)
    assert found.text == (
        "rank 1: 151 ms a step waiting for data, the others 1.0 ms, for the last 40 steps"
    )
    assert found.value == 0.15


def test_waiting_for_a_straggler_is_not_blamed_even_with_two_ranks(tmp_path: Path) -> None:
    jitter = random.Random(3)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 0:
            phases["compute"] += 0.1
            parts["other"] += 0.1
        else:  # waits for rank 0 in every collective: 100x rank 0's comm
            phases["comm"] += 0.1
        return phases, parts

    write(tmp_path, 2, range(1, 31), step)
    assert [(s.rank, s.phase, s.part) for s in Watch(tmp_path).update()] == [
        (0, Phase.COMPUTE, "other")
    ]


def test_noise_and_a_few_slow_steps_name_no_one(tmp_path: Path) -> None:
    jitter = random.Random(4)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        phases["compute"] *= jitter.uniform(0.7, 1.3)  # every rank as noisy
        if jitter.random() < 0.15:  # a pause now and then, on any rank
            phases["compute"] += 0.5
        if rank == 2 and s % 2:  # slow on every other step only: not persistent
            phases["data"] += 0.15
        if rank == 1:  # ten times the others' data wait, but 10 ms of a 180 ms step
            phases["data"] = 0.01
        return phases, parts

    write(tmp_path, 8, range(1, 401), step)
    assert Watch(tmp_path).update() == []


def test_a_slowdown_of_the_past_or_of_too_few_steps_names_no_one(tmp_path: Path) -> None:
    jitter = random.Random(5)

    def slow_early(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 0 and s <= 100:
            phases["data"] += 0.2
        return phases, parts

    watch = Watch(tmp_path, Rule(window=50, min_steps=20))
    write(tmp_path, 3, range(1, 20), slow_early)
    assert watch.update() == []  # 19 steps: not yet
    write(tmp_path, 3, range(20, 101), slow_early)
    assert [s.rank for s in watch.update()] == [0]
    write(tmp_path, 3, range(101, 151), slow_early)
    assert watch.update() == []  # the latest 50 steps are all fine


def test_files_are_read_as_they_grow_and_a_new_count_starts_afresh(tmp_path: Path) -> None:
    jitter = random.Random(6)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 1:
            phases["data"] += 0.3
        return phases, parts

    watch = Watch(tmp_path)
    write(tmp_path, 2, range(1, 31), step)
    with (tmp_path / "rank-0.jsonl").open("a") as f:  # cut short by a crash, then more
        f.write('{"s": 31, "t": 3')
    with (tmp_path / "rank-1.jsonl").open("a") as f:  # another kind, not known here
        f.write(json.dumps({"flops": 1e12, "how": "6nd", "t": 2.0}) + "\n")
    (found,) = watch.update()
    assert (found.rank, found.steps) == (1, 30)
    with (tmp_path / "rank-0.jsonl").open("a") as f:
        f.write("\n")
    write(tmp_path, 2, range(1, 11), lambda rank, s: normal(jitter))  # a second training
    assert watch.update() == []  # 10 steps of the new count, all even


def test_the_others_median_leaves_one_odd_peer_out(tmp_path: Path) -> None:
    jitter = random.Random(7)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank in (0, 4):  # two slow ranks of eight: both named, the slower first
            phases["compute"] += 0.1 if rank == 0 else 0.2
            parts["backward"] += 0.1 if rank == 0 else 0.2
        return phases, parts

    write(tmp_path, 8, range(1, 61), step)
    found = Watch(tmp_path).update()
    assert [(s.rank, s.phase) for s in found] == [(4, Phase.COMPUTE), (0, Phase.COMPUTE)]
    assert all(isinstance(s, Straggler) and s.part == "backward" for s in found)


#: 4 gloo ranks under DDP: rank 1 waits 150 ms for each batch, rank 3 spends 150 ms more
#: in its backward.
SLOW_RANKS = f"{sys.executable} {Path(__file__).parent / 'slow_ranks.py'} data=1 backward=3"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.heavy
@pytest.mark.slow
def test_a_job_names_the_rank_slow_in_its_backward_and_the_one_slow_in_its_data(
    workdir: Path,
) -> None:
    workload = {
        "experiment_name": "stragglers",
        "command": SLOW_RANKS,
        "compute": {"nproc_per_node": 4, "oversubscribe": True},
    }
    (workdir / "w.yaml").write_text(json.dumps(workload))
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    store = JobStore(workdir / "air")
    attempt = store.attempt_dir(job_id, 1)

    def named() -> list[str] | None:
        texts = [h["text"] for h in read_hints(attempt)["hints"] if h["kind"] == "straggler"]
        return texts if len(texts) == 2 else None

    try:
        texts = until(named, "both stragglers named", timeout=300, seen=lambda: read_hints(attempt))
        details = job_details(store, [job_id])[job_id]  # the jobs API's, the GPU panel's
    finally:
        air("cancel", job_id)
    assert any(re.match(r"rank 1: .* (waiting|wait) for data", t) for t in texts), texts
    assert any(re.match(r"rank 3: .* compute \(backward\)", t) for t in texts), texts
    assert sorted(details["hints"]) == sorted(texts)
    job = wait_settled(store, job_id, timeout=180)
    (first,) = store.attempts(job.id)
    assert first.run_id is not None
    run = MlflowClient(f"sqlite:///{workdir}/mlflow.db").get_run(first.run_id)
    assert run.data.tags["air.hint.straggler"] in texts


def test_the_recorder_shows_a_straggler_with_the_other_hints_until_its_marks_change(
    tmp_path: Path,
) -> None:
    jitter = random.Random(8)

    def step(rank: int, s: int) -> Step:
        phases, parts = normal(jitter)
        if rank == 2:
            phases["data"] += 0.2
        return phases, parts

    cell_1, cell_2 = tmp_path / "cell_1" / "perf", tmp_path / "cell_2" / "perf"
    cell_1.parent.mkdir()
    write(cell_1, 3, range(1, 31), step)
    folder = [cell_1]  # where the marks are now: a warm session's latest cell's
    tags: list[tuple[str, str]] = []
    recorder = HintRecorder(
        tmp_path,
        lambda key, text: tags.append((key, text)),
        straggler_interval=0.05,
        marks=lambda: folder[0],
    )
    recorder.start({}, dict)
    try:
        (hint,) = until(lambda: read_hints(tmp_path)["hints"], "the straggler hint")
        assert hint["kind"] == "straggler"
        assert hint["text"].startswith("rank 2: ")
        assert tags == [("air.hint.straggler", hint["text"])]
        cell_2.parent.mkdir()
        write(cell_2, 3, range(1, 31), lambda rank, s: normal(jitter))  # the next cell
        folder[0] = cell_2
        until(lambda: not read_hints(tmp_path)["hints"], "the hint gone with its cell")
    finally:
        recorder.close()
    assert len(tags) == 1  # tagged once
