"""``air``: submit and inspect jobs from a shell.

``air run -f workload.yaml``, ``air list``, ``air get ID``, ``air logs ID``, ``air cancel ID``,
``air permissions ID``. The caller is the OS user (with its OS groups): a store on a
shared disk may hold others' jobs, shown and touched only as their permissions allow.
Exit status 0 on success; otherwise non-zero with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .identity import Identity, os_identity
from .jobs.api_models import change_document
from .jobs.permissions import (
    BadGrant,
    Forbidden,
    JobAccess,
    Level,
    merged,
    parse_grant,
    parse_principal,
)
from .jobs.request import Defaults, JobRequest, Program
from .jobs.service import Conflict, JobService, NoLogs
from .jobs.spec import JobKind
from .jobs.store import Job, JobStore, StoreError, UnknownJob
from .jobs.supervision.outcome import shown_exit_codes
from .jobs.workload_file import TrackingMode, WorkloadFile
from .logs.query import BadFilter, LogFilter, LogLine, read_all_text, read_tail
from .logs.text import format_line
from .paths import UnsafeHome
from .redact import redact
from .status import JobStatus, Outcome


class CliError(Exception):
    """A reason to stop, said in one line."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(argv).parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as err:
        print(f"air: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``air get ID | head -3``): end quietly, as git and grep
        # do; stdout points at /dev/null so that the exit's flush fails no more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="air", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="submit a workload file as a job",
        description="Submit a workload file as a job. The command's `python` is the "
        "interpreter air runs under: its directory comes first on the ranks' PATH, "
        "unless the workload's env sets PATH.",
    )
    run.add_argument("-f", "--file", required=True, type=Path, help="the workload YAML")
    run.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="change one field, e.g. compute.nproc_per_node=4 (repeatable)",
    )
    run.add_argument(
        "--backend",
        metavar="NAME",
        help="the engine, replacing the workload's `backend:` (whose settings stay only "
        "if it is the same); docs/backends.md lists the installed ones",
    )
    run.add_argument(
        "--backend-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the backend, over the workload's (repeatable), e.g. "
        "partition=gpu; docs/backends.md lists each backend's",
    )
    run.add_argument(
        "--tracking",
        choices=[m.value for m in TrackingMode],
        help="when the MLflow tracking server does not answer: required refuses in one "
        "line (the default); deferred runs now and makes its run once it answers "
        "(the workload's `tracking:`)",
    )
    run.add_argument(
        "--notify",
        action="append",
        metavar="TARGET",
        help="tell the owner of the job's events, replacing the workload's `notify:` "
        "(repeatable; none: no notification): jupyterlab, email:ADDRESS or webhook:URL, "
        "with on:EVENT,... e.g. 'email:me@example.com on:failure,duration:2h'",
    )
    run.add_argument(
        "--resume",
        metavar="JOB",
        help="start from the latest complete checkpoint of job JOB (a run again after a "
        "fix; the workload's `resume:`); see docs/long-runs.md",
    )
    run.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="where the job's checkpoints go ($AIR_CHECKPOINT_DIR in every rank, the same "
        "for each attempt; the workload's `checkpoint_dir:`)",
    )
    run.add_argument("--dry-run", action="store_true", help="validate and print, submit nothing")
    run.add_argument(
        "--oversubscribe",
        action="store_true",
        help="start more ranks than this machine's GPUs, or than 4 per core (refused otherwise)",
    )
    run.add_argument(
        "--watch",
        action="store_true",
        help="stream node 0's logs until the job's outcome is known; print its last run and "
        "exit with its status (the run's MLflow end and log artifacts finish in the background)",
    )
    run.add_argument(
        "--output",
        choices=["text", "json"],
        default="text",
        help="json: print the job's document (as air get --output json does) and nothing "
        "else; with --watch, the document once the outcome is known",
    )
    run.set_defaults(func=_run)

    listing = sub.add_parser("list", help="active jobs (all with --all-status)")
    listing.add_argument("--all-status", action="store_true", help="finished jobs too")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    _output(listing)
    listing.set_defaults(func=_list)

    get = sub.add_parser("get", help="one job: status, times, compute, attempts, runs")
    get.add_argument("job_id")
    _output(get)
    get.set_defaults(func=_get)

    logs = sub.add_parser("logs", help="a job's logs (the latest attempt by default)")
    logs.add_argument("job_id")
    logs.add_argument("--attempt", type=int)
    logs.add_argument("--node", type=int)
    logs.add_argument("--rank", type=int)
    logs.add_argument(
        "--level",
        choices=["info", "warning", "error"],
        default="info",
        help="lines at least this level",
    )
    logs.add_argument("--since", help="ISO time (2026-11-29T08:30) or Unix seconds")
    logs.add_argument("--until", help="ISO time or Unix seconds")
    logs.add_argument("--minutes", type=float, help="only the last M minutes")
    logs.add_argument("--lines", type=int, help="only the last N lines")
    logs.add_argument("--search", help="case-insensitive substring")
    logs.add_argument("--regex", action="store_true", help="--search is a regular expression")
    logs.add_argument("--cell", type=int, metavar="N", help="a session's cell N only")
    logs.add_argument(
        "--follow",
        action="store_true",
        help="stream new lines until the job ends (Ctrl-C stops following only)",
    )
    logs.add_argument(
        "--download-to",
        type=Path,
        metavar="DIR",
        help="write attempt_K/node_N/rank_R.log files into DIR",
    )
    logs.set_defaults(func=_logs)

    syncing = sub.add_parser(
        "sync",
        help="ship rank 0's metrics still waiting for MLflow (all your ended jobs, or one)",
        description="Ship what ended jobs' metrics journals still hold to their MLflow runs "
        "(a tracking server that was down when they ended), in order, none twice; say what "
        "is left. Exits 1 while something is left.",
    )
    syncing.add_argument("job_id", nargs="?")
    _output(syncing)
    syncing.set_defaults(func=_sync)

    cancelling = sub.add_parser("cancel", help="stop every rank of a job")
    cancelling.add_argument("job_id")
    cancelling.set_defaults(func=_cancel)

    stacking = sub.add_parser(
        "stacks",
        help="every rank's Python stacks now (a stuck job: where is it?), or those saved",
        description="Take every running rank's Python stacks with py-spy (all threads, "
        "C frames too), saved with the attempt; --saved shows those taken before (asked "
        "for, at a likely hang, at a cancel after one).",
    )
    stacking.add_argument("job_id")
    stacking.add_argument("--rank", type=int, help="this rank's only")
    stacking.add_argument("--saved", action="store_true", help="the sets taken before")
    _output(stacking)
    stacking.set_defaults(func=_stacks)

    notifying = sub.add_parser(
        "notify",
        help="tell yourself of a running job's events from now on (its owner only)",
        description="Add notification targets to a job that runs, e.g. "
        "air notify ID 'email:me@example.com on:failure,success'. See docs/notifications.md.",
    )
    notifying.add_argument("job_id")
    notifying.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="jupyterlab, email:ADDRESS or webhook:URL, with on:EVENT,... (default: its end)",
    )
    _output(notifying)
    notifying.set_defaults(func=_notify)

    permissions = sub.add_parser(
        "permissions", help="who may view, cancel or manage a job; --grant/--revoke change it"
    )
    permissions.add_argument("job_id")
    permissions.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="[group:]NAME:LEVEL",
        help="e.g. bob:CAN_VIEW or group:ml-team:CAN_MANAGE_RUN (repeatable; needs CAN_MANAGE)",
    )
    permissions.add_argument(
        "--revoke",
        action="append",
        default=[],
        metavar="[group:]NAME",
        help="e.g. carol or group:ml-team (repeatable; needs CAN_MANAGE)",
    )
    _output(permissions)
    permissions.set_defaults(func=_permissions)

    # air schedule ..., air scheduler status|stop: their parsers (cron, pydantic models)
    # load only for them or the list of commands, not for every other command.
    if not argv or argv[0] in ("schedule", "scheduler", "-h", "--help"):
        from .schedules.cli import add_commands

        add_commands(sub)
    return parser


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", choices=["text", "json"], default="text")


def _service(settle: bool = False) -> JobService:
    """The jobs service as the OS user; with ``settle``, once the jobs whose supervisor
    died are recorded as failed (what is shown is the same; the record keeps their end
    time), unless another process holds the database."""
    try:
        store = JobStore()
    except (UnsafeHome, StoreError) as err:
        raise CliError(str(err)) from None
    if settle:
        with contextlib.suppress(sqlite3.OperationalError):
            store.settle()
    from .tracking.run_tails import resume_pending

    resume_pending(store.home)  # what a server that was down still owes: tried again
    return JobService(store, os_identity(), _run_link)


def _job(service: JobService, job_id: str, needed: Level = Level.CAN_VIEW) -> Job:
    """The job, if the OS user holds ``needed`` on it."""
    try:
        return service.get(job_id, needed)
    except UnknownJob:
        raise CliError(f"no job {job_id!r}") from None
    except Forbidden as err:
        raise CliError(str(err)) from None


def _run_link(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    from .tracking.ui_links import run_url, ui_base

    base = ui_base(tracking_uri, absolute=True)
    return run_url(base, experiment_id, run_id) if base else None


# -- run ---------------------------------------------------------------------------


def _with(spec: WorkloadFile, field: str, value: Any, flag: str) -> WorkloadFile:
    """The workload with ``flag``'s value for ``field``, checked as the file's is."""
    from pydantic import ValidationError

    from .jobs.workload_file import WorkloadError, describe

    try:
        return type(spec).model_validate({**spec.model_dump(), field: value})
    except ValidationError as err:
        raise WorkloadError(describe(err, lambda loc: flag)) from None


def _on_backend(spec: WorkloadFile, backend: str, pairs: list[str]) -> WorkloadFile:
    """The workload on ``backend`` (``--backend``) with ``--backend-opt``'s settings over
    its own (those of another backend dropped), checked as the file's are."""
    from pydantic import ValidationError

    from .jobs import backends
    from .jobs.backends.settings import FLAG, BadPair, from_pairs
    from .jobs.workload_file import FILE_NAMES, WorkloadError, describe

    model = backends.get(backend).settings_model if backend in backends.names() else None
    try:
        given = from_pairs(FLAG, pairs, model)
    except BadPair as err:
        raise WorkloadError(str(err)) from None
    kept = spec.backend_settings if backend == spec.backend else {}
    data = {**spec.model_dump(), "backend": backend, "backend_settings": {**kept, **given}}
    names = {**FILE_NAMES, "backend": "--backend", "backend setting": f"{FLAG} {{key}}"}
    try:
        return type(spec).model_validate(data, context={"names": names})
    except ValidationError as err:
        raise WorkloadError(describe(err, lambda loc: "--backend")) from None


def _run(args: argparse.Namespace) -> int:
    from .jobs.service import Refused, place
    from .jobs.workload_file import WorkloadError, load
    from .tracking.probe import Unreachable

    try:
        spec = load(args.file, args.override)
        if args.tracking:
            spec = spec.model_copy(update={"tracking": TrackingMode(args.tracking)})
        if args.notify is not None:
            spec = _with(spec, "notify", [n for n in args.notify if n != "none"], "--notify")
        if args.resume is not None:
            spec = _with(spec, "resume", args.resume, "--resume")
        if args.checkpoint_dir is not None:
            spec = _with(spec, "checkpoint_dir", args.checkpoint_dir, "--checkpoint-dir")
        if args.backend is not None or args.backend_opt:
            spec = _on_backend(spec, args.backend or spec.backend, args.backend_opt)
    except WorkloadError as err:
        raise CliError(str(err)) from None
    defaults = Defaults(
        nproc_per_node=spec.compute.nproc_per_node,
        oversubscribe=args.oversubscribe,
        override="--oversubscribe (compute.oversubscribe: true)",
    )
    working_dir = (args.file.parent / spec.working_dir).resolve()
    if args.dry_run:
        try:  # what the backend would be asked, reaching no cluster
            place(
                spec,
                os_identity().name,
                nproc_per_node=defaults.nproc_per_node,
                oversubscribe=defaults.oversubscribe,
                override=defaults.override,
                reach=False,
            )
        except Refused as err:
            raise CliError(f"{args.file}: {err.field}: {err}" if err.field else str(err)) from None
        print(
            json.dumps(
                {
                    **spec.model_dump(),
                    "notify": [t.shown() for t in spec.targets(unwatched=True)],
                    "argv": spec.argv,
                    "working_dir": str(working_dir),
                },
                indent=2,
            )
        )
        return 0
    if not working_dir.is_dir():
        raise CliError(f"working_dir {working_dir} is not a directory")
    service = _service()
    try:
        started = service.start(_request(spec, working_dir, defaults))
    except Refused as err:
        raise CliError(f"{args.file}: {err.field}: {err}" if err.field else str(err)) from None
    except Unreachable as err:  # a server that is down: said in seconds
        raise CliError(err.refusal()) from None
    job = started.job
    if started.down is not None:
        print(f"{started.down}: the job runs now; its run is made once it answers", file=sys.stderr)
    if args.output == "json":
        if args.watch:
            _outcome_known(service, job.id)
        print(json.dumps(service.document(service.store.get(job.id)), indent=2))
        return _exit_status(service, job.id) if args.watch else 0
    print(
        f"Job {job.id} submitted: {spec.compute.nproc_per_node} rank(s) x "
        f"{spec.compute.nnodes} node(s) ({spec.backend}), "
        f"experiment {spec.experiment_name!r}, run {spec.run_name!r}"
    )
    print(f"  run:  air get {job.id} (its supervisor starts the MLflow run)")
    if spec.grants:  # its supervisor gives them on the MLflow experiment too, once made
        print(f"  shared: {', '.join(map(str, spec.grants))}")
    from .tracking.ui_links import logs_url

    view = logs_url(job.id, absolute=True)
    print(f"  logs: air logs {job.id} --follow" + (f"  or  {view}" if view else ""))
    if not args.watch:
        return 0
    _follow(service.store, job.id, LogFilter(node=0), None)
    return _watched(service, job.id)


def _outcome_known(service: JobService, job_id: str) -> None:
    """Wait, without printing, until the job's outcome is known (``--watch`` in JSON)."""
    from .jobs.follow import outcome

    while outcome(service.store, job_id) is None:
        time.sleep(0.2)


def _exit_status(service: JobService, job_id: str) -> int:
    return 0 if service.document(service.store.get(job_id))["status"] == JobStatus.SUCCEEDED else 1


def _watched(service: JobService, job_id: str) -> int:
    """The end of ``--watch``: the outcome and the last attempt's run, as soon as the
    outcome is known; the run's MLflow tail (its end, its logs as artifacts) goes on
    in the background, and ``air get`` shows the job ended once it is done."""
    from .jobs.follow import outcome

    store = service.store
    job = store.get(job_id)
    status, message = outcome(store, job_id) or (job.status, job.message)
    attempts = store.attempts(job_id)
    if attempts and attempts[-1].run_id:
        run_id, experiment_id = attempts[-1].run_id, store.get(job_id).experiment_id
        uri = job.spec.tracking.tracking_uri or ""
        link = experiment_id and _run_link(uri, experiment_id, run_id)
        print(f"  run:  {link or run_id}")
    print(f"Job {job_id} {status.lower()}" + (f": {message}" if message else ""))
    return 0 if status == JobStatus.SUCCEEDED else 1


def _request(spec: WorkloadFile, working_dir: Path, defaults: Defaults) -> JobRequest:
    """A workload file's job: its command on every rank, in nobody's kernel."""
    from .identity import mlflow_user
    from .tracking.targets import ExperimentRef, current_tracking_uri

    return JobRequest(
        spec,
        Program(
            JobKind.COMMAND,
            command=spec.argv,
            background=True,  # nobody's kernel: the job outlives this shell
            working_dir=str(working_dir),
            run_name=spec.run_name,
        ),
        ExperimentRef(current_tracking_uri(), spec.experiment_name, spec.mlflow_artifact_location),
        mlflow_user(),
        defaults=defaults,
        tags={"air.command": redact(spec.command)},
    )


# -- list / get ----------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CliError("--limit must be >= 1")
    service = _service(settle=True)
    jobs = service.jobs(active_only=not args.all_status, limit=args.limit)
    if args.output == "json":
        print(json.dumps(service.documents(jobs), indent=2))
        return 0
    if not jobs and args.all_status:
        print("no jobs")
        return 0
    if not jobs:
        ended = service.count()
        shown = f"; {ended} ended: air list --all-status shows them" if ended else ""
        print(f"no active jobs{shown}")
        return 0
    print(f"{'JOB':24} {'STATUS':10} {'CREATED':19} {'RANKS':>5} RUN")
    for job in jobs:
        print(
            f"{job.id:24} {job.status:10} {_time(job.created):19} "
            f"{job.spec.compute.world_size:>5} {job.spec.tracking.run_name or ''}"
        )
    return 0


def _get(args: argparse.Namespace) -> int:
    service = _service(settle=True)
    doc = service.document(_job(service, args.job_id))
    if args.output == "json":
        print(json.dumps(doc, indent=2))
        return 0
    notes = [doc["message"]] if doc["message"] else []
    if doc["finishing"]:
        notes.append("finishing: ending its MLflow run, attaching logs")
    print(f"Job {doc['id']}: {doc['status']}" + (f" ({'; '.join(notes)})" if notes else ""))
    print(f"  owner:    {doc['owner']}")
    print(
        f"  created:  {_time(doc['created'])}   started: {_time(doc['started'])}   "
        f"ended: {_time(doc['ended'])}"
    )
    print(
        f"  compute:  {doc['nproc_per_node']} rank(s) x {doc['nnodes']} node(s) "
        f"({doc['backend']}), max {doc['max_retries']} retries"
    )
    if doc["checkpoint_dir"]:
        print(f"  checkpoints: {doc['checkpoint_dir']}")
    if doc["logs_expired"]:
        print("  logs:     expired (removed by retention)")
    for a in doc["attempts"]:
        failed = f", failed rank {a['failed_rank']}" if a["failed_rank"] is not None else ""
        print(
            f"  attempt {a['attempt']}: {a['status']}, "
            f"exit codes {shown_exit_codes(a['exit_codes'])}{failed}"
            + (f": {a['message']}" if a["message"] else "")
        )
        print(f"    run: {a['run_url'] or a['run_id'] or 'made once its tracking server answers'}")
        if a["resumed_from"]:
            step = f", step {a['resumed_step']}" if a["resumed_step"] is not None else ""
            print(f"    resumed from {a['resumed_from']}{step}")
        for n in a["nodes"]:
            print(f"    node {n['node']}: {n['hostname']} {n['ip']}, {n['label'] or n['node_id']}")
    if doc["kind"] == JobKind.SESSION:
        _print_cells(service.store, doc["id"])
    _print_waiting(doc, service.store)
    for line in doc["notifications"]:
        print(f"  notified: {line}")
    if doc["parent_id"]:
        print(f"  started by job {doc['parent_id']} (air get {doc['parent_id']})")
    if doc["children"]:
        print(f"  jobs it started: {len(doc['children'])}")
        for child in service.documents([service.store.get(c) for c in doc["children"]]):
            last = child["attempts"][-1] if child["attempts"] else None
            run = last and (last["run_url"] or last["run_id"])
            print(
                f"    {child['id']}  {child['status']:<9} {child['run_name'] or ''}"
                + (f"  run: {run}" if run else "")
            )
    return 0


def _sync(args: argparse.Namespace) -> int:
    """What ended jobs' runs still owe MLflow, sent now: the journal's points, the runs'
    ends and their logs (``run_tails.finish``, as the tail process does), even those the
    server refused for good before; and what is left, and why."""
    from .job_dir import JobDir
    from .tracking import backlog, journal, run_tails
    from .tracking.targets import bound_requests

    bound_requests()  # a server that does not answer: said within a minute
    service = _service()
    if args.job_id:
        jobs = [_job(service, args.job_id, Level.CAN_MANAGE_RUN)]
    else:
        jobs = [j for j in service.jobs() if j.owner == service.caller.name]
    spool = service.store.home / "tails"
    pending: dict[tuple[str, int], list[run_tails.Tail]] = {}
    for kept in run_tails.pending(spool):  # an attempt's, and its session cells'
        pending.setdefault((kept.job_id, kept.attempt), []).append(kept)
    clients: dict[str, Any] = {}

    def client_for(uri: str) -> Any:
        from mlflow import MlflowClient

        return clients.setdefault(uri, MlflowClient(uri))

    report: list[dict[str, Any]] = []
    for job in jobs:
        if not job.done:
            if args.job_id:
                print(f"Job {job.id} is {job.status.lower()}: its supervisor ships its metrics")
            continue
        runs = {a.attempt: a.run_id for a in service.store.attempts(job.id)}
        for files in JobDir(service.store.job_dir(job.id)).attempts():
            tails = pending.get((job.id, files.number), [])
            if not tails and journal.waiting(files) and runs.get(files.number):
                tails = [
                    run_tails.Tail(
                        job.id,
                        files.number,
                        str(runs[files.number]),
                        str(job.status),
                        job.spec.tracking.tracking_uri or "",
                        str(files.path),
                        sample=False,
                        parts=(backlog.Part.METRICS,),
                    )
                ]
            if not tails:
                continue
            before = journal.waiting_points(files)
            answers = [run_tails.finish(client_for, tail) for tail in tails]
            for tail, answer in zip(tails, answers, strict=True):
                run_tails.keep_pending(spool, tail, answer)
            left = journal.waiting_points(files)
            errors = [error for answer in answers if (error := answer.error())]
            report.append(
                {
                    "job_id": job.id,
                    "attempt": files.number,
                    "shipped": before - left,
                    "waiting_points": left,
                    "left": sorted(set().union(*(answer.left() for answer in answers))),
                    "error": redact(errors[0].splitlines()[0][:300]) if errors else None,
                }
            )
    if args.output == "json":
        print(json.dumps(report, indent=2))
    elif not report:
        print("Nothing waits: every ended job's runs are all in MLflow.")
    for e in report if args.output == "text" else []:
        said = f"Job {e['job_id']} attempt {e['attempt']}: {e['shipped']} points shipped"
        if e["left"]:
            said += f"; still waiting: {', '.join(e['left'])}: {e['error']}"
        print(said)
    return 1 if any(e["left"] for e in report) else 0


def _print_waiting(doc: dict[str, Any], store: JobStore) -> None:
    """What of the job's runs waits for its tracking server: the line of the jobs API,
    or, for a journal no shipper has tried yet, how much of it waits."""
    from .job_dir import JobDir
    from .tracking import journal

    if doc["tracking"]:
        print(f"  {doc['tracking']}")
        return
    if doc["status"] not in set(Outcome):
        return
    waiting = sum(journal.waiting_points(a) for a in JobDir(store.job_dir(doc["id"])).attempts())
    if waiting:
        print(f"  metrics:  {waiting} points not in MLflow yet: air sync {doc['id']}")


def _print_cells(store: JobStore, job_id: str) -> None:
    """A session's cells: each ran as a child run of the session's."""
    from .job_dir import JobDir
    from .jobs.sessions.cells import cells

    ran = cells(JobDir(store.job_dir(job_id)))
    print(f"  cells run: {len(ran)}" + (f" (air logs {job_id} --cell N)" if ran else ""))
    for c in ran:
        print(f"    cell {c.cell}  {c.status:<9} {c.ended - c.started:.1f} s  run: {c.run_id}")


def _time(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


# -- logs ------------------------------------------------------------------------------


def _logs(args: argparse.Namespace) -> int:
    service = _service()
    store = service.store
    job = _job(service, args.job_id)
    if args.follow:  # just submitted: its supervisor is starting it
        _first_attempt(store, job.id)
    try:
        logs = service.log_attempt(job, args.attempt)
    except NoLogs as err:
        raise CliError(str(err)) from None
    since = _when(args.since, "--since")
    if args.minutes is not None:
        since = max(since or 0.0, time.time() - args.minutes * 60)
    try:
        flt = LogFilter(
            node=args.node,
            rank=args.rank,
            level=args.level,
            since=since,
            until=_when(args.until, "--until"),
            search=args.search,
            regex=args.regex,
        )
    except BadFilter as err:
        raise CliError(str(err)) from None
    if args.cell is not None:
        from .jobs.sessions.cells import NoCell, NotASession, cell_filter

        try:
            flt = cell_filter(store, job, flt, args.cell)
        except (NotASession, NoCell) as err:
            raise CliError(str(err)) from None
    if args.download_to is not None:
        return _download(logs.directory, flt, args.download_to, logs.attempt)
    if args.follow:  # the attempt asked for, else the latest and the retries after it
        _follow(store, job.id, flt, args.lines, args.attempt)
        return 0
    if args.lines:
        _print(read_tail(logs.directory, flt, args.lines).lines)
        return 0
    for page in read_all_text(logs.directory, flt):
        sys.stdout.write(page.text)
    sys.stdout.flush()
    return 0


def _first_attempt(store: JobStore, job_id: str) -> list[Any]:
    """The job's attempts once it has one, or none if it ended first."""
    while not (attempts := store.attempts(job_id)) and not store.get(job_id).done:
        time.sleep(0.05)
    return attempts


def _when(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise CliError(f"{option} {value!r}: expected an ISO time or Unix seconds") from None


def _print(lines: list[LogLine]) -> None:
    sys.stdout.write("".join(map(format_line, lines)))
    sys.stdout.flush()


def _follow(
    store: JobStore, job_id: str, flt: LogFilter, last: int | None, attempt: int | None = None
) -> None:
    """Stream lines as they come until the job ends; Ctrl-C stops following, not the job.
    Without ``attempt``: from the latest attempt on, through the retries that follow."""
    from .jobs.follow import LogFollower

    stop = {"now": False}
    previous = signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    try:
        current = attempt or max(len(store.attempts(job_id)), 1)
        cursor = None
        if last:
            page = read_tail(store.attempt_dir(job_id, current), flt, last)
            _print(page.lines)
            cursor = page.cursor
        follower = LogFollower(store, job_id, flt, current, retries=attempt is None, cursor=cursor)
        tracking = TrackingNotes(store, job_id)
        for number, text in follower.follow_text(stop=lambda: tracking.look() or stop["now"]):
            if number > current:
                current = number
                print(f"--- attempt {current} ---", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
    finally:
        signal.signal(signal.SIGINT, previous)


class TrackingNotes:
    """While a job is followed: its tracking line (``jobs.documents.tracking_line``)
    printed when it changes, and a word when what waited has landed."""

    EVERY = 2.0

    def __init__(self, store: JobStore, job_id: str) -> None:
        self._store, self._job_id = store, job_id
        self._said: str | None = None
        self._looked = 0.0

    def look(self) -> bool:
        """Say what changed; never asks the follower to stop."""
        from .jobs.documents import tracking_line

        if time.monotonic() - self._looked < self.EVERY:
            return False
        self._looked = time.monotonic()
        store, job = self._store, self._store.get(self._job_id)
        line = tracking_line(store, job, store.attempts(job.id))
        if line != self._said:
            print(line or "tracking: everything waiting has landed", file=sys.stderr, flush=True)
            self._said = line
        return False


def _download(directory: Path, flt: LogFilter, target: Path, attempt: int) -> int:
    from .logs.export import write_rank_files

    written = write_rank_files(directory, flt, target, attempt)
    for path, count in written:
        print(f"wrote {path} ({count} lines)")
    if not written:
        print("no log files match")
    return 0


# -- cancel ----------------------------------------------------------------------------


def _cancel(args: argparse.Namespace) -> int:
    service = _service()
    try:
        job = service.cancel(args.job_id)
    except UnknownJob:
        raise CliError(f"no job {args.job_id!r}") from None
    except (Forbidden, Conflict) as err:
        raise CliError(str(err)) from None
    job = service.wait(job, 60.0)
    print(f"Job {job.id} {job.status.lower()}")
    return 0 if job.status is JobStatus.CANCELLED else 1


# -- stacks ------------------------------------------------------------------------------


def _stacks(args: argparse.Namespace) -> int:
    service = _service()
    job = _job(service, args.job_id)
    try:
        if args.saved:
            found = service.saved_stacks(job.id)
            if not found:
                raise CliError(f"no stacks were taken of job {job.id}")
        else:
            attempt = len(service.store.attempts(job.id))
            found = [(attempt, service.take_stacks(job.id))]
    except (Forbidden, Conflict) as err:
        raise CliError(str(err)) from None
    if args.output == "json":
        from .jobs.api_models import stack_set_document

        sets = [stack_set_document(a, s, args.rank).model_dump(mode="json") for a, s in found]
        print(json.dumps(sets, indent=2))
        return 0
    for attempt, taken in found:
        print(f"Job {job.id}, attempt {attempt}: " + taken.text(args.rank), end="")
    return 0


# -- notify ------------------------------------------------------------------------------


def _notify(args: argparse.Namespace) -> int:
    from .jobs.service import Refused
    from .notify.targets import BadTarget, parse_all

    service = _service()
    job = _job(service, args.job_id)
    try:
        targets = service.add_notify(job.id, parse_all(args.targets))
    except BadTarget as err:
        raise CliError(f"notify: {err}") from None
    except (Refused, Forbidden, Conflict) as err:
        raise CliError(str(err)) from None
    if args.output == "json":
        print(json.dumps({"job_id": job.id, "targets": [t.shown() for t in targets]}, indent=2))
        return 0
    print(f"Job {job.id} tells:")
    for target in targets:
        print(f"  {target.shown()} on {', '.join(map(str, target.on))}")
    return 0


# -- permissions -------------------------------------------------------------------------


def _permissions(args: argparse.Namespace) -> int:
    service = _service()
    job = _job(service, args.job_id)
    me = service.caller
    report = None
    try:
        grants = merged(parse_grant(g) for g in args.grant)
        revoke = tuple(parse_principal(p) for p in args.revoke)
        if grants or revoke:
            access, report = service.change_access(job.id, grants, revoke)
        else:
            access = service.access(job.id)
    except (BadGrant, Forbidden) as err:
        raise CliError(str(err)) from None
    if args.output == "json":
        print(json.dumps(change_document(access, me, report).model_dump(mode="json"), indent=2))
        return 0
    _print_access(access, me)
    for line in report.lines() if report else []:
        print(f"  {line}")
    return 0


def _print_access(access: JobAccess, me: Identity) -> None:
    level = access.level_of(me)
    print(f"Job {access.job_id}: owner {access.owner} (CAN_MANAGE)")
    for g in access.grants:
        print(f"  {g.principal.kind:5} {g.principal.name:24} {g.level.name}")
    if not access.grants:
        print("  no grants: only the owner has access")
    print(f"  you ({me.name}): {level.name if level else 'no access'}")


if __name__ == "__main__":
    sys.exit(main())
