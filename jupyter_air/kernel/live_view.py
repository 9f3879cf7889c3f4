"""The chart of a distributed call's run, live in the cell while the job runs.

Rank 0's metrics (one trace per metric against its step), the job's own GPUs
(utilization and memory, per node on Ray) and its host's CPU, from the run's system
metrics; a retry's traces are new, dotted and named by attempt. ``RunChart`` is the
data (no widgets); ``ChartWidget`` draws it with plotly.js in any frontend with
widgets, sent only new points; where there are none (nbclient, nbconvert, a notebook
opened later) the cell keeps a static plotly figure and a text summary.

Why a widget of our own rather than plotly's ``FigureWidget``: its updates resend
every trace's whole arrays, where this one sends the new points (``extendTraces``).
"""

from __future__ import annotations

import html
import math
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from IPython.display import DisplayHandle, display
from traitlets import Enum, Float
from traitlets.config import Configurable

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
    server = current_jupyter_server(env)
    by_server = server is not None and str(server.pid) == env.get("JPY_PARENT_PID")
    if not (by_server or env.get("VSCODE_PID")):
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


@dataclass
class Trace:
    key: str  # the MLflow metric
    attempt: int
    name: str
    row: int  # 1: rank 0's metrics against steps; 2: system metrics against time
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    @property
    def metric(self) -> bool:
        return self.row == 1

    def plotly(self) -> dict[str, Any]:
        return {
            "type": "scatter",
            "mode": "lines",
            "name": self.name,
            "x": list(self.x),
            "y": list(self.y),
            "xaxis": "x" if self.row == 1 else "x2",
            "yaxis": "y" if self.row == 1 else "y2",
            "legendgroup": f"attempt {self.attempt}",
            "line": {"dash": "solid" if self.attempt == 1 else "dot"},
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
    """The chart's traces, grown from metric points one attempt at a time."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self._index: dict[tuple[int, str], int] = {}

    def add(self, attempt: int, points: Iterable[Point], gpus: Sequence[int] | None) -> Update:
        """Take new points of an attempt's run; ``gpus`` are the NVML indices of the job's
        GPUs on a single machine (None: every GPU the run recorded, as on Ray's nodes)."""
        update = Update()
        for point in points:
            drawn = _drawn(point, gpus)
            if drawn is None or math.isnan(point.value):
                continue
            name, row = drawn
            key = (attempt, point.key)
            index = self._index.get(key)
            if index is None:
                index = self._index[key] = len(self.traces)
                label = name if attempt == 1 else f"{name} (attempt {attempt})"
                trace = Trace(point.key, attempt, label, row)
                self.traces.append(trace)
                update.added.append(trace)
            trace = self.traces[index]
            x = float(point.step) if row == 1 else float(point.timestamp)  # a date axis: ms
            trace.x.append(x)
            trace.y.append(point.value)
            if trace not in update.added:
                xs, ys = update.extended.setdefault(index, ([], []))
                xs.append(x)
                ys.append(point.value)
        return update

    def layout(self) -> dict[str, Any]:
        return {
            "height": 460,
            "margin": {"l": 50, "r": 20, "t": 10, "b": 40},
            "legend": {"orientation": "h", "y": -0.15},
            "xaxis": {"anchor": "y"},
            "yaxis": {"domain": [0.5, 1.0], "title": {"text": "metrics by step"}},
            "xaxis2": {"type": "date", "anchor": "y2"},
            "yaxis2": {"domain": [0.0, 0.28], "title": {"text": "GPU, CPU %"}, "range": [0, 105]},
        }

    def figure(self, max_points: int | None = None) -> dict[str, Any]:
        """The whole chart as a static plotly figure (JSON), each trace thinned to about
        ``max_points`` evenly spaced points (its last one kept) so a notebook stays small."""
        data = [t.plotly() for t in self.traces]
        for trace in data:
            n = len(trace["x"])
            if max_points and n > max_points:
                stride = math.ceil(n / max_points)
                keep = [*range(0, n - 1, stride), n - 1]
                trace["x"] = [trace["x"][i] for i in keep]
                trace["y"] = [trace["y"][i] for i in keep]
        return {"data": data, "layout": self.layout()}

    def summary(self) -> str:
        """Last value, minimum and steps per metric of the last attempt; mean and peak
        of each system trace."""
        if not self.traces:
            return "no metrics were logged to the run"
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
                mean = sum(trace.y) / len(trace.y)
                lines.append(f"{trace.name}: mean {mean:.0f} %, peak {max(trace.y):.0f} %")
        return "\n".join(lines)


def _drawn(point: Point, gpus: Sequence[int] | None) -> tuple[str, int] | None:
    """The trace name and row of a metric, or None for the system metrics not drawn."""
    if not point.key.startswith("system/"):
        return point.key, 1
    match = SYSTEM.fullmatch(point.key)
    if match is None:
        return None
    node = f"node {match['node']} · " if match["node"] is not None else ""
    if match["cpu"]:
        return f"{node}CPU %", 2
    gpu = int(match["gpu"])
    if match["node"] is None and gpus is not None and gpu not in gpus:
        return None  # another job's or nobody's GPU on this machine
    what = "util" if match["gpu_metric"] == "utilization" else "memory"
    return f"{node}GPU {gpu} {what} %", 2


class RunFeed:
    """The chart's points, read at most every ``interval`` seconds, attempt by attempt."""

    def __init__(self, tracking_uri: str, interval: float) -> None:
        self.chart = RunChart()
        self.interval = interval
        self._tracking_uri = tracking_uri
        self._feeds: dict[int, MetricFeed] = {}
        self._last = -math.inf
        self.points_read = 0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def read(self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None) -> Update:
        """New points of each attempt's run (attempt number, run id)."""
        self._last = time.monotonic()
        update = Update()
        self.points_read = 0
        for attempt, run_id in attempts:
            feed = self._feeds.get(attempt)
            if feed is None:
                feed = self._feeds[attempt] = metric_feed(self._tracking_uri, run_id)
            points = feed.poll()
            self.points_read += len(points)
            step = self.chart.add(attempt, points, gpus)
            update.added += step.added
            update.extended.update(step.extended)  # indices of the whole chart
        return update

    def drain(self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None) -> Update:
        """Every point not read yet (a poll's rows are bounded: read until none is left)."""
        update = self.read(attempts, gpus)
        while self.points_read:
            more = self.read(attempts, gpus)
            update.added += more.added
            for index, (xs, ys) in more.extended.items():
                old = update.extended.setdefault(index, ([], []))
                old[0].extend(xs)
                old[1].extend(ys)
        return update

    def close(self) -> None:
        for feed in self._feeds.values():
            feed.close()


@cache
def _chart_module() -> str:
    """plotly.js (plotly's own copy) in a CommonJS shim, then our module."""
    import plotly

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    ours = Path(__file__).with_name("live_chart.js")
    return (
        "const module = { exports: {} };\nconst exports = module.exports;\n"
        + plotly_js.read_text(encoding="utf-8")
        + "\n"
        + ours.read_text(encoding="utf-8")
    )


def chart_widget(layout: dict[str, Any]) -> Any:
    """A live chart widget (imports anywidget, so only where widgets are drawn)."""
    import anywidget
    import traitlets

    class ChartWidget(anywidget.AnyWidget):
        _esm = traitlets.Unicode(_chart_module()).tag(sync=True)
        chart_id = traitlets.Unicode().tag(sync=True)
        figure_layout = traitlets.Dict().tag(sync=True)

        def push(self, update: Update) -> None:
            """Only what changed crosses the wire."""
            if update.added:
                self.send({"type": "add", "traces": [t.plotly() for t in update.added]})
            if update.extended:
                indices = sorted(update.extended)
                self.send(
                    {
                        "type": "extend",
                        "indices": indices,
                        "x": [update.extended[i][0] for i in indices],
                        "y": [update.extended[i][1] for i in indices],
                    }
                )

    return ChartWidget(chart_id=uuid.uuid4().hex, figure_layout=layout)


def hints_html(hints: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        f'<div class="jp-air-JobHint">⚠ {html.escape(str(h.get("text", "")))}</div>' for h in hints
    )


class Live:
    """The chart side of a job's cell output: a live widget view where widgets are drawn,
    and in every case the final chart left as static outputs."""

    def __init__(self, tracking_uri: str) -> None:
        config = live_view_config()
        self.feed = RunFeed(tracking_uri, config.interval)
        self.widgets = widgets_available(config)
        self.handle: DisplayHandle | None = None
        self._final: DisplayHandle | None = None
        self._box: Any = None
        self._status: Any = None
        self._chart: Any = None

    def start(self, header_html: str) -> bool:
        """Show header, status and chart as one widget view; False where widgets are not
        drawn (the caller shows the header as HTML)."""
        if not self.widgets:
            return False
        import ipywidgets

        self._status = ipywidgets.HTML()
        self._chart = chart_widget(self.feed.chart.layout())
        self._box = ipywidgets.VBox([ipywidgets.HTML(header_html), self._status, self._chart])
        self.handle = display(self._box, display_id=True)
        self.reserve()
        return True

    def reserve(self) -> None:
        """The final chart's place, under header and status (empty until the end)."""
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
            update = self.feed.read(attempts, gpus)
            if update:
                self._chart.push(update)

    def finish(
        self,
        attempts: Sequence[tuple[int, str]],
        gpus: Sequence[int] | None,
        header_html: str,
        status: Mapping[str, str],
    ) -> None:
        self.feed.drain(attempts, gpus)
        self.feed.close()
        chart = self.feed.chart
        summary = chart.summary()
        final: dict[str, Any] = {
            "text/plain": summary,
            "text/html": f'<pre class="jp-air-RunSummary">{html.escape(summary)}</pre>',
        }
        if chart.traces:
            final[PLOTLY_MIME] = chart.figure(max_points=STATIC_POINTS)
        self.reserve()
        assert self._final is not None
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
