"""What a sweep shows in its cell: one line on the sweep, a table of its trials (number,
state, parameters, objective, the best so far marked) and a chart of the objective by
trial with the best so far (inline SVG: no library, nothing to load), redrawn in place.

One display, updated as the sweep goes (IPython's display id), as HTML with a text
fallback for frontends that show no HTML (a terminal console, a saved notebook's text).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from IPython.display import DisplayHandle, display

from ..sweeps.store import Sweep, TrialRecord, best_of
from ..sweeps.sweep_file import Direction
from .display import LINK_STYLE

#: The best trial's mark, in both forms.
BEST = "★"


def value_text(value: Any) -> str:
    """A parameter's or objective's value, short: floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def state_text(trial: TrialRecord) -> str:
    if trial.state == "PRUNED" and trial.pruned_step is not None:
        return f"PRUNED at step {trial.pruned_step}"
    return trial.state


def summary(sweep: Sweep, trials: Sequence[TrialRecord], planned: int) -> str:
    """``sweep sw-1 RUNNING: 5 of 12 trials ended, 2 running; best val_loss = 0.12 (trial
    3)``."""
    metric = sweep.spec.objective.metric
    ended = sum(t.state != "RUNNING" for t in trials)
    running = len(trials) - ended
    line = f"sweep {sweep.id} {sweep.status.value}: {ended} of {planned} trials ended"
    if running:
        line += f", {running} running"
    best = best_of(sweep, list(trials))
    if best is not None:
        line += f"; best {metric} = {value_text(best.value)} (trial {best.number})"
    line += f" · {sweep.spec.direction.value} {metric}"
    if sweep.message:
        line += f" · {sweep.message}"
    return line


def bundle(sweep: Sweep, trials: Sequence[TrialRecord], planned: int) -> dict[str, str]:
    """The line and the table, as HTML and as text."""
    names = list(sweep.spec.space)
    metric = sweep.spec.objective.metric
    best = best_of(sweep, list(trials))
    head = ["trial", "state", *names, metric, "job"]
    rows = []
    for t in trials:
        mark = f" {BEST}" if best is not None and t.number == best.number else ""
        shown = "" if t.value is None else value_text(t.value) + mark
        rows.append(
            [
                str(t.number),
                state_text(t),
                *(value_text(t.params[n]) if n in t.params else "" for n in names),
                shown,
                t.job_id or "",
            ]
        )
    line = summary(sweep, trials, planned)
    drawn = chart(trials, sweep.spec.direction is Direction.MINIMIZE)
    return {
        "text/plain": _text(line, head, rows),
        "text/html": _html(line, head, rows, best, trials, drawn),
    }


def _text(line: str, head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [line, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _html(
    line: str,
    head: list[str],
    rows: list[list[str]],
    best: TrialRecord | None,
    trials: Sequence[TrialRecord],
    drawn: str,
) -> str:
    """The line, the table and the chart ``drawn``, in one element."""
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = []
    for trial, row in zip(trials, rows, strict=True):
        is_best = best is not None and trial.number == best.number
        style = ' style="font-weight: bold"' if is_best else ""
        title = f' title="{html.escape(trial.message)}"' if trial.message else ""
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in row)
        body.append(f"<tr{style}{title}>{tds}</tr>")
    return (
        f'<div class="jp-air-Sweep"><div>{html.escape(line)}</div>'
        f'<table class="jp-air-SweepTrials"><thead><tr>{cells}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{drawn}</div>"
    )


#: The chart's size, its margin, and the gutter at its left that holds the values.
WIDTH, HEIGHT, MARGIN, GUTTER = 360, 140, 20, 48


def chart(trials: Sequence[TrialRecord], minimize: bool) -> str:
    """The objective of each completed trial by its number (dots) and the best so far (a
    step line), as an SVG; nothing before a trial completed. The highest and lowest
    values are written in a gutter at the left, the first and last trial numbers under
    the axis: no dot is drawn over a word."""
    done = [(t.number, t.value) for t in trials if t.value is not None]
    if not done:
        return ""
    low, high = min(v for _, v in done), max(v for _, v in done)
    span = (high - low) or 1.0
    first, last = min(n for n, _ in done), max(n for n, _ in done)
    bottom = HEIGHT - MARGIN

    def x(n: int) -> float:
        return GUTTER + 6 + (n - first) / ((last - first) or 1) * (WIDTH - GUTTER - 6 - MARGIN)

    def y(v: float) -> float:
        return bottom - 6 - (v - low) / span * (bottom - 6 - MARGIN)

    def text(at_x: float, at_y: float, words: str, anchor: str) -> str:
        return (
            f'<text x="{at_x:.1f}" y="{at_y:.1f}" font-size="10" fill="currentColor" '
            f'text-anchor="{anchor}">{html.escape(words)}</text>'
        )

    dots = "".join(
        f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="3" fill="currentColor" opacity="0.6"/>'
        for n, v in done
    )
    steps, so_far = [], None
    for n, v in done:
        if so_far is None or (v < so_far if minimize else v > so_far):
            so_far = v
        steps.append(f"{x(n):.1f},{y(so_far):.1f}")
    labels = [text(GUTTER - 4, y(high) + 3, value_text(high), "end")]
    if high != low:
        labels.append(text(GUTTER - 4, y(low) + 3, value_text(low), "end"))
    labels.append(text(x(first), bottom + 12, str(first), "middle"))
    if last != first:
        labels.append(text(x(last), bottom + 12, str(last), "middle"))
    labels.append(text((GUTTER + WIDTH) / 2, bottom + 12, "trial", "middle"))
    return (
        f'<svg class="jp-air-SweepChart" width="{WIDTH}" height="{HEIGHT}" '
        'role="img" aria-label="objective by trial">'
        f'<path d="M{GUTTER},{MARGIN} V{bottom} H{WIDTH - MARGIN}" '
        'fill="none" stroke="currentColor" stroke-opacity="0.3"/>'
        f'<polyline points="{" ".join(steps)}" fill="none" stroke="#1976d2" stroke-width="2"/>'
        f"{dots}{''.join(labels)}"
        "</svg>"
    )


class SweepView:
    """The cell's one display of a sweep, drawn again only when it changed; with a link
    to the sweep's run once it exists, where an MLflow UI shows it."""

    def __init__(self) -> None:
        self._handle: DisplayHandle | None = None
        self._shown: dict[str, str] | None = None
        self._link: str | None = None

    def update(self, sweep: Sweep, trials: Sequence[TrialRecord], planned: int) -> None:
        shown = bundle(sweep, trials, planned)
        if self._link is None and sweep.run_id and sweep.experiment_id:
            from ..tracking.ui_links import run_url, ui_base

            base = ui_base(sweep.tracking_uri)
            self._link = run_url(base, sweep.experiment_id, sweep.run_id) if base else ""
        if self._link:
            anchor = (
                f'<a href="{html.escape(self._link)}" target="_blank" rel="noopener" '
                f'style="{LINK_STYLE}">run {html.escape(sweep.spec.run_name)}-sweep</a>'
            )
            shown["text/html"] = shown["text/html"].replace(
                "<table", f"<div>{anchor}</div><table", 1
            )
        if shown == self._shown:
            return
        self._shown = shown
        if self._handle is None:
            self._handle = display(shown, raw=True, display_id=True)
        else:
            self._handle.update(shown, raw=True)
