"""The runs of an experiment as the runs panel and ``%air_runs`` show them.

Knows neither tornado nor IPython: the server's runs routes and the kernel's magic both
translate this. ``mlflow`` is imported inside the functions that talk to a store, since
``import mlflow`` costs seconds and neither the server nor ``%load_ext`` should pay it
before the first request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run


class RunKind(StrEnum):
    """What a run is for, when it is more than one call's run: a warm session's (the
    parent) or one of its cells' (a child)."""

    SESSION = "session"
    SESSION_CELL = "session_cell"


def run_kind(tags: dict[str, str]) -> RunKind | None:
    if tags.get("air.session") == "true":
        return RunKind.SESSION
    if "air.session_cell" in tags:  # a number, or "next": made ahead for the next cell
        return RunKind.SESSION_CELL
    return None


def made_ahead(tags: dict[str, str]) -> bool:
    """A warm session's run made for a cell that has not started: no run of anything yet."""
    return tags.get("air.session_cell") == "next"


#: The statuses MLflow gives a run (``attributes.status``).
STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
#: The most runs one page may hold (MLflow's own limit for ``search_runs`` is 50,000;
#: a panel never needs more than this at once).
MAX_PAGE = 1000
#: The most runs one comparison may overlay.
MAX_COMPARED = 10
#: The most points of one metric history returned per run.
MAX_POINTS = 5000

# A search that holds a comparison is an MLflow filter string; plain words search the
# run name, as the MLflow UI's search box does.
_FILTER_SYNTAX = re.compile(r"(=|<|>|\bLIKE\b|\bIN\b)", re.IGNORECASE)
_METRIC_KEY = re.compile(r"[\w./\- :]{1,250}")
_RUN_ID = re.compile(r"[0-9a-f]{32}")


class BadQuery(ValueError):
    """A search, status, run or metric the store cannot answer: the caller's mistake."""


@dataclass(frozen=True)
class RunQuery:
    """One page of one experiment's runs, newest first."""

    experiment_id: str
    search: str = ""
    status: str | None = None
    max_results: int = 100
    page_token: str | None = None

    def filter_string(self) -> str:
        """The MLflow filter string of this query (``""``: every run)."""
        parts: list[str] = []
        text = self.search.strip()
        if text and _FILTER_SYNTAX.search(text):
            parts.append(f"({text})" if " or " in text.lower() else text)
        elif text:
            # MLflow's filter strings have no escapes: quote with the kind the words lack
            quote = "'" if "'" not in text else '"'
            words = text.replace(quote, "")
            parts.append(f"attributes.run_name ILIKE {quote}%{words}%{quote}")
        if self.status:
            if self.status not in STATUSES:
                raise BadQuery(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
            parts.append(f"attributes.status = '{self.status}'")
        return " AND ".join(parts)


@dataclass
class RunsPage:
    """Rows newest first, each child right after its parent when both are on the page;
    the param and metric keys any row has (the panel's columns)."""

    runs: list[dict[str, Any]]
    next_page_token: str | None
    params: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "next_page_token": self.next_page_token,
            "params": self.params,
            "metrics": self.metrics,
        }


def client_for(tracking_uri: str) -> MlflowClient:
    """A client of the store, opened under its lock: opening a new sqlite store migrates
    it, and a job's supervisor or a sweep's driver may be making it at the same moment
    (two migrations at once fail one of them). Blocks while another process migrates:
    call it off the event loop."""
    from mlflow import MlflowClient

    from .runs import quiet_store_setup

    with quiet_store_setup(tracking_uri):
        return MlflowClient(tracking_uri)


def run_row(run: Run) -> dict[str, Any]:
    """What a row shows of a run: JSON-ready, no MLflow types."""
    info, data = run.info, run.data
    tags = data.tags
    start, end = info.start_time, info.end_time
    attempt, resumed = tags.get("air.attempt"), tags.get("air.resumed_step")
    return {
        "run_id": info.run_id,
        "name": info.run_name,
        "status": info.status,
        "start_time": start,
        "end_time": end,
        "duration_ms": (end - start) if start is not None and end is not None else None,
        "attempt": int(attempt) if attempt and attempt.isdigit() else None,
        # a retry that resumed from a checkpoint: where, and at which step
        "resumed_from": tags.get("air.resumed_from"),
        "resumed_step": int(resumed) if resumed and resumed.isdigit() else None,
        "job_id": tags.get("air.job_id"),
        "cell_id": tags.get("air.cell_id"),
        "notebook": tags.get("air.notebook"),
        "parent_run_id": tags.get("mlflow.parentRunId"),
        "kind": run_kind(tags),
        "experiment_id": info.experiment_id,
        "params": dict(data.params),
        "metrics": {key: _finite(value) for key, value in data.metrics.items()},
        "depth": 0,
    }


def nest(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in page order, each run's children (newest first) right after it with a
    greater ``depth``; a child whose parent is on another page stays where it is."""
    on_page = {row["run_id"] for row in rows}
    children: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for row in rows:
        parent = row["parent_run_id"]
        if parent in on_page and parent != row["run_id"]:
            children.setdefault(parent, []).append(row)
        else:
            roots.append(row)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def place(row: dict[str, Any], depth: int) -> None:
        if row["run_id"] in seen:  # a cycle of parent tags: show each run once
            return
        seen.add(row["run_id"])
        out.append({**row, "depth": depth})
        for child in children.get(row["run_id"], []):
            place(child, depth + 1)

    for row in roots:
        place(row, 0)
    for row in rows:  # only runs caught in a parent cycle are left
        place(row, 0)
    return out


def search_page(
    client: MlflowClient,
    query: RunQuery,
    visible: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> RunsPage:
    """One page of runs; ``visible`` drops the rows the caller may not see (before the
    columns are chosen, so that a hidden run's param names do not show either)."""
    from mlflow.entities import ViewType
    from mlflow.exceptions import MlflowException

    if not 1 <= query.max_results <= MAX_PAGE:
        raise BadQuery(f"max_results must be between 1 and {MAX_PAGE}, got {query.max_results}")
    try:
        found = client.search_runs(
            [query.experiment_id],
            filter_string=query.filter_string(),
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=query.max_results,
            order_by=["attributes.start_time DESC"],
            page_token=query.page_token or None,
        )
    except MlflowException as err:
        if err.error_code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "BAD_REQUEST"):
            raise BadQuery(err.message) from None
        raise
    rows = [run_row(run) for run in found if not made_ahead(run.data.tags)]
    if visible is not None:
        rows = visible(rows)
    return RunsPage(
        runs=nest(rows),
        next_page_token=_text(found.token),
        params=sorted({key for row in rows for key in row["params"]}),
        metrics=sorted({key for row in rows for key in row["metrics"]}),
    )


def experiments(client: MlflowClient, ids: Iterable[str] | None = None) -> list[dict[str, str]]:
    """Active experiments by name (all of them, or those of ``ids`` that exist)."""
    from mlflow.entities import ViewType

    found: Iterable[Any]
    if ids is None:
        found = client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=1000)
    else:
        found = [e for e in (_experiment(client, i) for i in sorted(set(ids))) if e is not None]
    docs = [{"id": str(e.experiment_id), "name": str(e.name)} for e in found]
    return sorted(docs, key=lambda doc: doc["name"].lower())


def experiment_by_name(client: MlflowClient, name: str) -> dict[str, str] | None:
    found = client.get_experiment_by_name(name)
    return None if found is None else {"id": str(found.experiment_id), "name": str(found.name)}


def _experiment(client: MlflowClient, experiment_id: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_experiment(experiment_id)
    except MlflowException:
        return None


def check_compared(run_ids: Sequence[str], metric_keys: Sequence[str]) -> None:
    if not 1 <= len(run_ids) <= MAX_COMPARED:
        raise BadQuery(f"compare between 1 and {MAX_COMPARED} runs, got {len(run_ids)}")
    for run_id in run_ids:
        if not _RUN_ID.fullmatch(run_id):
            raise BadQuery(f"not a run id: {run_id!r}")
    for key in metric_keys:
        if not _METRIC_KEY.fullmatch(key):
            raise BadQuery(f"not a metric name: {key!r}")


def get_runs(client: MlflowClient, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of these runs, in that order; an unknown run is a ``BadQuery``."""
    from mlflow.exceptions import MlflowException

    rows = []
    for run_id in run_ids:
        try:
            rows.append(run_row(client.get_run(run_id)))
        except MlflowException:
            raise BadQuery(f"no run {run_id!r}") from None
    return rows


def metric_history(client: MlflowClient, run_id: str, key: str) -> list[dict[str, Any]]:
    """The points of one metric of one run by step (the last ``MAX_POINTS``)."""
    points = client.get_metric_history(run_id, key)
    points = sorted(points, key=lambda m: (m.step, m.timestamp))[-MAX_POINTS:]
    return [{"step": m.step, "timestamp": m.timestamp, "value": _finite(m.value)} for m in points]


def differing_params(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    """The params whose values are not the same in every run (a run without one counts
    as a different value): ``{param: {run_id: value or None}}``."""
    keys = sorted({key for row in rows for key in row["params"]})
    out: dict[str, dict[str, str | None]] = {}
    for key in keys:
        values = {row["run_id"]: row["params"].get(key) for row in rows}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def compare(
    client: MlflowClient, rows: Sequence[dict[str, Any]], metric_keys: Sequence[str]
) -> dict[str, Any]:
    """Metric curves of these runs (every metric any of them has, unless named) and the
    params that differ between them."""
    keys = list(metric_keys) or sorted({key for row in rows for key in row["metrics"]})
    metrics = {
        key: {row["run_id"]: metric_history(client, row["run_id"], key) for row in rows}
        for key in keys
    }
    return {
        "runs": [
            {
                **{k: row[k] for k in ("run_id", "name", "status", "start_time")},
                "time_origin": time_origin(row, metrics),
                "resumed_step": row["resumed_step"],  # where a resumed retry restarted
            }
            for row in rows
        ],
        "params": differing_params(rows),
        "metrics": metrics,
    }


def time_origin(
    row: dict[str, Any], metrics: dict[str, dict[str, list[dict[str, Any]]]]
) -> int | None:
    """Where a compared run's time starts (Unix ms): its first point of any of the user's
    metrics (the training's first step logged), the same for every metric of the run; its
    start where it has none (None when MLflow has no start either). Not the run's start
    alone: the job makes the run before its ranks start, which put every curve seconds
    (a minute on a busy machine) away from zero."""
    firsts: list[int] = [
        point["timestamp"]
        for key, series in metrics.items()
        if not is_system_metric(key)
        for point in series.get(row["run_id"], [])
    ]
    return min(firsts, default=row["start_time"])


def is_system_metric(key: str) -> bool:
    """MLflow's own system metrics (``system/cpu_utilization_percentage``, ...) and the
    job's speed (``perf/step_time``, ...), which the supervisor logs beside them."""
    return key.startswith(("system/", "perf/"))


def user_metrics_first(keys: Iterable[str], system: bool = True) -> list[str]:
    """The user's metrics (sorted), then MLflow's system metrics (sorted) when ``system``:
    what a table's columns and a comparison's default metric follow, so the system
    metrics never push the user's own off the table."""
    ordered = sorted(set(keys))
    user = [key for key in ordered if not is_system_metric(key)]
    return user + [key for key in ordered if is_system_metric(key)] if system else user


def legend_names(runs: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Run id -> the name a chart's legend shows: the run's name, with the start of its
    id where several runs share that name (MLflow does not make names unique)."""
    names = [run.get("name") or run["run_id"] for run in runs]
    return {
        run["run_id"]: f"{name} ({run['run_id'][:7]})" if names.count(name) > 1 else name
        for run, name in zip(runs, names, strict=True)
    }


def _text(token: str | bytes | None) -> str | None:
    """A page token as text (the sqlite store hands out bytes)."""
    if not token:
        return None
    return token.decode() if isinstance(token, bytes) else token


def _finite(value: float) -> float | None:
    """JSON has no NaN or infinity: a diverged loss reads as null."""
    return value if value == value and value not in (float("inf"), float("-inf")) else None
