"""What a distributed call shows in its cell: links, a live status, every rank's output.

Output is coalesced (one stream message per poll) and capped, so a chatty job cannot
grow a notebook without bound; progress bars update in place.
"""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from IPython.display import DisplayHandle, display

from ..job_dir import JobDir
from ..jobs.attempt_progress import of_attempt
from ..logs.query import LogLine
from ..paths import air_home
from ..status import AttemptStatus, Outcome
from .live_view import Live, hints_html

#: Output lines shown in a cell before the rest is only counted.
MAX_CELL_LINES = 2000

#: Seconds between two reads of the ranks' step marks for the status line's progress.
PROGRESS_EVERY = 2.0


#: A link in the header, styled inline: the widget view's HTML gets no notebook
#: stylesheet, where links would look like plain text.
LINK_STYLE = "color: var(--jp-content-link-color, #1976d2); text-decoration: underline"

#: The ``job_links`` entry that holds a command, not a URL: how to open the run where no
#: MLflow UI is served.
OPEN_RUN = "open run"


def link_parts(
    job_id: str, run_name: str | None, links: Mapping[str, str | None]
) -> tuple[list[str], list[str]]:
    """The run, experiment and logs links of a job, as HTML and as text: a page where a
    UI serves it, else the run's name, the command that opens it, the logs command. A
    cell's header and a session's start message say them alike."""
    parts_html: list[str] = []
    parts_text: list[str] = []
    for label, url in links.items():
        text = f"{label} {run_name}" if label == "run" and run_name else label
        if label == OPEN_RUN and url:  # a command: no UI to link to
            parts_html.append(f"{html.escape(label)}: <code>{html.escape(url)}</code>")
            parts_text.append(f"{label}: {url}")
        elif url:
            parts_html.append(
                f'<a href="{html.escape(url)}" target="_blank" rel="noopener" '
                f'style="{LINK_STYLE}">{html.escape(text)}</a>'
            )
            parts_text.append(f"{text}: {url}")
        elif label == "run":  # no UI to link to: still name the run
            parts_html.append(html.escape(text))
            parts_text.append(text)
        elif label == "logs":
            command = f"air logs {job_id}"
            parts_html.append(f"logs: <code>{html.escape(command)}</code>")
            parts_text.append(f"logs: {command}")
    return parts_html, parts_text


class JobView:
    """A job's cell output. The header (job, run, links) and the status line come first,
    then the run's chart, then the ranks' output as stream text. With widgets, header,
    status and a live chart are one ipywidgets view, replaced at the end by static
    outputs (HTML, and the final chart as a plotly figure with a text summary) so a
    saved notebook shows them without a kernel; without widgets, only those. A warm
    session's cell shows them in the same order, its header and status as one display
    once it has output or a status (the first status of most session cells is their
    last)."""

    def __init__(
        self,
        job_id: str,
        output_ranks: str,
        nnodes: int = 1,
        max_lines: int = MAX_CELL_LINES,
        tracking_uri: str | None = None,
        cell: int | None = None,
    ) -> None:
        self.job_id = job_id
        #: A warm session's cell: its status names the cell (a session has no retries),
        #: and its widget view waits for the first chart tick: most session cells end
        #: sooner, and building the widgets would cost them more than the cell itself.
        self._cell = cell
        self._output_ranks = output_ranks
        self._nnodes = nnodes
        self._max_lines = max_lines
        self._shown = 0
        self._elided = 0
        self._attempt = 1
        self._started = time.monotonic()
        self._logs_url: str | None = None
        self._header: DisplayHandle | None = None
        self._header_html = ""
        #: A session cell's header, not shown yet: it goes out in one display with its
        #: status, before the cell's first output line (most session cells last
        #: milliseconds, and each display costs them a round trip to ipykernel's I/O
        #: thread).
        self._header_later = False
        self._header_bundle: dict[str, str] = {}
        self._status: DisplayHandle | None = None
        self._status_bundle: dict[str, str] = {}
        self._steps_text = ""
        self._steps_read = -PROGRESS_EVERY
        self._progress: dict[tuple[int, int, str], DisplayHandle] = {}
        self._live: Live | None = None
        if tracking_uri is not None:
            self._live = Live(tracking_uri, JobDir.under(air_home(), job_id))

    def header(self, run_name: str | None, links: Mapping[str, str | None]) -> None:
        """Job id, run name and links, as soon as the run exists."""
        self._logs_url = links.get("logs")
        parts_html, parts_text = link_parts(self.job_id, run_name, links)
        parts_html.insert(0, f"<b>Job</b> <code>{html.escape(self.job_id)}</code>")
        parts_text.insert(0, f"Job {self.job_id}")
        self._header_html = '<div class="jp-air-JobHeader">' + " · ".join(parts_html) + "</div>"
        bundle = {"text/plain": " | ".join(parts_text), "text/html": self._header_html}
        self._header_bundle = bundle
        if self._cell is not None:
            self._header_later = True
        elif self._live is not None and self._live.start(self._header_html):
            self._header = self._live.handle
        else:
            self._header = display(bundle, raw=True, display_id=True)

    def _above_output(self) -> None:
        """Before the first output line: the header and status, then the chart's place
        under the status, as a fresh cell shows them (a session cell's header waits
        until now)."""
        if self._header_later:
            self.status(AttemptStatus.RUNNING, 1, 1)
        if self._live is not None and self._status is not None:
            self._live.reserve()

    def status(
        self,
        status: str,
        attempt: int,
        max_attempts: int,
        detail: str = "",
        hints: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """The one-line live status, updated in place, and the job's efficiency hints."""
        elapsed = time.monotonic() - self._started
        where = (
            f"cell {self._cell}" if self._cell is not None else f"attempt {attempt}/{max_attempts}"
        )
        text = f"{status.lower()} · {elapsed:,.1f} s · {where}"
        if progress := self._steps_line(status, attempt):
            text += f" · {progress}"
        if detail:
            text += f" · {detail}"
        shown = "".join(f"\n⚠ {h.get('text')}" for h in hints)
        bundle = {
            "text/plain": text + shown,
            "text/html": f'<div class="jp-air-JobStatus"><code>{html.escape(text)}</code></div>'
            + hints_html(hints),
        }
        self._status_bundle = bundle
        if self._live is not None and self._live.widget_status(bundle["text/html"]):
            return
        if self._status is None and self._header_later:  # one display of both
            self._header_later = False
            self._status = self._header = display(
                self._with_header(bundle), raw=True, display_id=True
            )
        elif self._status is not None and self._status is self._header:
            self._status.update(self._with_header(bundle), raw=True)
        elif self._status is None:
            self._status = display(bundle, raw=True, display_id=True)
            if self._live is not None and self._cell is None:
                self._live.reserve()
        else:
            self._status.update(bundle, raw=True)

    def _steps_line(self, status: str, attempt: int) -> str:
        """The attempt's progress, ETA and MFU from its ranks' step marks, read again
        every ``PROGRESS_EVERY`` seconds until it ends, and once more at its end."""
        ended = status.upper() in set(Outcome)
        if not ended and time.monotonic() - self._steps_read < PROGRESS_EVERY:
            return self._steps_text
        self._steps_read = time.monotonic()
        files = JobDir.under(air_home(), self.job_id).attempt(attempt)
        if self._cell is not None:  # a warm session's cell marks its steps apart
            files = files.late_cell(self._cell)
        shown = of_attempt(files, running=status.upper() == AttemptStatus.RUNNING)
        self._steps_text = shown.line() if shown else ""
        return self._steps_text

    def _with_header(self, status: Mapping[str, str]) -> dict[str, str]:
        header = self._header_bundle
        return {
            "text/plain": f"{header['text/plain']}\n{status['text/plain']}",
            "text/html": header["text/html"] + status["text/html"],
        }

    def chart(self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None) -> None:
        """New points of the runs (attempt, run id) for the live chart, at most every
        ``c.LiveView.interval`` seconds; only where the chart is live."""
        if self._live is None:
            return
        if self._cell is not None and self._live.widgets and self._live.handle is None:
            self._start_widgets()
        self._live.tick(attempts, gpus)

    def _start_widgets(self) -> None:
        """A session cell's widget view, once it has run a while: in place of the header
        and status shown so far, if any, so that it stays above the cell's output."""
        assert self._live is not None
        self._live.start(self._header_html, in_place_of=self._header)
        self._header_later = False
        self._header = self._status = self._live.handle

    def settle(
        self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None, ended: float
    ) -> None:
        """The job ended at ``ended``: the chart's last points (see ``Live.settle``)."""
        if self._live is not None:
            self._live.settle(attempts, gpus, ended)

    def finish(self, attempts: Sequence[tuple[int, str]], gpus: Sequence[int] | None) -> None:
        """The job is over: the final chart (and, with widgets, the static header and
        status in place of the widget view)."""
        if self._live is not None:
            self._live.finish(attempts, gpus, self._header_html, self._status_bundle)

    def show(self, attempt: int, lines: Iterable[LogLine]) -> None:
        """Lines of an attempt (progress updates drawn in place), under the ranks chosen."""
        out: list[str] = []
        err: list[str] = []
        for line in lines:
            if not self._wanted(line.rank):
                continue
            if attempt > self._attempt:
                out.append(self._separator(attempt, None))
            node = f"node {line.node} " if self._nnodes > 1 else ""
            prefix = f"[{node}rank {line.rank}] "
            if line.progress:
                self._show_progress(attempt, line, prefix)
                continue
            self._end_progress(attempt, line)
            if self._shown >= self._max_lines:
                self._elided += 1
                continue
            self._shown += 1
            (err if line.stream == "err" else out).append(f"{prefix}{line.text}\n")
        if out or err:
            self._above_output()
        if out:
            sys.stdout.write("".join(out))
            sys.stdout.flush()
        if err:
            sys.stderr.write("".join(err))
            sys.stderr.flush()

    def attempt_started(self, attempt: int, why: str | None) -> None:
        """Mark where a retry begins (once per attempt)."""
        if attempt > self._attempt:
            sys.stdout.write(self._separator(attempt, why))
            sys.stdout.flush()

    def _separator(self, attempt: int, why: str | None) -> str:
        self._attempt = attempt
        reason = f" (attempt {attempt - 1}: {why})" if why else ""
        return f"--- attempt {attempt}{reason} ---\n"

    def showed_all_of(self, rank: int) -> bool:
        """Whether every line of ``rank`` so far is in the cell (its traceback too)."""
        return self._wanted(rank) and not self._elided

    def _wanted(self, rank: int) -> bool:
        return self._output_ranks == "all" or (self._output_ranks == "0" and rank == 0)

    def _show_progress(self, attempt: int, line: LogLine, prefix: str) -> None:
        key = (attempt, line.rank, line.stream)
        bundle: dict[str, Any] = {"text/plain": prefix + line.text}
        handle = self._progress.get(key)
        if handle is None:
            self._above_output()
            self._progress[key] = display(bundle, raw=True, display_id=True)
        else:
            handle.update(bundle, raw=True)

    def _end_progress(self, attempt: int, line: LogLine) -> None:
        """A completed line ends that stream's progress bar: its final state is the line."""
        handle = self._progress.pop((attempt, line.rank, line.stream), None)
        if handle is not None:
            handle.update({"text/plain": ""}, raw=True)

    def elided_note(self) -> str | None:
        if not self._elided:
            return None
        where = f": {self._logs_url}" if self._logs_url else f" (air logs {self.job_id})"
        return f"{self._elided:,} more output lines not shown here; the full logs are kept{where}"
