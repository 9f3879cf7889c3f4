"""The Grafana dashboard in docs/grafana reads only the metrics and labels we export."""

from __future__ import annotations

from jupyter_air.metrics.collector import EXPORTED, GPU_LABELS, JOB_LABELS, USAGE_LABELS
from tests.metrics.dashboard import (
    label_names,
    load,
    metric_names,
    panel_queries,
    variable_queries,
)


def test_every_query_of_the_dashboard_names_only_metrics_and_labels_we_export() -> None:
    dashboard = load()
    queries = [*panel_queries(dashboard).values(), *variable_queries(dashboard)]
    assert len(queries) >= 8
    used: set[str] = set()
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric found in {query!r}"
        assert names <= EXPORTED, f"{query!r} reads {sorted(names - EXPORTED)}"
        labels = label_names(query)
        known = {*GPU_LABELS, *USAGE_LABELS, *JOB_LABELS}
        assert labels <= known, f"{query!r} uses labels {sorted(labels - known)}"
        used |= names
    # The questions: GPU use by user and job, idle GPU-hours.
    assert {"air_gpu_allocated_seconds_total", "air_gpu_idle_seconds_total"} <= used


def test_the_name_reader_sees_metrics_and_not_functions_labels_or_durations() -> None:
    expr = (
        'sum by (user, air_job) (increase(foo_total{user=~"a|b", x!="rate(bar)"}[$__range]))'
        " / on (user) group_left sum(baz) * 3600 > bool 1e3"
    )
    assert metric_names(expr) == {"foo_total", "baz"}
    assert label_names(expr) == {"user", "air_job", "x"}
    assert metric_names("label_values(qux, user)") == {"qux"}
