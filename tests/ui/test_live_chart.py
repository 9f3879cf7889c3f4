"""The live chart's module (kernel/live_chart.js) in a bare page, without a lab: what it
draws of a long history, traces sampled at different times, the time axis, the legend
and a zoom. The kernel's side is a stand-in model that delivers its messages; the chart
library is the package's own copy of uPlot (the kernel sends the same)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.kernel.live_view import RunChart, _chart_library
from jupyter_air.tracking.metric_feed import Point

MODULE = Path(__file__).resolve().parents[2] / "jupyter_air" / "kernel" / "live_chart.js"
#: A page's chart: the module run against a stand-in widget model; ``window.chart``
#: delivers the kernel's messages (``send``) and changes its layout (``layout``).
SHOW = """async ([esm, library, layout]) => {
  const url = URL.createObjectURL(new Blob([esm], {type: 'text/javascript'}));
  const widget = (await import(url)).default;
  window.module = await import(url);
  const handlers = {};
  const state = {chart_id: String(Math.random()), chart_layout: layout, library: 'IPY_MODEL_x'};
  const model = {
    get: (k) => state[k], on: (e, f) => { handlers[e] = f; }, send: () => {},
    widget_manager: {get_model: async () => ({get: (k) => library[k]})},
  };
  widget.initialize({model});
  const el = document.createElement('div');
  el.style.width = '900px';
  document.body.replaceChildren(el);
  await widget.render({model, el});
  let revision = 0;
  window.chart = {
    send: (msg) => handlers['msg:custom']({...msg, revision: ++revision}),
    layout: (next) => { state.chart_layout = next; handlers['change:chart_layout'](); },
  };
}"""
#: Each panel's title -> its uPlot chart's x and its traces' points (name -> values).
DRAWN = """() => Object.fromEntries([...document.querySelectorAll('.jp-air-LiveChart-panel')]
  .map(p => [p.querySelector('.jp-air-LiveChart-title').textContent, {
    x: [...p.uplot.data[0]], width: p.uplot.bbox.width / devicePixelRatio,
    scale: [p.uplot.scales.x.min, p.uplot.scales.x.max],
    ticks: p.uplot.axes[0]._values,
    traces: Object.fromEntries(p.uplot.series.slice(1).map((s, i) =>
      [s.label, {y: [...p.uplot.data[i + 1]], show: s.show}])),
  }]))"""
NOON = 1_767_268_800_000  # 2026-01-01 12:00 UTC: the kernel's local noon, as plotly's axis


@pytest.fixture(scope="module")
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.console_lines = []
    page.on("pageerror", lambda err: page.console_lines.append(f"pageerror: {err}"))
    page.set_content("<html><body></body></html>")
    yield page
    assert page.console_lines == []
    page.close()


def show(page: Any, chart: RunChart) -> None:
    """A page's chart of ``chart``'s points so far, as the kernel's first message."""
    library = _chart_library()
    page.evaluate(
        SHOW,
        [
            MODULE.read_text(),
            {"version": library.version, "source": library.source, "css": library.css},
            chart.live_layout(),
        ],
    )
    page.evaluate(
        "(traces) => window.chart.send({type: 'add', traces})", [t.plotly() for t in chart.traces]
    )


def drawn(page: Any) -> dict[str, Any]:
    return dict(page.evaluate(DRAWN))


def test_a_long_history_is_drawn_at_a_point_per_pixel_and_keeps_its_spikes(page: Any) -> None:
    values = [1.0] * 10_000
    values[5_000] = 100.0  # a loss blow-up of one step
    values[7_000] = -50.0
    chart = RunChart()
    chart.add(1, [Point("loss", s, v, NOON + s) for s, v in enumerate(values)], None)
    show(page, chart)
    panel = drawn(page)["loss"]
    loss = panel["traces"]["loss"]["y"]
    assert len(loss) <= panel["width"] + 2, "no more points than the panel has pixels"
    assert max(loss) == 100.0, "each bucket keeps its extremes"
    assert min(loss) == -50.0
    assert panel["x"][-1] == 9_999, "and the last point"


def test_gpus_sampled_at_different_times_share_an_x_with_their_gaps_spanned(page: Any) -> None:
    chart = RunChart()
    points = [
        Point("system/node_0/gpu_0_utilization_percentage", 0, 10.0, NOON),
        Point("system/node_0/gpu_0_utilization_percentage", 1, 30.0, NOON + 10_000),
        Point("system/node_1/gpu_0_utilization_percentage", 0, 50.0, NOON + 5_000),
    ]
    chart.add(1, points, None)
    show(page, chart)
    panel = drawn(page)["GPU utilization %"]
    assert len(panel["x"]) == 3
    assert panel["traces"]["node 0 · GPU 0 util %"]["y"] == [10.0, None, 30.0]
    assert panel["traces"]["node 1 · GPU 0 util %"]["y"] == [None, 50.0, None]


def test_the_time_axis_shows_the_kernels_time_of_day_in_24_hours(page: Any) -> None:
    chart = RunChart()
    key = "system/cpu_utilization_percentage"
    chart.add(1, [Point(key, i, 50.0, NOON + i * 60_000) for i in range(120)], None)
    # ``_local_ms`` made the kernel's local 12:00 to 13:59 into these numbers.
    for trace in chart.traces:
        trace.x = [float(NOON + i * 60_000) for i in range(120)]
    show(page, chart)
    ticks = drawn(page)["host CPU %"]["ticks"]
    assert ticks
    assert all(len(t) == 5 for t in ticks), f"hours and minutes: {ticks}"
    assert all(t[2] == ":" for t in ticks), ticks
    assert "13:00" in ticks, "a 24-hour clock, the kernel's noon at 12:00"


def test_a_legend_click_hides_a_gpus_two_traces_and_a_second_shows_them(page: Any) -> None:
    chart = RunChart()
    for what in ("utilization", "memory_usage"):
        key = f"system/gpu_0_{what}_percentage"
        chart.add(1, [Point(key, i, 40.0, NOON + i * 1000) for i in range(90)], None)
    show(page, chart)
    page.click('.jp-air-LiveChart-legendItem[data-group="GPU 0"]')
    panels = drawn(page)
    assert panels["GPU utilization %"]["traces"]["GPU 0 util %"]["show"] is False
    assert panels["GPU memory %"]["traces"]["GPU 0 memory %"]["show"] is False
    page.click('.jp-air-LiveChart-legendItem[data-group="GPU 0"]')
    assert drawn(page)["GPU memory %"]["traces"]["GPU 0 memory %"]["show"] is True


def test_a_zoom_is_kept_through_updates_until_a_double_click(page: Any) -> None:
    chart = RunChart()
    chart.add(1, [Point("loss", s, 1 / (s + 1), NOON + s) for s in range(1000)], None)
    show(page, chart)
    page.evaluate(
        "() => document.querySelector('.jp-air-LiveChart-panel').uplot"
        ".setScale('x', {min: 100, max: 200})"
    )
    page.wait_for_timeout(50)
    page.evaluate(
        "() => window.chart.send({type: 'extend', indices: [0], x: [[1000]], y: [[0.5]]})"
    )
    panel = drawn(page)["loss"]
    assert panel["scale"] == [100, 200], "the update kept the zoom"
    inside = [x for x in panel["x"] if 100 <= x <= 200]
    assert len(inside) == 101, "cut anew for the zoomed span: every step of it"
    page.dblclick(".jp-air-LiveChart-panel .u-over")
    page.wait_for_timeout(50)
    assert drawn(page)["loss"]["scale"] == [0, 1000], "the whole history again"


def test_a_half_second_jobs_host_cpu_is_a_low_row_from_its_start_to_its_end(
    page: Any, tmp_path: Path
) -> None:
    """psutil's first 0 % is not drawn; the end sample is drawn from the job's start; the
    axis neither starts before the job nor runs into the future; two points get a low row."""
    chart = RunChart(started=float(NOON))
    key = "system/cpu_utilization_percentage"
    chart.add(1, [Point(key, 0, 0.0, NOON + 5), Point(key, 1, 42.0, NOON + 500)], None)
    for trace in chart.traces:  # as ``local_ms`` made them, in the kernel's time of day
        trace.x = [float(NOON), float(NOON + 500)]
    show(page, chart)
    panel = drawn(page)["host CPU %"]
    assert panel["x"] == [NOON, NOON + 500]
    assert panel["traces"]["CPU %"]["y"] == [42.0, 42.0]
    low, high = panel["scale"]
    assert NOON - 20 < low < NOON, "from the job's start (and half its first marker)"
    assert NOON + 500 < high < NOON + 520, "to its last sample: not a minute into the future"
    height = page.evaluate(
        "() => document.querySelector('.jp-air-LiveChart-panel').uplot.bbox.height"
        " / devicePixelRatio"
    )
    assert height < 100, f"a low row for two points: {height} px"
    ticks = panel["ticks"]
    assert "12:00:00.200" in ticks, f"ticks to the millisecond: {ticks}"
    page.screenshot(path=str(tmp_path / "half-second-job.png"))


def test_a_time_panels_zoom_is_kept_though_its_axis_is_fixed(page: Any) -> None:
    """A time panel's axis is fixed (the job's start to its last sample): a drag still
    zooms it, and a double click shows the whole job again."""
    chart = RunChart(started=float(NOON))
    key = "system/cpu_utilization_percentage"
    times = [NOON + (i + 1) * 10_000 for i in range(120)]
    chart.add(1, [Point(key, i, 50.0, t) for i, t in enumerate(times)], None)
    for trace in chart.traces:  # as ``local_ms`` made them, in the kernel's time of day
        trace.x = [float(NOON), *map(float, times)]
    show(page, chart)
    (whole,) = [panel["x"] for panel in chart.live_layout()["rows"][0]["panels"]]
    assert drawn(page)["host CPU %"]["scale"] == whole
    page.evaluate(
        "([min, max]) => document.querySelector('.jp-air-LiveChart-panel').uplot"
        ".setScale('x', {min, max})",
        [NOON + 100_000, NOON + 200_000],
    )
    page.wait_for_timeout(50)
    assert drawn(page)["host CPU %"]["scale"] == [NOON + 100_000, NOON + 200_000]
    page.dblclick(".jp-air-LiveChart-panel .u-over")
    page.wait_for_timeout(50)
    assert drawn(page)["host CPU %"]["scale"] == whole
