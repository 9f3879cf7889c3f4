"""``%air_runs``: the runs of the notebook's experiment and their comparison, as a widget,
for frontends without the runs panel.

Reads MLflow from the kernel through :mod:`jupyter_air.tracking.experiment_runs` (the
panel's server routes use the same module); this module parses options and draws.
MLflow, ipywidgets and plotly are imported at the first ``%air_runs``, so
``%load_ext jupyter_air`` stays cheap.
"""

from __future__ import annotations

import html
import os
from datetime import datetime
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..identity import mlflow_user
from ..tracking import experiment_runs as er
from .session import notebook_path

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: The comparison chart's frame (titles follow the metric and axis picked).
CHART_LAYOUT = {
    "height": 320,
    "margin": {"t": 20, "l": 50, "r": 10, "b": 40},
    "template": "plotly_white",
}
#: Columns of the text and HTML tables, before the params and metrics.
COLUMNS = ("status", "name", "start", "duration", "attempt", "job")


@magics_class
class AirRunsMagics(Magics):
    @magic_arguments()
    @argument(
        "--experiment",
        default=None,
        help="Experiment name or id (default: the notebook's, as its distributed calls use).",
    )
    @argument(
        "--status",
        default=None,
        help=f"Only runs with this status: {', '.join(er.STATUSES)}.",
    )
    @argument(
        "--search",
        default="",
        help="Words of the run name, or an MLflow filter string (e.g. \"params.lr = '0.1'\").",
    )
    @argument(
        "--max-results", type=int, default=100, help="Runs shown, newest first (default 100)."
    )
    @line_magic
    def air_runs(self, line: str) -> RunsView:
        """List the runs of the notebook's MLflow experiment (status, name, start, duration,
        attempt, job, params, latest metrics, the user's before MLflow's system metrics;
        children under their parent); check two or more to overlay their metric curves
        and see the params that differ."""
        args = parse_argstring(self.air_runs, line)
        status = args.status.upper() if args.status else None
        if status is not None and status not in er.STATUSES:
            raise UsageError(
                f"--status must be one of {', '.join(er.STATUSES)}, got {args.status!r}"
            )
        if not 1 <= args.max_results <= er.MAX_PAGE:
            raise UsageError(
                f"--max-results must be between 1 and {er.MAX_PAGE}, got {args.max_results}"
            )
        import mlflow

        from ..tracking.targets import absolute_tracking_uri

        client = er.client_for(absolute_tracking_uri(mlflow.get_tracking_uri()))
        experiment = _experiment(client, args.experiment)
        query = er.RunQuery(experiment["id"], _unquoted(args.search), status, args.max_results)
        try:
            page = er.search_page(client, query)
        except er.BadQuery as err:
            raise UsageError(f"--search: {err}") from None
        return RunsView(client, experiment, query, page)


def _unquoted(text: str) -> str:
    """The option's text without the quotes that kept it one argument (IPython's
    argument splitting leaves them on)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _experiment(client: MlflowClient, option: str | None) -> dict[str, str]:
    """The experiment named (by name, else id), else the one this notebook's calls use."""
    from mlflow.tracking import fluent

    if option:
        found = er.experiment_by_name(client, option)
        if found is None:
            found = next(iter(er.experiments(client, [option])), None)
        if found is None:
            raise UsageError(f"--experiment: no experiment named or numbered {option!r}")
        return found
    if fluent._active_experiment_id or os.environ.get("MLFLOW_EXPERIMENT_ID"):
        chosen = fluent._active_experiment_id or os.environ["MLFLOW_EXPERIMENT_ID"]
        found = next(iter(er.experiments(client, [chosen])), None)
    else:
        from ..tracking.targets import default_experiment_name

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or default_experiment_name(
            mlflow_user(), notebook_path()
        )
        found = er.experiment_by_name(client, name)
    if found is None:
        raise UsageError("this notebook has no MLflow experiment yet: run a distributed call first")
    return found


class RunsView:
    """The page of runs as a table, a checkbox per run, and the comparison of the picked
    runs (metric curves overlaid by step or by time since each run's first point, the params
    that differ). The user's own metrics come first; MLflow's ``system/*`` metrics are
    behind the "system metrics" switch."""

    def __init__(
        self,
        client: MlflowClient,
        experiment: dict[str, str],
        query: er.RunQuery,
        page: er.RunsPage,
    ) -> None:
        self.client = client
        self.experiment = experiment
        self.query = query
        self.page = page
        self.compared: dict[str, Any] | None = None
        self._box: Any = None
        # The widgets, once built (``_build``): a checkbox per run id, the controls.
        self.picks: dict[str, Any] = {}
        self.picker: Any = None
        self.metric: Any = None
        self.axis: Any = None
        self.system: Any = None
        self.table: Any = None
        self.chart: Any = None
        self.differing: Any = None

    def compare(self, run_ids: list[str]) -> dict[str, Any]:
        """Curves and differing params of these runs (also what the widget's picker does)."""
        er.check_compared(run_ids, [])
        rows = {row["run_id"]: row for row in self.page.runs}
        self.compared = er.compare(self.client, [rows[i] for i in run_ids if i in rows], [])
        return self.compared

    def refresh(self) -> er.RunsPage:
        """Read the page again (statuses of running runs, new runs); the widget's
        Refresh button does this."""
        self.page = er.search_page(self.client, self.query)
        return self.page

    def metrics(self, system: bool = False) -> list[str]:
        """The page's metric keys, the user's first (sorted), then MLflow's system
        metrics when asked for."""
        return er.user_metrics_first(self.page.metrics, system=system)

    def text(self) -> str:
        """The table as text, for frontends without widgets."""
        metrics = self.metrics()
        head = [*COLUMNS, *self.page.params, *metrics]
        lines = [f"Experiment {self.experiment['name']} ({len(self.page.runs)} runs)"]
        lines.append("\t".join(head))
        lines += ["\t".join(_cells(row, self.page.params, metrics)) for row in self.page.runs]
        return "\n".join(lines)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if self._box is None:
            self._box = self._build()
        bundle = self._box._repr_mimebundle_()
        bundle["text/plain"] = self.text()
        display(bundle, raw=True)

    def close(self) -> None:
        if self._box is not None:
            pending = [self._box]
            while pending:
                widget = pending.pop()
                pending.extend(getattr(widget, "children", ()))
                widget.close()

    def picked(self) -> list[str]:
        """The run ids whose boxes are checked, in the table's order."""
        return [run_id for run_id, box in self.picks.items() if box.value]

    def _build(self) -> Any:
        import ipywidgets as w
        import plotly.graph_objects as go

        self.picker = w.VBox(layout=w.Layout(max_height="220px", overflow="auto"))
        self.metric = w.Dropdown(description="Metric")
        self.axis = w.ToggleButtons(
            options=[("by step", "step"), ("by time since first point", "time")],
            value="step",
            tooltips=["Each run's steps", "Seconds since each run's first point"],
        )
        self.system = w.Checkbox(
            value=False, description="system metrics", indent=False,
            tooltip="Also show MLflow's system/* metrics (CPU, memory, GPUs)",
        )  # fmt: skip
        self.table = w.HTML()
        self.chart = go.FigureWidget(layout=CHART_LAYOUT)
        self.differing = w.HTML()
        reload = w.Button(description="Refresh", icon="refresh", tooltip="Read the runs again")

        def redraw(_: Any = None) -> None:
            chosen = self.picked()[: er.MAX_COMPARED]
            doc = self.compare(chosen) if len(chosen) >= 2 else None
            with self.chart.batch_update():
                self.chart.data = []
                for trace in _traces(doc, self.metric.value, self.axis.value) if doc else []:
                    self.chart.add_scatter(**trace)
                self.chart.layout.xaxis.title = _AXIS_TITLES[self.axis.value]
                self.chart.layout.yaxis.title = self.metric.value or ""
            self.differing.value = (
                _params_table(doc) if doc else "<i>Check two or more runs to compare them.</i>"
            )

        def show_page(_: Any = None) -> None:
            """Table, checkboxes and metric choices of the page as it is now."""
            metrics = self.metrics(self.system.value)
            self.table.value = _html_table(self.experiment, self.page, metrics)
            checked = set(self.picked())
            for box in self.picks.values():
                box.unobserve_all()
            self.picks = {row["run_id"]: _checkbox(row, checked) for row in self.page.runs}
            for box in self.picks.values():
                box.observe(redraw, names="value")
            self.picker.children = list(self.picks.values())
            current = self.metric.value
            self.metric.options = metrics
            self.metric.value = current if current in metrics else next(iter(metrics), None)

        def refreshed(_: Any) -> None:
            self.refresh()
            show_page()
            redraw()

        show_page()
        for control in (self.metric, self.axis):
            control.observe(redraw, names="value")
        self.system.observe(show_page, names="value")
        reload.on_click(refreshed)
        redraw()
        return w.VBox(
            [
                w.HTML(f"<style>{TABLE_STYLE}</style>"),
                self.table,
                w.HTML("<b>Compare</b>"),
                self.picker,
                w.HBox([self.metric, self.axis, self.system, reload]),
                self.chart,
                self.differing,
            ]
        )


#: The x axis of a comparison: each run's steps, or seconds since each run's first point
#: (so runs started minutes apart overlay).
_AXIS_TITLES = {"step": "step", "time": "seconds since the run's first point"}
#: The tables' style: dates and ids on one line, numbers right-aligned.
TABLE_STYLE = (
    ".jp-air-RunsView-table td, .jp-air-RunsView-table th "
    "{white-space: nowrap; padding: 2px 10px 2px 0; text-align: left}"
    " .jp-air-RunsView-table td.jp-air-RunsView-number {text-align: right}"
)


def _checkbox(row: dict[str, Any], checked: set[str]) -> Any:
    import ipywidgets as w

    return w.Checkbox(
        value=row["run_id"] in checked,
        description=_label(row),
        indent=False,
        layout=w.Layout(width="auto"),
    )


def _cells(row: dict[str, Any], params: list[str], metrics: list[str]) -> list[str]:
    start = row["start_time"]
    duration = row["duration_ms"]
    cells = [
        row["status"],
        "  " * row["depth"] + (row["name"] or row["run_id"]),
        datetime.fromtimestamp(start / 1000).strftime("%Y-%m-%d %H:%M:%S") if start else "",
        f"{duration / 1000:.1f} s" if duration is not None else "",
        str(row["attempt"] or ""),
        row["job_id"] or "",
    ]
    cells += [row["params"].get(key, "") for key in params]
    cells += [readable_number(row["metrics"].get(key)) for key in metrics]
    return cells


def readable_number(value: float | None) -> str:
    """Four significant digits, in positional notation with thousands separators from
    10,000 up (``79,670``, not ``7.967e+04``); exponents only for very small values."""
    if value is None:
        return ""
    text = f"{value:.4g}"
    if "e+" in text:
        return f"{value:,.0f}"
    return text


def _label(row: dict[str, Any]) -> str:
    start = row["start_time"]
    when = datetime.fromtimestamp(start / 1000).strftime("%m-%d %H:%M:%S") if start else ""
    name = row["name"] or row["run_id"]
    return f"{'  ' * row['depth']}{name} · {row['status'].lower()} · {when} · {row['run_id'][:7]}"


def _html_table(experiment: dict[str, str], page: er.RunsPage, metrics: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in (*COLUMNS, *page.params, *metrics))
    numbers = len(COLUMNS) + len(page.params)

    def cell(k: int, text: str) -> str:
        kind = ' class="jp-air-RunsView-number"' if k >= numbers else ""
        return f"<td{kind}>{html.escape(text)}</td>"

    body = "".join(
        "<tr>"
        + "".join(cell(k, c) for k, c in enumerate(_cells(row, page.params, metrics)))
        + "</tr>"
        for row in page.runs
    )
    title = html.escape(experiment["name"])
    return f"<b>{title}</b><table class='jp-air-RunsView-table'><tr>{head}</tr>{body}</table>"


def _params_table(doc: dict[str, Any]) -> str:
    if not doc["params"]:
        return "<i>These runs have the same params.</i>"
    names = er.legend_names(doc["runs"])
    head = "<th>param</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names.values())
    rows = "".join(
        f"<tr><td>{html.escape(key)}</td>"
        + "".join(f"<td>{html.escape(values.get(i) or '—')}</td>" for i in names)
        + "</tr>"
        for key, values in doc["params"].items()
    )
    return (
        "<b>Params that differ</b>"
        f"<table class='jp-air-RunsView-table'><tr>{head}</tr>{rows}</table>"
    )


def _traces(doc: dict[str, Any], metric: str | None, axis: str) -> list[dict[str, Any]]:
    """One line per run of ``metric``, by step or by seconds since the run's first point
    (``time_origin``, see ``experiment_runs.time_origin``)."""
    names = er.legend_names(doc["runs"])
    origins = {run["run_id"]: run.get("time_origin") for run in doc["runs"]}
    traces = []
    for run_id, points in (doc["metrics"].get(metric) or {}).items():
        start = origins.get(run_id) or (points[0]["timestamp"] if points else 0)
        xs = [p["step"] if axis == "step" else (p["timestamp"] - start) / 1000 for p in points]
        ys = [p["value"] for p in points]
        traces.append({"x": xs, "y": ys, "mode": "lines+markers", "name": names[run_id]})
    return traces
