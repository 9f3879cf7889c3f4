"""Where a stuck job is (issue 26): every rank's Python stacks, by py-spy, of a 2-rank
job whose rank 1 never reaches the ``all_reduce`` rank 0 waits in; asked for with ``air
stacks``, and taken by themselves when the likely-hang hint fires and when the hung job
is cancelled. With them, the ranks' flight recorders name the collective and the rank
that never came, or the ranks that called different ones (issue 39, item 1). Real
supervisors, real ranks (torch, gloo), the fake NVML driver."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.node import stacks
from jupyter_air.jobs.node.hints import read_hints
from jupyter_air.jobs.store import JobStore
from jupyter_air.paths import air_home
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, env_for
from tests.waits import until, wait_settled

#: Every test runs jobs (a supervisor and ranks each): left to make test.
pytestmark = pytest.mark.heavy

HUNG = """\
import os, time
import torch
import torch.distributed as dist


def wait_forever():
    while True:
        time.sleep(0.2)


dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    wait_forever()
dist.all_reduce(torch.ones(1))
"""
#: train.py's lines, as the stacks name them.
RANK_1_WAITS = "wait_forever (train.py:8)"
RANK_0_WAITS = "<module> (train.py:15)"
#: What the ranks' flight recorders say of it.
NAMED = (
    "rank 0 waits in all_reduce #1 (float32[1], gloo); rank 1 never entered it: "
    f"it has called no collective yet, it is in {RANK_1_WAITS} (stacks)"
)
MISMATCHED = """import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    dist.broadcast(torch.zeros(3, dtype=torch.int64), 0)
else:
    dist.all_reduce(torch.ones(2, 5))
"""


@pytest.fixture
def gpus(in_module_home: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_dir: Path) -> Path:
    """The fake driver's scenario file, two idle GPUs at first (a hang looks so). In the
    module's folder: the tail process inherits its path (see ``in_module_home``)."""
    path = Scenario(gpus=[FakeGpu(util=0), FakeGpu(util=0)]).write(in_module_home / "nvml.txt")
    for key, value in env_for(fake_nvml_dir, path).items():
        monkeypatch.setenv(key, value)
    return path


@pytest.fixture
def workdir(tmp_path: Path, gpus: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(HUNG)
    monkeypatch.setenv("AIR_HINT_STALLED_AFTER", "3600")  # only the sets a test asks for
    monkeypatch.chdir(tmp_path)
    return tmp_path


def start(workdir: Path, **fields: Any) -> str:
    (workdir / "w.yaml").write_text(
        json.dumps(
            {
                "experiment_name": "stacks",
                "command": f"{sys.executable} train.py",
                "compute": {"nproc_per_node": 2},
                **fields,
            }
        )
    )
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]

    def both_ready() -> bool:
        shown = air("logs", job_id).stdout
        return "rank 0 ready" in shown and "rank 1 ready" in shown

    until(both_ready, "both ranks in the process group")
    return job_id


def test_air_stacks_shows_rank_0_in_the_collective_and_rank_1_where_it_is_stuck(
    workdir: Path,
) -> None:
    job_id = start(workdir)
    try:
        shown = air("stacks", job_id)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        rank_0 = out[out.index("=== node 0 rank 0") : out.index("=== node 0 rank 1")]
        rank_1 = out[out.index("=== node 0 rank 1") :]
        assert RANK_0_WAITS in rank_0, out
        assert "all_reduce" in rank_0, "the collective it waits in"
        assert RANK_1_WAITS in rank_1, out
        assert "all_reduce" not in rank_1
        assert f"Collectives: {NAMED}\n" in out, out

        one = json.loads(air("stacks", job_id, "--rank", "1", "--output", "json").stdout)
        ((taken,),) = [doc["ranks"] for doc in one]
        assert taken["rank"] == 1
        assert RANK_1_WAITS in taken["text"]
        ((hang,),) = [[doc["hang"]] for doc in one]
        assert (hang["kind"], hang["seq"], hang["op"]) == ("absent", 1, "all_reduce")
        assert (hang["waiting"], hang["culprits"]) == ([0], [1])
        saved = air("stacks", job_id, "--saved")
        assert saved.stdout.count("=== node 0 rank 1") == 2, "both sets kept with the attempt"
        assert f"    hang:     {NAMED}\n" in air("get", job_id).stdout
    finally:
        air("cancel", job_id)
    job = wait_settled(air_home(), job_id)
    assert job.status == "CANCELLED"
    ended = air("stacks", job_id)
    assert ended.returncode != 0
    assert f"job {job_id} runs no rank now (cancelled)" in ended.stderr


def test_a_likely_hang_takes_the_stacks_and_so_does_its_cancel(
    workdir: Path, gpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor's hints: a rank silent 2 s on an idle GPU, sampled every second.
    monkeypatch.setenv("AIR_HINT_SILENT_AFTER", "2")
    monkeypatch.setenv("AIR_HINT_IDLE_UTILIZATION", "50")
    monkeypatch.setenv("AIR_SYSTEM_METRICS_INTERVAL", "1")
    busy = Scenario(gpus=[FakeGpu(util=100), FakeGpu(util=100)])
    busy.write(gpus)  # no hint while the ranks start (importing torch is silent)
    job_id = start(workdir, notify=["jupyterlab on:hint"])
    Scenario(gpus=[FakeGpu(util=0), FakeGpu(util=0)]).write(gpus)
    store = JobStore(air_home())
    attempt_dir = store.attempt_dir(job_id, 1)
    try:
        until(lambda: stacks.sets(attempt_dir), "the stacks of the likely hang", timeout=120)

        def hang_hint() -> list[str]:
            return [h["text"] for h in read_hints(attempt_dir)["hints"] if h["kind"] == "hang"]

        assert until(hang_hint, "the cell's hints name the hang", timeout=60) == [NAMED]
        (told,) = until(
            lambda: store.outbox.records(job_ids=[job_id]), "the hang's notification", 60
        )
        assert told.message.title.endswith(f": {NAMED}"), told.message.title
        assert " has printed nothing for " in told.message.lines[0], "the likely hang's hint"
        assert told.message.lines[1] == NAMED
        assert told.message.lines[2].startswith("rank 0: waits in all_reduce #1 ")
    finally:
        assert air("cancel", job_id).returncode == 0
    wait_settled(air_home(), job_id)
    taken = [stacks.read(attempt_dir, name) for name in stacks.sets(attempt_dir)]
    reasons = [t.reason for t in taken if t is not None]
    assert any("a likely hang" in r and not r.startswith("cancelled") for r in reasons), reasons
    assert any(r.startswith("cancelled after rank ") for r in reasons), reasons
    hang = next(t for t in taken if t is not None and t.reason.startswith("cancelled"))
    by_rank = {s.rank: s.text or "" for s in hang.stacks}
    assert RANK_1_WAITS in by_rank[1]
    assert RANK_0_WAITS in by_rank[0]


def test_ranks_that_call_different_collectives_are_named_as_a_mismatch(
    workdir: Path, gpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named by the supervisor itself once every rank has been silent a while (on busy
    GPUs, or none: their recorders, not the GPUs' idleness, say they are stuck)."""
    monkeypatch.setenv("AIR_HINT_STALLED_AFTER", "3")
    Scenario(gpus=[FakeGpu(util=100), FakeGpu(util=100)]).write(gpus)
    (workdir / "train.py").write_text(MISMATCHED)
    job_id = start(workdir)
    mismatch = (
        "ranks disagree at collective #1: rank 0 in all_reduce "
        "(float32[2, 5], gloo); rank 1 in broadcast (int64[3], gloo)"
    )
    attempt_dir = JobStore(air_home()).attempt_dir(job_id, 1)
    try:

        def hang_hint() -> list[str]:
            return [h["text"] for h in read_hints(attempt_dir)["hints"] if h["kind"] == "hang"]

        assert until(hang_hint, "the hints name the mismatch", timeout=120) == [mismatch]
        (taken,) = [stacks.read(attempt_dir, name) for name in stacks.sets(attempt_dir)]
        assert taken is not None
        assert taken.reason.startswith("every rank silent for ")
        shown = air("stacks", job_id)
        assert shown.returncode == 0, shown.stderr
        assert f"Collectives: {mismatch}\n" in shown.stdout, shown.stdout
    finally:
        air("cancel", job_id)
    wait_settled(air_home(), job_id)
