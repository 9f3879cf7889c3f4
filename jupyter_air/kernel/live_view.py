"""The chart of a distributed call's run, live in the cell while the job runs.

Rank 0's metrics (a panel each, against the step), the job's own GPUs (utilization and
memory, per node on Ray) and its host's CPU, from the run's system metrics, with a
legend; a retry's traces are new, dotted and named by attempt, and where a retry resumed
from a checkpoint its metric panels mark the step it restarted at (its traces go on from
there, as one curve). ``RunChart`` is the
data (no widgets); ``ChartWidget`` draws it live with uPlot in any frontend with
widgets, sent only new points; when the job ends, and where there are no widgets
(nbclient, nbconvert, a notebook opened later), the cell keeps a static plotly figure
and a text summary.

Why a widget of our own rather than plotly's ``FigureWidget``: its updates resend
every trace's whole arrays, where this one sends the new points; the page keeps them
and draws at most one point per pixel of each panel (live_chart.js). Why uPlot for
the live chart and plotly for the saved one: plotly lays out and draws its whole
figure, every axis and tick label, on any change of data; for the live chart's four
panels that alone took about as long as the 30 ms an update may take, with two points
a trace (docs/benchmarks.md, "issue 18 (third day)"). uPlot draws lines on a canvas
and its axes without laying out a document. The saved figure is drawn once, by the
frontend's own plotly renderer, with plotly's legend, hover and export.
"""

from __future__ import annotations

import hashlib
import html
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from IPython.display import DisplayHandle, display
from traitlets import Enum, Float
from traitlets.config import Configurable

from ..job_dir import JobDir
from ..tracking.metric_feed import MetricFeed, Point, metric_feed

PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: Points per trace at most in the final, saved chart.
STATIC_POINTS = 2000
#: Run system metrics drawn: the GPUs' utilization and memory, the host's CPU.
SYSTEM = re.compile(
    r"system/(?:node_(?P<node>\d+)/)?"
    r"(?:gpu_(?P<gpu>\d+)_(?P<gpu_metric>utilization|memory_usage)_percentage"
    r"|(?P<cpu>cpu_utilization_percentage))"
)


class LiveView(Configurable):
    """How a distributed cell shows its run while it runs (``c.LiveView.*`` in the
    IPython configuration, or ``%config LiveView.interval = 5``)."""

    interval = Float(
        2.0,
        min=0.5,
        help="Seconds between two updates of a cell's live chart: the kernel reads the "
        "run's new metric points, and sends them, at most this often.",
    ).tag(config=True)
    mode = Enum(
        ["auto", "widget", "static"],
        "auto",
        help="widget: a live ipywidgets chart; static: links, status and the final chart "
        "only; auto: widget when the frontend renders widgets (a kernel started by a "
        "Jupyter server or by VS Code, with ipywidgets and anywidget installed).",
    ).tag(config=True)


def live_view_config() -> LiveView:
    """The kernel's ``LiveView`` configuration (defaults outside IPython)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return LiveView()
    for configurable in shell.configurables:
        if isinstance(configurable, LiveView):
            return configurable
    view = LiveView(parent=shell)
    shell.configurables.append(view)
    return view


def widgets_available(config: LiveView, environ: dict[str, str] | None = None) -> bool:
    """Whether a widget shown now will be drawn: an ipykernel started by a running
    Jupyter server (JupyterLab, Notebook 7: their ``JPY_PARENT_PID``) or by VS Code,
    with the widget libraries here. nbclient and nbconvert start kernels themselves, so
    they get the static outputs; ``c.LiveView.mode`` decides where this guesses wrong."""
    if config.mode != "auto":
        return config.mode == "widget"
    from ..tracking.ui_links import current_jupyter_server

    env = os.environ if environ is None else environ
    if not env.get("VSCODE_PID"):
        parent = env.get("JPY_PARENT_PID")
        server = current_jupyter_server(env) if parent else None  # no file read otherwise
        if server is None or str(server.pid) != parent:
            return False
    from IPython import get_ipython

    if getattr(get_ipython(), "kernel", None) is None:
        return False
    try:
        import anywidget  # noqa: F401
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


#: Colors of the series (plotly's own palette): a GPU's utilization and memory share one.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
#: Pixel sizes of the chart: a panel's plot area, the space under it for its ticks and
#: the next panel's title, a legend line.
METRIC_HEIGHT = 170
SYSTEM_HEIGHT = 150
#: The system panels' height while their traces have ``FEW_SAMPLES`` samples at most (a
#: short job): two points are not worth half the chart.
FEW_SAMPLES_HEIGHT = 70
FEW_SAMPLES = 3
TITLE_HEIGHT = 50
LEGEND_LINE = 22
LEGEND_PER_LINE = 6
MARGIN = {"l": 55, "r": 20, "t": 50, "b": 40}  # t: plotly's toolbar above the titles
#: Metric panels side by side at most.
COLUMNS = 3
#: A system panel's x axis runs from the job's start to its last sample, never into the
#: future, with a margin of this share of the span each side, so that a marker at an end
#: is drawn whole; a single sample with no start known gets the second before it.
END_MARGIN = 0.02
MIN_SPAN_MS = 1_000.0
#: Its tick labels: to the millisecond where ticks are less than a second apart (a
#: sub-second job), else to the second.
TIME_TICKS = [
    {"dtickrange": [None, MIN_SPAN_MS], "value": "%H:%M:%S.%L"},
    {"dtickrange": [MIN_SPAN_MS, None], "value": "%H:%M:%S"},
]
#: Below this span of steps, a metric panel shows just its steps, a tick each (plotly's
#: own ticks would be fractional steps).
FEW_STEPS = 10.0


@dataclass(frozen=True)
class Panel:
    """One subplot: its plotly axis number and its title."""

    axis: int
    title: str

    @property
    def system(self) -> bool:
        return self.axis <= len(SYSTEM_PANELS)


#: The system panels, in their order on the chart's last row (axes 1 to 3).
SYSTEM_PANELS = {
    "utilization": Panel(1, "GPU utilization %"),
    "memory_usage": Panel(2, "GPU memory %"),
    "cpu": Panel(3, "host CPU %"),
}
CPU_AXIS = SYSTEM_PANELS["cpu"].axis


#: The restart marks' color: neither a trace's nor the axes'.
MARK_COLOR = "#888888"


@dataclass
class Trace:
    key: str  # the MLflow metric
    attempt: int
    name: str
    panel: Panel
    series: str  # what the color and legend group follow: a metric, a GPU, the CPU
    color: str
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    #: Points at the front that are no sample: the job's start, drawn at the first CPU
    #: sample's value (see ``RunChart.add``).
    lead: int = 0

    @property
    def metric(self) -> bool:
        return not self.panel.system

    def plotly(self) -> dict[str, Any]:
        """No ``mode``: plotly draws markers while a trace has fewer than 20 points, so a
        single point shows, and lines after."""
        suffix = "" if self.panel.axis == 1 else str(self.panel.axis)
        return {
            "type": "scatter",
            "name": self.name,
            "x": list(self.x),
            "y": list(self.y),
            "xaxis": f"x{suffix}",
            "yaxis": f"y{suffix}",
            "legendgroup": self.series,
            "line": {"color": self.color, "dash": "solid" if self.attempt == 1 else "dot"},
            "marker": {"size": 5},
            "meta": {"key": self.key, "attempt": self.attempt, "metric": self.metric},
        }


@dataclass
class Update:
    """What changed in one read: traces to add, then new points of existing traces."""

    added: list[Trace] = field(default_factory=list)
    extended: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.extended)


class RunChart:
    """The chart's traces, grown from metric points one attempt at a time: a panel per
    metric of rank 0 (against its step), then the job's GPUs' utilization and memory and
    the host's CPU (against the time of day)."""

    def __init__(self, started: float | None = None) -> None:
        self.traces: list[Trace] = []
        #: When the job (a session's cell) started, in the time axes' milliseconds
        #: (``local_ms``): where they begin.
        self.started = started
        #: The job is over: its time axes end at its last sample.
        self.ended = False
        self._index: dict[tuple[int, str], int] = {}
        self._panels: dict[str, Panel] = {}  # metric key -> its panel
        self._series: dict[str, str] = {}  # series -> color
        #: attempt -> the step its checkpoint was saved at, for a retry that resumed.
        self.restarts: dict[int, int] = {}

    def marks(self) -> list[dict[str, Any]]:
        """Where each resumed attempt restarted, on the metric panels' step axis."""
        return [
            {"x": step, "label": f"attempt {attempt} resumed at step {step}"}
            for attempt, step in sorted(self.restarts.items())
        ]

    def add(self, attempt: int, points: Iterable[Point], gpus: Sequence[int] | None) -> Update:
        """Take new points of an attempt's run; ``gpus`` are the NVML indices of the job's
        GPUs on a single machine (None: every GPU the run recorded, as on Ray's nodes).

        A host's CPU % is its mean since the sample before (psutil's ``cpu_percent``), so
        the first attempt's first CPU sample is drawn from the job's start on, at its
        value: a short job's chart has a point at its start and at its end. A first
        sample of exactly 0 % is psutil's first call on a thread, which has nothing to
        compare with: not drawn."""
        update = Update()
        for point in points:
            if math.isnan(point.value):
                continue
            key = (attempt, point.key)
            index = self._index.get(key)
            if index is None:
                if point.step == 0 and point.value == 0.0 and _host_cpu(point.key):
                    continue
                trace = self._trace(attempt, point.key, gpus)
                if trace is None:
                    continue
                index = self._index[key] = len(self.traces)
                self.traces.append(trace)
                update.added.append(trace)
                if trace.panel.axis == CPU_AXIS and attempt == 1:
                    self._lead(trace, point)
            trace = self.traces[index]
            x = float(point.step) if trace.metric else local_ms(point.timestamp)
            trace.x.append(x)
            trace.y.append(point.value)
            if trace not in update.added:
                xs, ys = update.extended.setdefault(index, ([], []))
                xs.append(x)
                ys.append(point.value)
        return update

    def _lead(self, trace: Trace, first: Point) -> None:
        """The job's start as the first point of a CPU trace, at its first sample's value
        (the CPU's mean since then), where the job is known to start before it."""
        started = self.started
        if started is not None and started < local_ms(first.timestamp):
            trace.x.append(started)
            trace.y.append(first.value)
            trace.lead = 1

    def _trace(self, attempt: int, key: str, gpus: Sequence[int] | None) -> Trace | None:
        drawn = _drawn(key, gpus)
        if drawn is None:
            return None
        name, series, system = drawn
        if system is not None:
            panel = SYSTEM_PANELS[system]
        else:
            panel = self._panels.setdefault(
                key, Panel(len(SYSTEM_PANELS) + 1 + len(self._panels), key)
            )
        color = self._series.setdefault(series, PALETTE[len(self._series) % len(PALETTE)])
        label = name if attempt == 1 else f"{name} (attempt {attempt})"
        return Trace(key, attempt, label, panel, series, color)

    def _rows(self) -> list[tuple[int, list[Panel]]]:
        """(plot height, panels) of each row: the metrics' panels in rows of up to three,
        the system panels in the last row."""
        metric_panels = sorted(self._panels.values(), key=lambda p: p.axis)
        system_panels = sorted(
            {t.panel for t in self.traces if t.panel.system}, key=lambda p: p.axis
        )
        rows = [
            (METRIC_HEIGHT, metric_panels[i : i + COLUMNS])
            for i in range(0, len(metric_panels), COLUMNS)
        ]
        if system_panels:
            samples = max(len(t.x) - t.lead for t in self.traces if t.panel.system)
            height = FEW_SAMPLES_HEIGHT if samples <= FEW_SAMPLES else SYSTEM_HEIGHT
            rows.append((height, system_panels))
        return rows

    def layout(self) -> dict[str, Any]:
        """The saved figure's plotly layout: metric panels in rows of up to three, the
        system panels in the last row, each titled; plotly's legend of every trace under
        them. Its size follows what is drawn, so an empty row never leaves a blank."""
        rows = self._rows()
        plot_height = sum(TITLE_HEIGHT + height for height, _ in rows) - TITLE_HEIGHT
        legend_lines = math.ceil(len(self.traces) / LEGEND_PER_LINE)
        margin = {**MARGIN, "b": MARGIN["b"] + LEGEND_LINE * legend_lines}
        layout: dict[str, Any] = {
            "height": max(plot_height, METRIC_HEIGHT) + margin["t"] + margin["b"],
            "margin": margin,
            "showlegend": bool(self.traces),
            "legend": {"orientation": "h", "x": 0, "xanchor": "left", "yanchor": "top"},
            "hovermode": "closest",
            "annotations": [],
        }
        if not rows:
            return layout
        layout["legend"]["y"] = -MARGIN["b"] / plot_height
        top = plot_height
        for height, panels in rows:
            for column, panel in enumerate(panels):
                x0 = column / len(panels) + (0.04 if column else 0.0)
                x1 = (column + 1) / len(panels) - (0.04 if column < len(panels) - 1 else 0.0)
                y0, y1 = (top - height) / plot_height, top / plot_height
                layout.update(self._axes(panel, (x0, x1), (y0, y1)))
                layout["annotations"].append(
                    {
                        "text": f"<b>{html.escape(panel.title)}</b>",
                        "x": x0, "y": y1, "xref": "paper", "yref": "paper",
                        "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                    }
                )  # fmt: skip
                if not panel.system:
                    self._mark(layout, panel, (y0, y1))
            top -= height + TITLE_HEIGHT
        return layout

    def _mark(self, layout: dict[str, Any], panel: Panel, y: tuple[float, float]) -> None:
        """A dashed line at each resumed attempt's restart step, labelled at its top."""
        suffix = "" if panel.axis == 1 else str(panel.axis)
        for mark in self.marks():
            layout.setdefault("shapes", []).append(
                {
                    "type": "line", "xref": f"x{suffix}", "yref": "paper",
                    "x0": mark["x"], "x1": mark["x"], "y0": y[0], "y1": y[1],
                    "line": {"color": MARK_COLOR, "width": 1, "dash": "dash"},
                }
            )  # fmt: skip
            layout["annotations"].append(
                {
                    "text": html.escape(mark["label"]), "x": mark["x"], "y": y[1],
                    "xref": f"x{suffix}", "yref": "paper", "xanchor": "left",
                    "yanchor": "top", "showarrow": False,
                    "font": {"size": 10, "color": MARK_COLOR},
                }
            )  # fmt: skip

    def _axes(self, panel: Panel, x: tuple[float, float], y: tuple[float, float]) -> dict[str, Any]:
        suffix = "" if panel.axis == 1 else str(panel.axis)
        # Fixed margins (no ``automargin``) and tick labels not checked against the
        # figure's edges (``ticklabeloverflow``): measuring tick labels makes plotly lay
        # the figure out twice.
        unchecked = {"ticklabeloverflow": "allow"}
        xaxis: dict[str, Any] = {"domain": list(x), "anchor": f"y{suffix}", **unchecked}
        yaxis: dict[str, Any] = {"domain": list(y), "anchor": f"x{suffix}", **unchecked}
        x_range, y_range = self._ranges(panel)
        xaxis["autorange"] = x_range is None
        if x_range is not None:
            xaxis["range"] = x_range
        if y_range is not None:
            yaxis["range"] = y_range
        if panel.system:
            xaxis.update(
                type="date",
                tickformat="%H:%M:%S",
                tickformatstops=TIME_TICKS,
                hoverformat="%H:%M:%S.%L",
            )
        else:
            xaxis.update(tickformat="d", hoverformat="d")
            if x_range is not None:  # a tick per step
                xaxis.update(dtick=1, zeroline=False)
        return {f"xaxis{suffix}": xaxis, f"yaxis{suffix}": yaxis}

    def _ranges(self, panel: Panel) -> tuple[list[float] | None, list[float] | None]:
        """A panel's fixed x and y ranges (None: the data's): a system panel shows 0 to
        105 % from the job's start to its last sample; a metric panel of a few steps just
        its steps, half a step either side (plotly's own ticks would be fractional steps)."""
        xs = [v for t in self.traces if t.panel == panel for v in (t.x[0], t.x[-1]) if t.x]
        if panel.system:
            if not xs:
                return None, [0, 105]
            start = min(xs) if self.started is None else min(self.started, *xs)
            end = max(xs)
            if end == start:  # a single sample, no start known: the second before it
                start = end - MIN_SPAN_MS
            margin = (end - start) * END_MARGIN
            return [start - margin, end + margin], [0, 105]
        if xs and max(xs) - min(xs) < FEW_STEPS:
            return [min(xs) - 0.5, max(xs) + 0.5], None
        return None, None

    def live_layout(self) -> dict[str, Any]:
        """The live chart's panels (live_chart.js): rows of panels as in ``layout``, each
        with its title, plot height, x kind (the time of day or steps) and fixed ranges."""
        rows = []
        for height, panels in self._rows():
            specs = []
            for panel in panels:
                x, y = self._ranges(panel)
                spec = {"axis": panel.axis, "title": panel.title, "time": panel.system}
                marks = [] if panel.system else self.marks()
                specs.append({**spec, "x": x, "y": y, "marks": marks})
            rows.append({"height": height, "panels": specs})
        return {"rows": rows}

    def figure(self, max_points: int | None = None) -> dict[str, Any]:
        """The whole chart as a static plotly figure (JSON), each trace thinned to at most
        about ``max_points`` points, the minimum and maximum of each of ``max_points / 2``
        buckets, so that a notebook stays small and spikes stay visible."""
        data = [t.plotly() for t in self.traces]
        for trace in data:
            if max_points and len(trace["x"]) > max_points:
                trace["x"], trace["y"] = min_max_buckets(trace["x"], trace["y"], max_points // 2)
        return {"data": data, "layout": self.layout()}

    def summary(self) -> str:
        """Last value, minimum and steps per metric of the last attempt; mean and peak
        of each system trace (a chart with traces only)."""
        last = max(t.attempt for t in self.traces)
        lines = []
        for trace in (t for t in self.traces if t.attempt == last):
            if trace.metric:
                low = min(range(len(trace.y)), key=trace.y.__getitem__)
                lines.append(
                    f"{trace.name}: last {trace.y[-1]:.6g} (step {trace.x[-1]:.0f}), "
                    f"min {trace.y[low]:.6g} (step {trace.x[low]:.0f}), "
                    f"{len(trace.y):,} steps"
                )
            else:
                samples = trace.y[trace.lead :]
                mean = sum(samples) / len(samples)
                lines.append(f"{trace.name}: mean {mean:.0f} %, peak {max(samples):.0f} %")
        return "\n".join(lines)


def min_max_buckets(
    xs: Sequence[float], ys: Sequence[float], buckets: int
) -> tuple[list[float], list[float]]:
    """The lowest and the highest point of each of ``buckets`` equal spans of x, in x
    order, and the last point: a line drawn through them has the same extremes (a spike,
    a GPU at 0 %) as the whole series. live_chart.js does the same per pixel."""
    lo, hi = min(xs), max(xs)
    width = (hi - lo) / buckets or 1.0
    keep: list[int] = []
    bucket, low, high = None, 0, 0
    for i, x in enumerate(xs):
        b = int((x - lo) / width)
        if b != bucket:
            if bucket is not None:
                keep += sorted({low, high})
            bucket, low, high = b, i, i
        elif ys[i] < ys[low]:
            low = i
        elif ys[i] > ys[high]:
            high = i
    keep += sorted({low, high})
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def local_ms(timestamp_ms: float) -> float:
    """An MLflow timestamp as the kernel's local time of day on plotly's date axis (which
    shows its numbers as UTC)."""
    return float(timestamp_ms + 1000 * time.localtime(timestamp_ms / 1000).tm_gmtoff)


def _host_cpu(key: str) -> bool:
    match = SYSTEM.fullmatch(key)
    return match is not None and bool(match["cpu"])


def _drawn(key: str, gpus: Sequence[int] | None) -> tuple[str, str, str | None] | None:
    """The trace name, series and system panel (None: a metric's own panel) of a metric,
    or None for the system metrics not drawn."""
    if key.startswith("perf/"):
        return None  # the job's speed (perf.progress): in the status line, not a panel
    if not key.startswith("system/"):
        return key, key, None
    match = SYSTEM.fullmatch(key)
    if match is None:
        return None
    node = f"node {match['node']} · " if match["node"] is not None else ""
    if match["cpu"]:
        return f"{node}CPU %", f"{node}CPU", "cpu"
    gpu = int(match["gpu"])
    if match["node"] is None and gpus is not None and gpu not in gpus:
        return None  # another job's or nobody's GPU on this machine
    what = "util" if match["gpu_metric"] == "utilization" else "memory"
    return f"{node}GPU {gpu} {what} %", f"{node}GPU {gpu}", match["gpu_metric"]


class RunFeed:
    """The chart's points, read at most every ``interval`` seconds, attempt by attempt:
    rank 0's from the attempt's metrics journal in ``job``, the rest from the store."""

    def __init__(self, tracking_uri: str, interval: float, job: JobDir) -> None:
        self.chart = RunChart()
        self.interval = interval
        self._tracking_uri = tracking_uri
        self._job = job
        self._feeds: dict[int, MetricFeed] = {}
        self._last = -math.inf
        self.points_read = 0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def read(
        self,
        attempts: Sequence[tuple[int, str]],
        gpus: Sequence[int] | None,
        until: float | None = None,
    ) -> Update:
        """New points of each attempt's run (attempt number, run id); with ``until``
        (Unix time), none taken after it."""
        self._last = time.monotonic()
        update = Update()
        self.points_read = 0
        for attempt, run_id in attempts:
            feed = self._feeds.get(attempt)
            if feed is None:
                files = self._job.attempt(attempt)
                feed = self._feeds[attempt] = metric_feed(
                    self._tracking_uri, run_id, files.metrics_journal
                )
                resumed = files.read_resumed()
                if resumed is not None and resumed[1] is not None:
                    self.chart.restarts[attempt] = resumed[1]
            points = feed.poll()
            self.points_read += len(points)
            if until is not None:
                points = [p for p in points if p.timestamp <= until * 1000]
            step = self.chart.add(attempt, points, gpus)
            update.added += step.added
            update.extended.update(step.extended)  # indices of the whole chart
        return update

    def drain(
        self,
        attempts: Sequence[tuple[int, str]],
        gpus: Sequence[int] | None,
        until: float | None = None,
    ) -> Update:
        """Every point not read yet (a poll's rows are bounded: read until none is left)."""
        update = self.read(attempts, gpus, until)
        while self.points_read:
            more = self.read(attempts, gpus, until)
            update.added += more.added
            for index, (xs, ys) in more.extended.items():
                old = update.extended.setdefault(index, ([], []))
                old[0].extend(xs)
                old[1].extend(ys)
        return update

    def close(self) -> None:
        for feed in self._feeds.values():
            feed.close()


#: uPlot (MIT), copied from the npm package into the Python package by the front-end
#: build (package.json's ``build:uplot``).
UPLOT = Path(__file__).with_name("vendor")


@cache
def _chart_library() -> Any:
    """uPlot as a widget model of its own, made once per kernel: every chart widget
    refers to it, and a page evaluates it once (live_chart.js keeps it by version), where
    in each chart's module it would cross the wire, and be parsed, once per cell. A plain
    ipywidgets model (no view, no module of its own), so that no anywidget timer runs
    while it arrives."""
    import ipywidgets
    import traitlets

    class ChartLibrary(ipywidgets.Widget):  # type: ignore[misc]
        version = traitlets.Unicode().tag(sync=True)
        source = traitlets.Unicode().tag(sync=True)
        css = traitlets.Unicode().tag(sync=True)

    try:
        source = (UPLOT / "uPlot.iife.min.js").read_text(encoding="utf-8")
        css = (UPLOT / "uPlot.min.css").read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"{error.filename} is missing: the front-end build (`npm run build`) copies "
            "uPlot there from node_modules"
        ) from error
    version = hashlib.sha256(source.encode()).hexdigest()[:16]
    return ChartLibrary(version=version, source=source, css=css)


@cache
def _chart_widget_class() -> Any:
    import anywidget
    import traitlets
    from ipywidgets import Widget, widget_serialization

    class ChartWidget(anywidget.AnyWidget):
        """Sends a ``RunChart``'s new points as numbered messages, and all of them to a
        page that asks (``{"type": "history"}``): a page drops the messages that come
        before its module has loaded (on a busy machine, seconds), and a page that gets
        the model later (another frontend's restore) has none of them."""

        _esm = traitlets.Unicode(
            Path(__file__).with_name("live_chart.js").read_text(encoding="utf-8")
        ).tag(sync=True)
        chart_id = traitlets.Unicode().tag(sync=True)
        chart_layout = traitlets.Dict().tag(sync=True)
        library = traitlets.Instance(Widget).tag(sync=True, **widget_serialization)

        def __init__(self, chart: RunChart, **kwargs: Any) -> None:
            super().__init__(chart_layout=chart.live_layout(), **kwargs)
            self.chart = chart
            self.revision = 0  # messages of points sent
            # A history request may be answered on a subshell's thread (JupyterLab sends
            # widget messages over kernel subshells) while the cell's
            # thread reads and sends new points: one at a time.
            self._lock = threading.Lock()
            self.on_msg(self._answer)

        def follow(self, read: Callable[[], Update]) -> None:
            """Read new points into the chart (``read``) and send them: together, so that
            a history is never sent between a read and its send."""
            with self._lock:
                update = read()
                if update.added:
                    self._numbered({"type": "add", "traces": [t.plotly() for t in update.added]})
                if update.extended:
                    indices = sorted(update.extended)
                    self._numbered(
                        {
                            "type": "extend",
                            "indices": indices,
                            "x": [update.extended[i][0] for i in indices],
                            "y": [update.extended[i][1] for i in indices],
                        }
                    )
                layout = self.chart.live_layout()
                if layout != self.chart_layout:
                    self.chart_layout = layout

        def _numbered(self, message: dict[str, Any]) -> None:
            self.revision += 1
            self.send({**message, "revision": self.revision})

        def _answer(self, _: Any, content: Any, buffers: Any) -> None:
            if isinstance(content, dict) and content.get("type") == "history":
                with self._lock:
                    traces = [t.plotly() for t in self.chart.traces]
                    self.send({"type": "history", "traces": traces, "revision": self.revision})

    return ChartWidget


def chart_widget(chart: RunChart) -> Any:
    """A live chart widget of ``chart`` (imports anywidget, so only where widgets are
    drawn)."""
    return _chart_widget_class()(chart, chart_id=uuid.uuid4().hex, library=_chart_library())


def hints_html(hints: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        f'<div class="jp-air-JobHint">⚠ {html.escape(str(h.get("text", "")))}</div>' for h in hints
    )


class Live:
    """The chart side of a job's cell output: a live widget view where widgets are drawn,
    and in every case the final chart left as static outputs."""

    def __init__(self, tracking_uri: str, job: JobDir) -> None:
        config = live_view_config()
        self.feed = RunFeed(tracking_uri, config.interval, job)
        # made as its job (or session cell) starts: where the chart's time axes begin
        self.feed.chart.started = local_ms(time.time() * 1000)
        self.widgets = widgets_available(config)
        self.handle: DisplayHandle | None = None
        self._final: DisplayHandle | None = None
        self._box: Any = None
        self._status: Any = None
        self._chart: Any = None
        self._settled = False

    def start(self, header_html: str, in_place_of: DisplayHandle | None = None) -> bool:
        """Show header, status and chart as one widget view, in place of the display
        ``in_place_of`` if given (a session cell's header and status, above its output);
        False where widgets are not drawn (the caller shows the header as HTML)."""
        if not self.widgets:
            return False
        import ipywidgets

        self._status = ipywidgets.HTML()
        self._chart = chart_widget(self.feed.chart)
        self._box = ipywidgets.VBox([ipywidgets.HTML(header_html), self._status, self._chart])
        if in_place_of is None:
            self.handle = display(self._box, display_id=True)
        else:
            in_place_of.update(self._box)
            self.handle = in_place_of
        self.reserve()
        return True

    def reserve(self) -> None:
        """The final chart's place, under header and status: empty until the end, and
        after it where nothing was logged (an empty text output takes no room)."""
        if self._final is None:
            self._final = display({"text/plain": ""}, raw=True, display_id=True)

    def widget_status(self, status_html: str) -> bool:
        if self._status is None:
            return False
        if self._status.value != status_html:
            self._status.value = status_html
        return True

    def tick(self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None) -> None:
        if self._chart is not None and self.feed.due():
            self._chart.follow(lambda: self.feed.read(attempts, gpus))

    def settle(
        self,
        attempts: Sequence[tuple[int, str]],
        gpus: Sequence[int] | None,
        ended: float | None = None,
    ) -> None:
        """The chart's last points, those taken by the job's end (``ended``, Unix time):
        not its run's tail's (a last system sample of a job that took none), which may
        land before the cell reads; the final chart is the job's."""
        if not self._settled:
            self.feed.drain(attempts, gpus, ended)
            self.feed.close()
            self._settled = True

    def finish(
        self,
        attempts: Sequence[tuple[int, str]],
        gpus: Sequence[int] | None,
        header_html: str,
        status: Mapping[str, str],
    ) -> None:
        self.settle(attempts, gpus)
        chart = self.feed.chart
        chart.ended = True
        if chart.traces:  # else nothing to show: the place kept for it stays empty
            summary = chart.summary()
            final: dict[str, Any] = {
                "text/plain": summary,
                "text/html": f'<pre class="jp-air-RunSummary">{html.escape(summary)}</pre>',
                PLOTLY_MIME: chart.figure(max_points=STATIC_POINTS),
            }
            if self._final is None:  # no place kept (a session cell without output)
                self._final = display(final, raw=True, display_id=True)
            else:
                self._final.update(final, raw=True)
        if self.handle is not None:  # the widget view leaves what a saved notebook shows
            self.handle.update(
                {
                    "text/plain": status.get("text/plain", ""),
                    "text/html": header_html + status.get("text/html", ""),
                },
                raw=True,
            )
            for widget in (*self._box.children, self._box):  # their layouts and styles too
                for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                    if part is not None:
                        part.close()
                widget.close()
            self._box = self._chart = self._status = None
