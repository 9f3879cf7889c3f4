"""The Grafana dashboard of docs/grafana: its PromQL queries, the metric names and labels
they read, and each one as Prometheus runs it once Grafana has put in its variables."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "jupyter-air.json"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*(\w+)\s*\)")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d[\d.]*(?:[eE][+-]?\d+)?")
_KEYWORDS = {"bool", "offset", "and", "or", "unless", "inf", "nan", "group_left", "group_right"}


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def panel_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each panel's title and its PromQL."""
    return {
        panel["title"]: target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }


def variable_queries(dashboard: dict[str, Any]) -> list[str]:
    return [v["definition"] for v in dashboard["templating"]["list"] if v.get("type") == "query"]


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression reads (or ``label_values(metric, label)``)."""
    if found := _LABEL_VALUES.fullmatch(expr.strip()):
        return {found.group(1)}
    text = _RANGE.sub(" ", _MATCHERS.sub(" ", _STRING.sub('""', expr)))
    text = _NUMBER.sub(" ", _GROUPING.sub(" ", text))
    names = set()
    for match in _IDENTIFIER.finditer(text):
        called = text[match.end() :].lstrip().startswith("(")
        if not called and match.group() not in _KEYWORDS:
            names.add(match.group())
    return names


def label_names(expr: str) -> set[str]:
    """The labels a PromQL expression groups by or matches on."""
    if found := _LABEL_VALUES.fullmatch(expr.strip()):
        return {found.group(2)}
    text = _STRING.sub('""', expr)
    labels = {
        m.group(1) for braces in _MATCHERS.findall(text) for m in _MATCHER_LABEL.finditer(braces)
    }
    for group in _GROUPING.findall(text):
        labels |= {name.strip() for name in group.split(",") if name.strip()}
    return labels


def as_run(expr: str, rate_interval: str, time_range: str) -> str:
    """The query Grafana sends: its variables filled in (every user)."""
    return (
        expr.replace("$__rate_interval", rate_interval)
        .replace("$__range", time_range)
        .replace("$user", ".*")
    )
