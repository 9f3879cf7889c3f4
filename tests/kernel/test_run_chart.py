"""The cell's chart as data (``RunChart``): a panel per metric, the job's system metrics
below, a legend, sensible axes for a single point, and thinning that keeps spikes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_air.job_dir import JobDir
from jupyter_air.kernel.live_view import (
    FEW_SAMPLES_HEIGHT,
    MIN_SPAN_MS,
    SYSTEM_HEIGHT,
    RunChart,
    RunFeed,
    local_ms,
    min_max_buckets,
)
from jupyter_air.tracking.journal import Writer
from jupyter_air.tracking.metric_feed import Point

NOW = int(time.time() * 1000)


def chart_of(points: list[Point], gpus: list[int] | None = None) -> RunChart:
    chart = RunChart()
    chart.add(1, points, gpus)
    return chart


def test_each_metric_gets_a_titled_panel_and_every_trace_a_legend_entry() -> None:
    points = [Point(k, s, 1.0 / (s + 1), NOW + s) for s in range(5) for k in ("loss", "acc")]
    figure = chart_of(points).figure()
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["loss", "acc"]
    assert figure["layout"]["showlegend"] is True, "named traces, with a legend, even one"
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    assert titles == ["<b>loss</b>", "<b>acc</b>"]
    assert {t["xaxis"] for t in figure["data"]} == {"x4", "x5"}, "a panel each"


def test_without_system_metrics_no_empty_row_is_drawn() -> None:
    metrics_only = chart_of([Point("loss", s, 1.0, NOW) for s in range(3)]).layout()
    with_system = chart_of(
        [Point("loss", 0, 1.0, NOW), Point("system/cpu_utilization_percentage", 0, 5.0, NOW)]
    ).layout()
    assert not any(key in metrics_only for key in ("xaxis", "xaxis2", "xaxis3"))
    assert "xaxis3" in with_system
    assert metrics_only["height"] < with_system["height"]


def test_a_single_system_sample_gets_a_24_hour_axis_a_second_wide_and_a_marker() -> None:
    chart = chart_of([Point("system/gpu_0_utilization_percentage", 0, 40.0, NOW)], gpus=[0])
    figure = chart.figure()
    (trace,) = figure["data"]
    assert trace["name"] == "GPU 0 util %"
    assert "mode" not in trace, "plotly draws markers while a trace is short"
    axis = figure["layout"]["xaxis"]
    assert axis["tickformat"] == "%H:%M:%S"
    start, end = axis["range"]
    assert end == pytest.approx(local_ms(NOW), abs=MIN_SPAN_MS * 0.05), "not past the sample"
    assert end - start == pytest.approx(MIN_SPAN_MS, rel=0.05)


CPU = "system/cpu_utilization_percentage"


def test_a_half_second_jobs_cpu_runs_from_its_start_to_its_end_sample() -> None:
    """psutil's meaningless first 0 % is not drawn; the end sample's value (the CPU's mean
    since the start) is drawn from the job's start; the axis spans the job, labelled to
    the millisecond, and its row is low for so few points."""
    start = NOW - 500
    chart = RunChart(started=local_ms(start))
    chart.add(1, [Point(CPU, 0, 0.0, start + 10), Point(CPU, 1, 37.5, NOW)], None)
    (trace,) = chart.traces
    assert trace.x == [local_ms(start), local_ms(NOW)]
    assert trace.y == [37.5, 37.5]
    chart.ended = True
    layout = chart.layout()
    low, high = layout["xaxis3"]["range"]
    assert low == pytest.approx(local_ms(start) - 10), "from the job's start (2 % margin)"
    assert high == pytest.approx(local_ms(NOW) + 10), "to its end"
    stops = {s["value"]: s["dtickrange"] for s in layout["xaxis3"]["tickformatstops"]}
    assert stops["%H:%M:%S.%L"] == [None, 1000.0], "ticks under a second apart: to the ms"
    assert chart.summary() == "CPU %: mean 38 %, peak 38 %"
    (row,) = chart.live_layout()["rows"]
    assert row["height"] == FEW_SAMPLES_HEIGHT


def test_a_live_time_axis_starts_at_the_job_and_ends_at_its_last_sample() -> None:
    start = NOW - 120_000
    chart = RunChart(started=local_ms(start))
    samples = [Point(CPU, s, 50.0, start + 10_000 * (s + 1)) for s in range(6)]
    chart.add(1, samples, None)
    (row,) = chart.live_layout()["rows"]
    (panel,) = row["panels"]
    low, high = panel["x"]
    last = local_ms(samples[-1].timestamp)
    assert low < local_ms(start), "a marker at an end is drawn whole"
    assert high > last
    assert high - last < 0.05 * (last - local_ms(start)), "never a minute into the future"
    assert row["height"] == SYSTEM_HEIGHT, "full height for a real series"
    # A retry's first sample is its own: not drawn from the job's start.
    chart.add(2, [Point(CPU, 0, 20.0, NOW)], None)
    assert chart.traces[-1].x == [local_ms(NOW)]


def test_three_steps_get_an_axis_of_three_steps_a_tick_each_and_fifty_plotlys_own() -> None:
    axis = chart_of([Point("loss", s, 1.0, NOW) for s in range(3)]).layout()["xaxis4"]
    assert axis["range"] == [-0.5, 2.5], "not padded to ten steps"
    assert axis["dtick"] == 1
    assert axis["autorange"] is False
    axis = chart_of([Point("loss", s, 1.0, NOW) for s in range(50)]).layout()["xaxis4"]
    assert axis["autorange"] is True
    assert "dtick" not in axis
    assert "range" not in axis


def test_another_jobs_gpu_is_not_drawn_and_a_gpus_two_traces_share_a_color() -> None:
    points = [
        Point(f"system/gpu_{g}_{what}_percentage", 0, 10.0, NOW)
        for g in (0, 1)
        for what in ("utilization", "memory_usage")
    ]
    traces = chart_of(points, gpus=[1]).traces
    assert [t.name for t in traces] == ["GPU 1 util %", "GPU 1 memory %"]
    assert traces[0].color == traces[1].color
    assert traces[0].panel != traces[1].panel


def test_thinning_keeps_each_buckets_extremes_and_the_last_point() -> None:
    xs = [float(i) for i in range(1000)]
    ys = [0.0] * 1000
    ys[500] = 100.0  # a one-sample spike
    ys[501] = -5.0
    thin_x, thin_y = min_max_buckets(xs, ys, 50)
    assert len(thin_x) <= 2 * 50 + 1
    assert max(thin_y) == 100.0
    assert min(thin_y) == -5.0
    assert thin_x == sorted(thin_x)
    assert thin_x[-1] == 999.0


def test_a_resumed_retry_marks_its_restart_step_on_the_metric_panels_only() -> None:
    chart = RunChart()
    chart.add(1, [Point("loss", s, 1.0, NOW) for s in range(1, 6)], None)
    chart.restarts[2] = 5
    chart.add(2, [Point("loss", s, 0.5, NOW) for s in range(6, 9)], None)
    chart.add(2, [Point("system/cpu_utilization_percentage", 0, 5.0, NOW)], None)
    live = [p for row in chart.live_layout()["rows"] for p in row["panels"]]
    marks = {p["title"]: p["marks"] for p in live}
    assert marks == {
        "loss": [{"x": 5, "label": "attempt 2 resumed at step 5"}],
        "host CPU %": [],
    }
    layout = chart.figure()["layout"]
    ((line,),) = [layout["shapes"]]
    assert (line["xref"], line["x0"], line["x1"]) == ("x4", 5, 5)
    assert "attempt 2 resumed at step 5" in [a["text"] for a in layout["annotations"]]


def test_the_final_chart_is_the_jobs_not_a_sample_its_runs_tail_took_after_it(
    tmp_path: Path,
) -> None:
    """The run's tail samples the machine once more after a job too short to be sampled
    (the tail process is quick): that point may be there before the cell's last read,
    and is not the job's."""
    job = JobDir(tmp_path / "job")
    journal = Writer(job.attempt(1).make().metrics_journal)
    journal.append("run", {"loss": 0.5}, 0, timestamp=100.0)
    journal.append("run", {"system/cpu_utilization_percentage": 9.0}, 0, timestamp=101.0)
    journal.close()
    feed = RunFeed(f"sqlite:///{tmp_path}/none.db", 2.0, job)  # no store: the journal only
    feed.drain([(1, "run")], None, until=100.5)
    assert [trace.key for trace in feed.chart.traces] == ["loss"]
