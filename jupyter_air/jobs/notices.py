"""What a job's notifications say: its event, what ran, whose, how it ended, how long,
the failing rank's last lines and the links to its run and logs (``notify.message``).

Built by the job's supervisor, which holds the facts, for the job's own targets: a
message goes only to what the job's owner gave (a grantee cannot add one), and carries
the job's lines only to them.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from ..job_dir import AttemptDir
from ..logs.query import LogFilter, read_tail
from ..notify.message import LAST_LINES, Link, Message, duration
from ..notify.outbox import Notice
from ..notify.settings import AirNotify
from ..notify.targets import Event
from ..notify.targets import parse as parse_target
from ..redact import redact, redact_argv
from .spec import JobKind
from .store import Attempt, Job, JobStore

log = logging.getLogger(__name__)

_LEVEL = {
    Event.START: "info",
    Event.SUCCESS: "success",
    Event.FAILURE: "error",
    Event.CANCELLED: "warning",
    Event.RETRY: "warning",
    Event.HINT: "warning",
    Event.DURATION: "info",
    Event.TRACKING: "warning",
    Event.GUARD: "warning",
}


def notices(
    store: JobStore,
    job: Job,
    event: Event,
    key: str,
    settings: Callable[[], AirNotify],
    *,
    after: float | None = None,
    note: str | None = None,
    lines: Sequence[str] | None = None,
) -> list[Notice]:
    """One notice per target of the job that wants ``event`` (a ``duration`` one only
    for its own threshold ``after``; a guard's, every target: the guard chose when, and
    the owner's JupyterLab when the job has none); ``key`` names the event once for the
    job. ``settings`` are read only when some target wants it (most jobs have none)."""
    targets = store.targets(job.id)
    if event is Event.GUARD and not targets:
        targets = (parse_target("jupyterlab"),)
    chosen = [
        (i, t)
        for i, t in enumerate(targets)
        if (t.wants(event) or event is Event.GUARD) and (after is None or after in t.durations)
    ]
    if not chosen:
        return []
    message = job_message(store, job, event, settings(), note=note, lines=lines)
    return [
        Notice(f"job:{job.id}:{key}#{i}", job.owner, target, message, job_id=job.id)
        for i, target in chosen
    ]


def post_settled(store: JobStore, job_ids: Sequence[str]) -> None:
    """The end of jobs whose supervisor died before it said it (killed, the machine
    restarted), found by ``JobStore.settle``: told as a failure, by the courier (the
    supervisor's own post, had it made one, has the same key: nothing twice)."""
    from ..notify import courier
    from ..notify.settings import load

    settings: list[AirNotify] = []

    def once() -> AirNotify:
        if not settings:
            settings.append(load())
        return settings[0]

    found: list[Notice] = []
    for job_id in job_ids:
        try:
            found += notices(store, store.get(job_id), Event.FAILURE, "end", once)
        except Exception:  # the job's end stands; its notification is not worth a failure
            log.exception("notification of job %s's end", job_id)
    courier.send(store.outbox, found, try_now=False)


def job_message(
    store: JobStore,
    job: Job,
    event: Event,
    settings: AirNotify,
    *,
    note: str | None = None,
    lines: Sequence[str] | None = None,
) -> Message:
    """``note``: what the event says beyond the job's state (a hint's text, the threshold
    passed); ``lines``: the lines to show, else the failing rank's last ones."""
    attempts = store.attempts(job.id)
    last = attempts[-1] if attempts else None
    what, facts = describe(job, attempts)
    title = f"{what}: {_headline(job, event, last, note)}"
    if lines is None:
        lines = failing_lines(store, job, last) if event in (Event.FAILURE, Event.RETRY) else ()
    return Message(
        event=event,
        title=title,
        level=_LEVEL.get(event, "info"),
        owner=job.owner,
        facts=tuple(facts),
        lines=tuple(lines),
        links=tuple(links(job, last, settings)),
        command=f"air logs {job.id}",
        job_id=job.id,
    )


def _headline(job: Job, event: Event, last: Attempt | None, note: str | None) -> str:
    message = redact(job.message or (last.message if last else None) or "")
    if event is Event.SUCCESS:
        return "succeeded"
    if event is Event.FAILURE:
        if message.startswith("timed out"):
            return message
        return f"failed: {message}" if message else "failed"
    if event is Event.CANCELLED:
        return f"cancelled ({message})" if message else "cancelled"
    if event is Event.RETRY and last is not None:
        why = redact(last.message or "")
        return f"attempt {last.attempt} failed ({why}); attempt {last.attempt + 1} starts"
    if event is Event.START:
        return "started"
    return note or event.value


def describe(job: Job, attempts: list[Attempt]) -> tuple[str, list[tuple[str, str]]]:
    """The job in a few words (a title's head) and its facts."""
    spec, tags = job.spec, dict(job.spec.tracking.tags)
    schedule, task = tags.get("air.schedule"), tags.get("air.task_key")
    if schedule and task:
        what = f"{schedule}.{task}"
    elif spec.kind is JobKind.COMMAND:
        argv = redact_argv(spec.program.command)
        # ``/opt/conda/envs/x/bin/python train.py`` reads ``python train.py`` in a title
        what = " ".join([Path(argv[0]).name, *argv[1:]] if argv else [])[:80]
    elif spec.kind is JobKind.SESSION:
        what = "warm session"
    else:
        notebook = tags.get("air.notebook")
        what = f"cell of {notebook.rsplit('/', 1)[-1]}" if notebook else "distributed call"
    facts: list[tuple[str, str]] = [("Job", job.id), ("Owner", job.owner)]
    if schedule:
        facts.append(("Schedule", schedule))
        if task:
            facts.append(("Task", task))
        if run := tags.get("air.schedule_run"):
            facts.append(
                ("Schedule run", f"{run} (scheduled {tags.get('air.scheduled_time', '?')})")
            )
    if spec.kind is JobKind.COMMAND and not (schedule and task):
        facts.append(("Command", " ".join(redact_argv(spec.program.command))))
    if notebook := tags.get("air.notebook"):
        facts.append(("Notebook", notebook))
    facts.append(("Status", job.status.value + (f": {redact(job.message)}" if job.message else "")))
    if job.started is not None:
        facts.append(("Duration", duration((job.ended or _now()) - job.started)))
    if len(attempts) > 1 or spec.policy.max_retries:
        facts.append(("Attempts", f"{len(attempts)} of {spec.policy.max_retries + 1}"))
    compute = spec.compute
    facts.append(
        (
            "Ranks",
            f"{compute.nproc_per_node} x {compute.nnodes} node(s) on {spec.backend.name}, "
            f"host {tags.get('air.host') or socket.gethostname()}",
        )
    )
    return f"air job {job.id} ({what})", facts


def failing_lines(store: JobStore, job: Job, attempt: Attempt | None) -> list[str]:
    """The failing rank's last lines (rank 0's when none is named)."""
    if attempt is None:
        return []
    files = AttemptDir(store.attempt_dir(job.id, attempt.attempt))
    rank = attempt.failed_rank if attempt.failed_rank is not None else 0
    try:
        page = read_tail(files.path, LogFilter(rank=rank), LAST_LINES)
    except OSError:
        return []
    return [redact(line.text)[:300] for line in page.lines]


def links(job: Job, attempt: Attempt | None, settings: AirNotify) -> list[Link]:
    """The job's logs view and its attempt's run page, as the user's browser reaches
    them: under ``c.AirNotify.lab_url`` when set, else the Jupyter server running here."""
    from ..tracking.stores import register_store
    from ..tracking.ui_links import current_jupyter_server, is_local_store, run_url, ui_base

    lab = settings.lab_url
    if not lab:
        server = current_jupyter_server()
        lab = server.url if server is not None else ""
    lab = lab if not lab or lab.endswith("/") else lab + "/"
    found = [Link("Logs", f"{lab}lab?air-job={job.id}")] if lab else []
    uri, experiment = job.spec.tracking.tracking_uri or "", job.experiment_id
    if attempt is None or not attempt.run_id or not experiment or not uri:
        return found
    if settings.lab_url and is_local_store(uri):  # the store's UI, served by that Jupyter
        base: str | None = f"{lab}jupyter-air/mlflow/{register_store(uri)}/"
    else:
        base = ui_base(uri, absolute=True)
    if base:
        found.append(Link("MLflow run", run_url(base, experiment, attempt.run_id)))
    return found


def _now() -> float:
    import time

    return time.time()
