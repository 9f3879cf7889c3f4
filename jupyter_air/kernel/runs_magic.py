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

from ..tracking import experiment_runs as er
from .session import notebook_path, user_name

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
        attempt, job, params, latest metrics; children under their parent); select two or
        more to overlay their metric curves and see the params that differ."""
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
        from ..tracking.runs import default_experiment_name

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or default_experiment_name(
            user_name(), notebook_path()
        )
        found = er.experiment_by_name(client, name)
    if found is None:
        raise UsageError("this notebook has no MLflow experiment yet: run a distributed call first")
    return found


class RunsView:
    """The page of runs as a table, a run picker, and the comparison of the picked runs
    (metric curves overlaid by step or time, the params that differ)."""

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

    def text(self) -> str:
        """The table as text, for frontends without widgets."""
        head = [*COLUMNS, *self.page.params, *self.page.metrics]
        lines = [f"Experiment {self.experiment['name']} ({len(self.page.runs)} runs)"]
        lines.append("\t".join(head))
        lines += ["\t".join(_cells(row, self.page)) for row in self.page.runs]
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
            for child in self._box.children:
                child.close()
            self._box.close()

    def _build(self) -> Any:
        import ipywidgets as w
        import plotly.graph_objects as go

        picker = w.SelectMultiple(
            options=[(_label(row), row["run_id"]) for row in self.page.runs],
            rows=min(8, max(2, len(self.page.runs))),
            description="Compare",
        )
        metric = w.Dropdown(options=self.page.metrics, description="Metric")
        axis = w.ToggleButtons(options=["step", "time"], value="step")
        chart = go.FigureWidget(layout=CHART_LAYOUT)
        differing = w.HTML()

        def redraw(_: Any = None) -> None:
            chosen = list(picker.value)[: er.MAX_COMPARED]
            doc = self.compare(chosen) if len(chosen) >= 2 else None
            with chart.batch_update():
                chart.data = []
                for trace in _traces(doc, metric.value, axis.value) if doc else []:
                    chart.add_scatter(**trace)
                chart.layout.xaxis.title = axis.value
                chart.layout.yaxis.title = metric.value or ""
            differing.value = (
                _params_table(doc) if doc else "<i>Select two or more runs to compare them.</i>"
            )

        for control in (picker, metric, axis):
            control.observe(redraw, names="value")
        redraw()
        table = w.HTML(_html_table(self.experiment, self.page))
        reload = w.Button(description="Refresh", tooltip="Read the runs again")

        def refreshed(_: Any) -> None:
            page = self.refresh()
            table.value = _html_table(self.experiment, page)
            kept = [
                run_id for run_id in picker.value if any(r["run_id"] == run_id for r in page.runs)
            ]
            picker.options = [(_label(row), row["run_id"]) for row in page.runs]
            picker.value = tuple(kept)
            metric.options = page.metrics

        reload.on_click(refreshed)
        return w.VBox([table, picker, w.HBox([metric, axis, reload]), chart, differing])


def _cells(row: dict[str, Any], page: er.RunsPage) -> list[str]:
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
    cells += [row["params"].get(key, "") for key in page.params]
    cells += [_number(row["metrics"].get(key)) for key in page.metrics]
    return cells


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _label(row: dict[str, Any]) -> str:
    return f"{'  ' * row['depth']}{row['name'] or row['run_id']} ({row['status']})"


def _html_table(experiment: dict[str, str], page: er.RunsPage) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in (*COLUMNS, *page.params, *page.metrics))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(row, page)) + "</tr>"
        for row in page.runs
    )
    title = html.escape(experiment["name"])
    return f"<b>{title}</b><table class='jp-air-RunsView-table'><tr>{head}</tr>{body}</table>"


def _params_table(doc: dict[str, Any]) -> str:
    if not doc["params"]:
        return "<i>These runs have the same params.</i>"
    names = {run["run_id"]: run["name"] or run["run_id"] for run in doc["runs"]}
    head = "<th>param</th>" + "".join(f"<th>{html.escape(n)}</th>" for n in names.values())
    rows = "".join(
        f"<tr><td>{html.escape(key)}</td>"
        + "".join(f"<td>{html.escape(values.get(i) or '—')}</td>" for i in names)
        + "</tr>"
        for key, values in doc["params"].items()
    )
    return f"<b>Params that differ</b><table><tr>{head}</tr>{rows}</table>"


def _traces(doc: dict[str, Any], metric: str | None, axis: str) -> list[dict[str, Any]]:
    """One line per run of ``metric``, by step or by time."""
    names = {run["run_id"]: run["name"] or run["run_id"] for run in doc["runs"]}
    traces = []
    for run_id, points in (doc["metrics"].get(metric) or {}).items():
        xs = [
            p["step"] if axis == "step" else datetime.fromtimestamp(p["timestamp"] / 1000)
            for p in points
        ]
        ys = [p["value"] for p in points]
        traces.append({"x": xs, "y": ys, "mode": "lines+markers", "name": names[run_id]})
    return traces
