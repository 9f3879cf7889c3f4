"""``%air_gpu``: the GPU resources view as a widget, for frontends without the sidebar panel.

Polling, history and idleness live in :mod:`jupyter_air.gpu.view_model`; this module
parses the options and draws (ipywidgets for the cards and buttons, a plotly
``FigureWidget`` for the charts). ipywidgets, plotly and NVML are imported at the
first ``%air_gpu``, so ``%load_ext jupyter_air`` stays cheap.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..gpu.view_model import RANGES, GpuHistory, GpuPoller

NA = "n/a"
#: The table's style (the HTML widget's content takes no class of its own).
CARD_STYLE = (
    ".jp-air-GpuView-cards th, .jp-air-GpuView-cards td "
    "{padding: 2px 12px 2px 0; text-align: left; vertical-align: top}"
)
#: Chart rows: (title, unit).
ROWS = (("GPU utilization", "%"), ("GPU memory", "%"), ("GPU temperature", "°C"), ("Host", "%"))


@magics_class
class AirGpuMagics(Magics):
    @magic_arguments()
    @argument(
        "--range",
        default="15m",
        help="Time range of the charts when the view opens: 15m, 1h or 2h (default 15m).",
    )
    @argument(
        "--interval", type=float, default=10.0, help="Seconds between two updates (default 10)."
    )
    @argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        help=(
            "Seconds without an interaction with the view after which it stops polling "
            "(default 300); any click on it resumes."
        ),
    )
    @argument(
        "--source",
        default="auto",
        help=(
            "auto: the Jupyter server's sampler when it has jupyter_air, else a sampler in "
            "this kernel; server or kernel: only that one."
        ),
    )
    @line_magic
    def air_gpu(self, line: str) -> GpuView:
        """Show live GPU utilization, memory, temperature, power and processes, and host
        CPU and memory, polled every 10 s with 2 h of history. Returns the view, which
        polls once shown (``view = %air_gpu`` then ``view``); ``view.close()`` stops it."""
        args = parse_argstring(self.air_gpu, line)
        if args.range not in RANGES:
            raise UsageError(f"--range must be one of {', '.join(RANGES)}, got {args.range!r}")
        if args.source not in ("auto", "server", "kernel"):
            raise UsageError(f"--source must be auto, server or kernel, got {args.source!r}")
        if not args.interval >= 1:
            raise UsageError(f"--interval must be at least 1 second, got {args.interval}")
        if not args.idle_timeout >= 5:
            raise UsageError(f"--idle-timeout must be at least 5 seconds, got {args.idle_timeout}")
        from .gpu_sources import SourceUnavailable, find_source  # NVML, psutil

        try:
            source = find_source(args.source, interval=args.interval)
        except SourceUnavailable as err:
            raise UsageError(f"--source server: {err}") from None
        poller = GpuPoller(source, interval=args.interval, idle_timeout=args.idle_timeout)
        return GpuView(poller, args.range)


class GpuView:
    """The widgets of one ``%air_gpu``, redrawn after every poll."""

    def __init__(self, poller: GpuPoller, range_key: str) -> None:
        import ipywidgets as w

        self.poller = poller
        self.range_key = range_key
        self._gpu_traces = 0
        self.title = w.HTML("<b>GPU resources</b>")
        self.range = w.ToggleButtons(
            options=list(RANGES), value=range_key, tooltips=["15 minutes", "1 hour", "2 hours"]
        )
        self.range.style.button_width = "4em"
        self.range.layout.margin = "0"  # in line with the buttons beside it
        self.refresh = w.Button(description="Refresh", icon="refresh", tooltip="Sample now")
        self.resume = w.Button(description="Resume", icon="play", layout=w.Layout(display="none"))
        self.close_button = w.Button(description="Close", icon="times", tooltip="Stop this view")
        self.status = w.HTML()
        self.cards = w.HTML()
        self._with_gpus: bool | None = None  # what the charts' rows are laid out for
        self.figure = _figure()
        header = w.HBox(
            [self.title, self.range, self.refresh, self.resume, self.close_button],
            layout=w.Layout(align_items="center"),
        )
        self.box = w.VBox([header, self.status, self.cards, self.figure])
        self.box.add_class("jp-air-GpuView")
        self.refresh.on_click(lambda _: poller.request_refresh())
        self.resume.on_click(lambda _: poller.touch())
        self.close_button.on_click(lambda _: self.close())
        self.range.observe(self._on_range, names="value")
        poller.on_update = lambda _: self.render()
        self.render()

    def _ipython_display_(self) -> None:
        """Shown (the cell's value, or ``display(view)``): a first poll, then polling
        on the view's thread. A frontend without widgets shows the text of that poll."""
        from IPython.display import display

        if not self.poller.history.t:
            self.poller.step()
        bundle = self.box._repr_mimebundle_()
        bundle["text/plain"] = _text(self.poller)
        display(bundle, raw=True)
        self.poller.start()

    def close(self) -> None:
        """Stop polling and close every widget of the view (their comms with them)."""
        self.poller.close()
        pending = [self.box]
        while pending:
            widget = pending.pop()
            pending.extend(getattr(widget, "children", ()))
            widget.close()

    def _on_range(self, change: dict[str, Any]) -> None:
        self.range_key = change["new"]
        self.poller.touch()
        self.render()

    def _on_chart_event(self, *_: Any) -> None:
        self.poller.touch()

    def render(self) -> None:
        poller, history = self.poller, self.poller.history
        self.resume.layout.display = "" if poller.paused else "none"
        self.status.value = _status(poller)
        self.cards.value = _cards(history)
        self._draw(history)

    def _draw(self, history: GpuHistory) -> None:
        if bool(history.gpus) != self._with_gpus:  # the GPU rows, only with GPUs
            self._with_gpus = bool(history.gpus)
            with self.figure.batch_update():
                _show_rows(self.figure, self._with_gpus)
        seconds = RANGES[self.range_key]
        start = history.window(seconds)
        x = [datetime.fromtimestamp(t) for t in history.t[start:]]
        now = history.now or (history.t[-1] if history.t else 0.0)
        series: list[tuple[str, int, list[float | None]]] = []
        for i, (gpu, info) in enumerate(zip(history.gpu, history.gpus, strict=False)):
            total = info.get("mem_total_mib")
            mem = [_percent(v, total) for v in gpu["mem"][start:]]
            series += [
                (f"GPU {i} utilization", 1, gpu["util"][start:]),
                (f"GPU {i} memory", 2, mem),
                (f"GPU {i} temperature", 3, gpu["temp"][start:]),
            ]
        total_mem = history.host.get("mem_total_mib")
        series += [
            ("host CPU", len(ROWS), history.cpu[start:]),
            ("host memory", len(ROWS), [_percent(v, total_mem) for v in history.mem[start:]]),
        ]
        with self.figure.batch_update():
            if len(self.figure.data) != len(series):
                self.figure.data = []
                for name, row, _ in series:
                    self.figure.add_scatter(
                        name=name, mode="lines+markers", marker={"size": 3}, row=row, col=1
                    )
                for trace in self.figure.data:
                    trace.on_click(self._on_chart_event)
                    trace.on_hover(self._on_chart_event)
            for trace, (_, _, y) in zip(self.figure.data, series, strict=True):
                trace.x, trace.y = x, y
            if now:
                ends = [datetime.fromtimestamp(now - seconds), datetime.fromtimestamp(now)]
                self.figure.update_xaxes(range=ends)


#: Chart layout: the height of a row and the gap between two, in pixels.
ROW_HEIGHT = 170
ROW_GAP = 50


def _figure() -> Any:
    """The charts, a row per GPU metric then the host's (``_rows_layout`` shows the GPU
    rows only where there are GPUs); 24-hour times."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=len(ROWS), cols=1, shared_xaxes=True)
    figure.update_layout(
        margin={"l": 50, "r": 20, "t": 40, "b": 30}, hovermode="x unified",
        legend={"orientation": "h"}, template="plotly_white",
    )  # fmt: skip
    figure.update_xaxes(tickformat="%H:%M", hoverformat="%H:%M:%S")
    for row, (_, unit) in enumerate(ROWS, start=1):
        if unit == "%":
            figure.update_yaxes(range=[0, 100], row=row, col=1)
    _show_rows(figure, with_gpus=False)
    return go.FigureWidget(figure)


def _show_rows(figure: Any, with_gpus: bool) -> None:
    layout = _rows_layout(with_gpus)
    figure.layout.annotations = layout.pop("annotations")  # replaced, not merged
    figure.update_layout(layout)


def _rows_layout(with_gpus: bool) -> dict[str, Any]:
    """Domains, titles and height of the chart rows: every row with GPUs, else only the
    host's (no empty GPU charts). Changed in place: a new figure widget shown in the
    view's place would be drawn empty. Titles sit at the left, clear of plotly's
    toolbar at the right."""
    shown = list(range(len(ROWS))) if with_gpus else [len(ROWS) - 1]
    plot = ROW_HEIGHT * len(shown) + ROW_GAP * (len(shown) - 1)
    layout: dict[str, Any] = {"height": plot + 70, "annotations": []}
    for k in range(len(ROWS)):
        axis = "yaxis" if k == 0 else f"yaxis{k + 1}"
        if k not in shown:
            layout[axis] = {"visible": False, "domain": [0, 0]}
            layout[axis.replace("y", "x")] = {"visible": False}
            continue
        place = shown.index(k)
        top = plot - place * (ROW_HEIGHT + ROW_GAP)
        domain = [(top - ROW_HEIGHT) / plot, top / plot]
        layout[axis] = {"visible": True, "domain": domain}
        layout[axis.replace("y", "x")] = {"visible": True}
        title, unit = ROWS[k]
        layout["annotations"].append(
            {"text": f"{title} ({unit})", "x": 0, "y": domain[1], "xref": "paper",
             "yref": "paper", "xanchor": "left", "yanchor": "bottom", "showarrow": False,
             "font": {"size": 13}}
        )  # fmt: skip
    return layout


def _text(poller: GpuPoller) -> str:
    """The latest sample as text, for frontends that cannot show widgets."""
    history = poller.history
    lines = [f"GPU resources, from {poller.source.description}:"]
    for i, info in enumerate(history.gpus):
        gpu = history.gpu[i] if i < len(history.gpu) else {}
        latest = {name: history.latest(column) for name, column in gpu.items()}
        figures = [
            _fmt(latest.get("util"), "{:.0f} %"),
            _memory(latest.get("mem"), info.get("mem_total_mib")),
            _fmt(latest.get("temp"), "{:.0f} °C"),
            _power(latest.get("power"), info.get("power_limit_w")),
        ]
        lines.append(f"GPU {i} {info.get('name') or NA}: {', '.join(figures)}")
    cpu = _fmt(history.latest(history.cpu), "{:.0f} %")
    mem = _memory(history.latest(history.mem), history.host.get("mem_total_mib"))
    lines.append(f"host {history.host.get('hostname', '')}: CPU {cpu}, memory {mem}")
    if poller.error:
        lines.append(poller.error)
    return "\n".join(lines)


def _status(poller: GpuPoller) -> str:
    history = poller.history
    parts = [f"From {html.escape(poller.source.description)}."]
    if poller.closed:
        parts.append("Closed.")
    elif poller.paused:
        parts.append(
            f"Paused after {poller.idle_timeout:g} s without interaction: "
            "press Resume or Refresh to continue."
        )
    else:
        parts.append(f"Updated every {poller.interval:g} s.")
    if history.t:
        parts.append(f"Last sample {datetime.fromtimestamp(history.t[-1]):%H:%M:%S}.")
    if poller.error:
        parts.append(f'<span class="jp-air-GpuView-error">{html.escape(poller.error)}</span>')
    reason = history.no_gpu_reason()
    if reason is not None:
        parts.append(f'<br><span class="jp-air-GpuView-nogpu">{html.escape(reason)}</span>')
    return f'<div class="jp-air-GpuView-status">{" ".join(parts)}</div>'


def _cards(history: GpuHistory) -> str:
    rows = []
    for i, info in enumerate(history.gpus):
        gpu = history.gpu[i] if i < len(history.gpu) else {}
        state = history.state[i] if i < len(history.state) else {}
        status = state.get("status", "ok")

        def cell(metric: str, text: str) -> str:
            return f'<td data-metric="{metric}">{html.escape(text)}</td>'

        latest = {name: history.latest(column) for name, column in gpu.items()}
        name = info.get("name") or NA
        if status != "ok":
            name += f" ({status}: {state.get('message') or 'not read'})"
        rows.append(
            f'<tr class="jp-air-GpuView-gpu" data-gpu-index="{i}">'
            + cell("index", str(info.get("index", i)))
            + cell("name", name)
            + cell("util", _fmt(latest.get("util"), "{:.0f} %"))
            + cell("mem", _memory(latest.get("mem"), info.get("mem_total_mib")))
            + cell("temp", _fmt(latest.get("temp"), "{:.0f} °C"))
            + cell("power", _power(latest.get("power"), info.get("power_limit_w")))
            + cell("processes", _processes(state.get("processes") or []))
            + "</tr>"
        )
    host = history.host
    host_row = (
        '<tr class="jp-air-GpuView-host">'
        f'<td></td><td data-metric="name">{html.escape(str(host.get("hostname", "host")))}'
        f" ({host.get('cpu_count', NA)} CPUs)</td>"
        f'<td data-metric="cpu">CPU {_fmt(history.latest(history.cpu), "{:.0f} %")}</td>'
        f'<td data-metric="mem">{_memory(history.latest(history.mem), host.get("mem_total_mib"))}'
        "</td><td></td><td></td><td></td></tr>"
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("#", "GPU", "Utilization", "Memory", "Temperature", "Power", "Processes")
    )
    return (
        f"<style>{CARD_STYLE}</style>"
        '<table class="jp-air-GpuView-cards" style="border-collapse: collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}{host_row}</tbody></table>"
    )


def _fmt(value: float | None, pattern: str) -> str:
    return NA if value is None else pattern.format(value)


def _memory(used: float | None, total: float | None) -> str:
    if used is None:
        return NA
    if total is None:
        return f"{used / 1024:.1f} GiB / {NA}"
    return f"{used / 1024:.1f} / {total / 1024:.1f} GiB"


def _power(draw: float | None, limit: float | None) -> str:
    if draw is None:
        return NA
    return f"{draw:.0f} W / {NA}" if limit is None else f"{draw:.0f} / {limit:.0f} W"


def _percent(value: float | None, total: float | None) -> float | None:
    return None if value is None or not total else round(100 * value / total, 1)


def _processes(processes: list[dict[str, Any]]) -> str:
    out = []
    for proc in processes:
        owner = proc.get("owner") or {}
        whose = owner.get("name") or (f"job {owner['id']}" if owner.get("kind") == "job" else "")
        memory = NA if proc.get("mem_mib") is None else f"{proc['mem_mib']} MiB"
        label = f"{proc.get('name') or NA} ({proc['pid']}) {memory}"
        hints = "".join(f" ⚠ {hint}" for hint in owner.get("hints") or [])
        out.append((f"{label}, {whose}" if whose else label) + hints)
    return "; ".join(out) or "none"
