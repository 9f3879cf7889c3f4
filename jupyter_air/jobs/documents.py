"""Jobs as their JSON documents (docs/api.md), for the server and ``air --output json``:
``api_models.JobDocument``, sent as ``model_dump(mode="json")``.

A document is what others see of a job: secrets are redacted (``redact``), and the
workload's environment, whose values may be secrets, is not in it at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..identity import Identity
from ..job_dir import AttemptDir, JobDir
from ..procs import alive
from ..redact import redact, without_userinfo
from ..status import AttemptStatus, JobStatus
from .api_models import AttemptDocument, AttemptNode, JobDocument, ProgressDocument
from .attempt_progress import Shown, of_attempt, of_session
from .node.outcome import is_final
from .node.stacks import named_hang
from .spec import JobKind
from .store import Attempt, Job, JobStore

#: (tracking URI, experiment id, run id) -> the run's page in an MLflow UI, or None.
RunLink = Callable[[str, str, str], str | None]


def job_documents(
    store: JobStore, jobs: list[Job], who: Identity, run_link: RunLink | None = None
) -> list[dict[str, Any]]:
    """The documents of a page of jobs as ``who`` sees them, their attempts and their
    children read in one query each."""
    attempts = store.attempts_of(jobs)
    children = store.children([job.id for job in jobs], who)
    told = _notifications(store, [job for job in jobs if job.owner == who.name])
    return [
        job_document(
            store, job, who, run_link, attempts[job.id], children[job.id], told.get(job.id, [])
        )
        for job in jobs
    ]


def _notifications(store: JobStore, jobs: list[Job]) -> dict[str, list[str]]:
    """Each job's notifications in one line each, read in one query."""
    told: dict[str, list[str]] = {}
    if jobs:
        for record in store.outbox.records(job_ids=[job.id for job in jobs]):
            told.setdefault(record.job_id or "", []).append(record.line())
    return told


def job_document(
    store: JobStore,
    job: Job,
    who: Identity,
    run_link: RunLink | None = None,
    attempts: list[Attempt] | None = None,
    children: list[str] | None = None,
    notifications: list[str] | None = None,
) -> dict[str, Any]:
    """``attempts`` and ``children`` (those ``who`` may view): the job's, when already
    read (see ``job_documents``). ``notifications``: the job's, shown to its owner only
    (where they went is the owner's business; the lines never carry a webhook's URL).

    A job whose last attempt settled its outcome shows that outcome at once, ``finishing``
    while its supervisor ends the run in MLflow and attaches the logs (seconds, for a big
    log): what ``air run --watch`` printed is what ``air get`` shows next."""
    spec, experiment_id = job.spec, job.experiment_id
    uri = spec.tracking.tracking_uri
    documents = []
    attempts = store.attempts(job.id) if attempts is None else attempts
    for a in attempts:
        url = None
        if run_link is not None and a.run_id and uri and experiment_id:
            url = run_link(uri, experiment_id, a.run_id)
            url = without_userinfo(url) if url else None
        files = AttemptDir(store.attempt_dir(job.id, a.attempt))
        nodes, resumed = files.read_nodes(), files.read_resumed()
        shown = _progress(store, job, files, a.status is AttemptStatus.RUNNING)
        documents.append(
            AttemptDocument(
                attempt=a.attempt,
                status=a.status,
                run_id=a.run_id,
                started=a.started,
                ended=a.ended,
                exit_codes=a.exit_codes,
                failed_rank=a.failed_rank,
                message=_shown(a.message),
                run_url=url,
                nodes=[AttemptNode.model_validate(n) for n in nodes],
                resumed_from=resumed[0] if resumed else None,
                resumed_step=resumed[1] if resumed else None,
                progress=ProgressDocument.model_validate(shown.to_json()) if shown else None,
                hang=named_hang(files.path),
            )
        )
    status, message, finishing = job.status, job.message, _finishing(job)
    last = attempts[-1] if attempts else None
    retries = spec.policy.max_retries
    if not job.done and last and is_final(last.status, last.ended, last.attempt, retries):
        status, message, finishing = JobStatus(last.status), last.message, True
    return JobDocument(
        id=job.id,
        status=status,
        finishing=finishing,
        tracking=tracking_line(store, job, attempts),
        owner=job.owner,
        created=job.created,
        started=job.started,
        ended=job.ended,
        message=_shown(message),
        kind=spec.kind,
        nproc_per_node=spec.compute.nproc_per_node,
        nnodes=spec.compute.nnodes,
        backend=spec.backend.name,
        max_retries=retries,
        checkpoint_dir=spec.program.checkpoint_dir,
        experiment_id=experiment_id,
        run_name=spec.tracking.run_name,
        tracking_uri=_shown(uri),
        logs_expired=not store.job_dir(job.id).exists(),
        attempts=documents,
        parent_id=job.parent_id,
        children=store.children([job.id], who)[job.id] if children is None else children,
        notifications=(
            _notifications(store, [job]).get(job.id, [])
            if notifications is None and job.owner == who.name
            else notifications or []
        ),
    ).model_dump(mode="json")


def _progress(store: JobStore, job: Job, files: AttemptDir, running: bool) -> Shown | None:
    """The attempt's progress from its ranks' step marks; a warm session's is its latest
    cell's (each cell marks its own steps)."""
    if job.spec.kind is JobKind.SESSION:
        cell = of_session(JobDir(store.job_dir(job.id)))
        if cell is None:
            return None
        files, running = cell[0], running and cell[1]
    return of_attempt(files, running, job.spec.compute.world_size)


#: Seconds after its end a job's supervisor may still be finishing its run's tail (it
#: waits for its tail process's answer this long at most, then sweeps what is left).
FINISHING_FOR = 900.0


def _finishing(job: Job) -> bool:
    """An ended job whose supervisor still hands its run's tail over, or waits for it."""
    pid, ended = job.supervisor_pid, job.ended
    if not job.done or pid is None or ended is None or not job.supervised_here:
        return False
    return time.time() - ended < FINISHING_FOR and alive(pid, started_by=job.started)


def tracking_line(store: JobStore, job: Job, attempts: list[Attempt]) -> str | None:
    """The one line on what of the job's runs waits for its tracking server (the
    newest attempt's that has any): see ``tracking.backlog``."""
    from ..tracking import backlog

    for a in reversed(attempts):
        waiting = backlog.read(AttemptDir(store.attempt_dir(job.id, a.attempt)))
        if waiting is not None:
            return waiting.line(job.id)
    return None


def _shown(text: str | None) -> str | None:
    return redact(text) if text else text
