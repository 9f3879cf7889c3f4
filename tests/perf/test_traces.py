"""A profile's traces (issue 38, item 5), on real traces recorded here: two gloo ranks,
each profiled by the rank side (``perf.profiler``) through its step marks
(``Source.STEP``, as ``jupyter_air.step`` marks them), one of them
sleeping between its steps. The merged trace has a process per rank on one clock (a
host whose clock is off is put back by its collectives); the summary's split says the
sleeper idles and the other waits in the all-reduce; operators rank by self time.

These ranks share two cores with the rest of the suite: a rank's thread may wait
hundreds of milliseconds for a core anywhere in a step (seen: a collective's ends 177 ms
apart, idle 0.55 s in 3 steps of the rank that does not sleep). So what is asserted on
them holds whatever the load makes of their timing, and the clock estimate's accuracy is
specified on made-up traces whose noise is known."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.perf import profiles, traces
from jupyter_air.perf.traces import RankTrace

#: One rank of a 2-rank DDP job on the CPU that marks its own steps.
RANK = r"""
import os, sys, time
import torch, torch.distributed as dist
from jupyter_air.perf import marks, profiler

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method=sys.argv[1], rank=rank, world_size=2)
profiler.install()
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
answer = os.path.join(os.environ["AIR_PERF_DIR"], "profiles", sys.argv[2], f"rank-{rank}.done.json")
for step in range(2000):
    if rank == 1:
        time.sleep(0.3)  # outside any operator: idle (long beside a loaded machine's noise)
    model(torch.randn(64, 256)).sum().backward()
    opt.step()
    opt.zero_grad()
    marks.current().step(marks.Source.STEP, samples=64)
    if os.path.exists(answer) and step % 10 == 0:
        break
dist.destroy_process_group()
"""


def record(folder: Path, steps: int = 3) -> profiles.Profile:
    """Two ranks profiled by ``perf.profiler`` on request, as a job's would be."""
    perf = folder / "perf"
    perf.mkdir()
    asked = profiles.request(
        perf,
        steps=steps,
        ranks=2,
        by="me",
        job_id="20261206-000000-abcdef",
        attempt=1,
        run_id=None,
        tracking_uri=None,
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "AIR_PERF_DIR": str(perf), "RANK": str(rank)}
        env.pop("AIR_PERF", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK, f"tcp://127.0.0.1:{port}", asked.id],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return asked


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> profiles.Profile:
    return record(tmp_path_factory.mktemp("profile"))


@pytest.fixture
def ranks(recorded: profiles.Profile) -> list[RankTrace]:
    answers = recorded.answers()
    return [
        RankTrace(r, answers[r]["host"], traces.load(profiles.rank_trace(recorded.folder, r)))
        for r in (0, 1)
    ]


def test_every_rank_profiles_the_same_steps_then_turns_it_off(
    recorded: profiles.Profile,
) -> None:
    answers = recorded.answers()
    assert sorted(answers) == [0, 1]
    assert answers[0]["steps"] == answers[1]["steps"]
    first, last = answers[0]["steps"]
    assert last - first + 1 == 3
    assert recorded.state() is profiles.ProfileState.DONE
    for rank in (0, 1):
        trace = profiles.rank_trace(recorded.folder, rank)
        assert oct(trace.stat().st_mode & 0o777) == "0o600"
        steps = [
            e["name"] for e in traces.load(trace)["traceEvents"] if traces.STEP.match(e["name"])
        ]
        assert len(steps) == 3  # the warm-up step is not recorded


def test_the_merged_trace_has_a_process_per_rank_on_one_clock(
    ranks: list[RankTrace], tmp_path: Path
) -> None:
    merged = traces.merge(ranks)
    names = {
        e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"
    }
    assert sorted(names) == [0, 1]
    assert names[1].startswith(f"rank 1 ({ranks[1].host}, pid ")
    spans = [e for e in merged["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    assert min(e["ts"] for e in spans) == pytest.approx(0, abs=0.01)
    assert "one host" in merged["otherData"]["clocks"]
    # on one clock every all-reduce of one rank overlaps the same all-reduce of the other:
    # neither leaves it before the other has come
    talks = {r: _collective_spans(merged, r) for r in (0, 1)}
    assert talks[0]
    assert len(talks[0]) == len(talks[1])
    for (start0, end0), (start1, end1) in zip(talks[0], talks[1], strict=True):
        assert start0 <= end1
        assert start1 <= end0
    path = tmp_path / "merged.json.gz"
    traces.write_merged(merged, path)
    assert json.loads(gzip.decompress(path.read_bytes())) == merged


def test_a_host_whose_clock_is_off_is_put_back_by_its_collectives(
    ranks: list[RankTrace],
) -> None:
    """All of the skew comes off: what is left is the ranks' own disagreement, the same
    as when their host's clock is right (the accuracy: see the made-up traces below)."""
    skew_us = 250_000.0  # a quarter of a second off
    unskewed = [ranks[0], RankTrace(1, "other-host", ranks[1].doc)]
    right = traces.align(unskewed)
    doc = {**ranks[1].doc, "baseTimeNanoseconds": ranks[1].doc["baseTimeNanoseconds"] + 250e6}
    skewed = [ranks[0], RankTrace(1, "other-host", doc)]
    clocks = traces.align(skewed)
    assert clocks.shift_us[1] == pytest.approx(right.shift_us[1] - skew_us, abs=1)
    assert "other-host" in clocks.how
    put_back, as_if_right = traces.merge(skewed, clocks), traces.merge(unskewed, right)
    for rank in (0, 1):
        moved = [t for span in _collective_spans(put_back, rank) for t in span]
        assert moved == pytest.approx(
            [t for span in _collective_spans(as_if_right, rank) for t in span]
        )


def test_the_clock_estimate_is_the_typical_collective_and_not_a_late_one() -> None:
    """Made-up traces: another host 250 ms ahead; its collectives end within 0.4 ms of
    rank 0's, except two of seven where its thread waited 40 and 180 ms for a core."""
    jitter_us = [0.0, -200.0, 400.0 + 40_000, 0.0, 200.0, -400.0 + 180_000, 0.0]
    ends0 = [100_000.0 * k + 5_000 for k in range(7)]
    ends1 = [end + jitter for end, jitter in zip(ends0, jitter_us, strict=True)]
    host0 = _trace(0, "host-a", base_ns=1_000_000_000, ends=ends0)
    host1 = _trace(1, "host-b", base_ns=1_250_000_000, ends=ends1)
    clocks = traces.align([host0, host1])
    assert clocks.shift_us[1] == pytest.approx(-250_000, abs=400)
    assert "host-b -250." in clocks.how
    assert "(7 collectives)" in clocks.how


def test_collectives_pair_in_order_until_their_names_differ() -> None:
    host0 = _trace(0, "host-a", base_ns=0, ends=[1_000.0, 2_000.0, 3_000.0])
    odd = _trace(1, "host-b", base_ns=0, ends=[1_500.0, 2_500.0, 9_000.0])
    odd.doc["traceEvents"][2]["name"] = "gloo:broadcast"
    clocks = traces.align([host0, odd])
    assert clocks.shift_us[1] == pytest.approx(-500)
    assert "(2 collectives)" in clocks.how
    alone = RankTrace(1, "host-c", {"traceEvents": []})
    assert "host-c not shifted" in traces.align([host0, alone]).how


def test_the_split_says_who_idles_and_who_waits_in_the_all_reduce(
    ranks: list[RankTrace],
) -> None:
    summary = traces.summarize(ranks)
    doc = summary.to_json()
    for r in doc["ranks"]:
        assert r["steps"] == 3
        assert r["compute"] + r["comm"] + r["idle"] == pytest.approx(1.0, abs=0.002)
        assert r["step_s"] >= 0.03
        assert r["on_gpu"] is False
    sleeper, waiter = doc["ranks"][1], doc["ranks"][0]
    # 300 ms of sleep in each of its 3 steps, whatever the machine's load makes of the rest
    assert sleeper["idle_s"] > 0.6
    assert sleeper["idle_s"] > waiter["idle_s"] + 0.15
    assert waiter["comm"] > sleeper["comm"]  # rank 0 waits for rank 1 in the all-reduce
    text = summary.text()
    assert "compute / communication / idle" in text
    assert "Top operators by self time" in text


def test_operators_rank_by_self_time(ranks: list[RankTrace]) -> None:
    summary = traces.summarize(ranks, top=5)
    selfs = [o.self_s for o in summary.operators]
    assert len(selfs) == 5
    assert selfs == sorted(selfs, reverse=True)
    names = {o.name for o in traces.summarize(ranks, top=50).operators}
    assert "aten::addmm" in names
    assert not any(n.startswith("ProfilerStep#") for n in names)
    # self time is never more than the operator's own length
    total = sum(e["dur"] for r in ranks for e in r.spans() if e["name"] == "aten::addmm") / 1e6
    addmm = next(o for o in traces.summarize(ranks, top=50).operators if o.name == "aten::addmm")
    assert 0 < addmm.self_s <= total


def test_self_time_leaves_out_the_children() -> None:
    spans = [
        _span("parent", 0, 100),
        _span("child", 10, 30),
        _span("grandchild", 15, 5),
        _span("child", 50, 20),
    ]
    assert sorted(traces.self_times(spans)) == [
        ("child", 20e-6),
        ("child", 25e-6),
        ("grandchild", 5e-6),
        ("parent", 50e-6),
    ]


def test_finishing_keeps_the_merged_trace_and_summary_once(recorded: profiles.Profile) -> None:
    done = profiles.finish(recorded)
    assert done["ranks"] == [0, 1]
    assert done["artifacts"]["error"] == "the attempt has no MLflow run"
    merged = json.loads(gzip.decompress((recorded.folder / profiles.MERGED).read_bytes()))
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    assert (recorded.folder / profiles.SUMMARY_TEXT).read_text() == done["text"]
    assert profiles.finish(recorded) == done  # the second reads the first's


def test_a_trace_that_is_not_one_is_said(tmp_path: Path) -> None:
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"nothing": 1}')
    with pytest.raises(traces.BadTrace, match=r"rank-0\.json: no 'traceEvents'"):
        traces.load(bad)
    bad.write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(traces.BadTrace, match="not a readable trace"):
        traces.load(bad)


def _span(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(rank: int, host: str, base_ns: int, ends: list[float]) -> RankTrace:
    """A rank whose only events are 2 ms all-reduces ending at ``ends`` (µs of its clock)."""
    events = [
        {**_span("gloo:all_reduce", end - 2_000, 2_000), "pid": rank, "cat": "user_annotation"}
        for end in ends
    ]
    return RankTrace(rank, host, {"baseTimeNanoseconds": base_ns, "traceEvents": events})


def _collective_spans(merged: dict[str, Any], rank: int) -> list[tuple[float, float]]:
    return sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in merged["traceEvents"]
        if e.get("ph") == "X" and e["pid"] == rank and traces.ALIGNING.search(e["name"])
    )
