"""``air list``, ``get``, ``sync``, ``cancel``, ``stacks``, ``notify`` and ``permissions``:
the jobs as the OS user may see and change them."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from ..identity import Identity
from ..jobs.api_models import change_document
from ..jobs.attempt_progress import percent, with_mfu
from ..jobs.node.outcome import shown_exit_codes
from ..jobs.permissions import (
    BadGrant,
    Forbidden,
    JobAccess,
    Level,
    merged,
    parse_grant,
    parse_principal,
)
from ..jobs.service import Conflict, JobService
from ..jobs.spec import JobKind
from ..jobs.store import Job, JobStore, UnknownJob
from ..redact import redact
from ..status import JobStatus, Outcome
from ..tracking.energy import RunEnergy, grid_intensity, run_energy
from .common import CliError, _job, _output, _service, _time


def add_commands(sub: Any) -> None:
    """Register the commands on jobs."""
    listing = sub.add_parser("list", help="active jobs (all with --all-status)")
    listing.add_argument("--all-status", action="store_true", help="finished jobs too")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    _output(listing)
    listing.set_defaults(func=_list)

    get = sub.add_parser("get", help="one job: status, times, compute, attempts, runs")
    get.add_argument("job_id")
    _output(get)
    get.set_defaults(func=_get)

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
        "C frames too) and read their flight recorders: which collective the ranks wait "
        "in, and which rank never entered it. Saved with the attempt; --saved shows those "
        "taken before (asked for, at a likely hang, at a cancel after one).",
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
    hidden = "" if args.all_status else _ended_hidden(service, jobs, args.limit)
    if not jobs:
        print(f"no active jobs; {hidden}" if hidden else "no active jobs")
        return 0
    print(f"{'JOB':24} {'STATUS':10} {'CREATED':19} {'RANKS':>5} RUN")
    for job, doc in zip(jobs, service.documents(jobs), strict=True):
        print(
            f"{job.id:24} {job.status:10} {_time(job.created):19} "
            f"{job.spec.compute.world_size:>5} {job.spec.tracking.run_name or ''}"
        )
        progress = doc["attempts"][-1]["progress"] if doc["attempts"] else None
        if progress:
            print(f"    {with_mfu(progress['line'], progress['mfu']['value'])}")
    if hidden:
        print(hidden)
    return 0


def _ended_hidden(service: JobService, active: list[Job], limit: int) -> str:
    """What ``--all-status`` would add, said after the active jobs (or after "no active
    jobs"): nothing when no ended job is hidden. ``active``: those listed, at most
    ``limit`` (all of them when fewer)."""
    shown = len(active) if len(active) < limit else len(service.jobs(active_only=True))
    ended = service.count() - shown
    return f"{ended} ended: air list --all-status shows them" if ended > 0 else ""


def _get(args: argparse.Namespace) -> int:
    service = _service(settle=True)
    job = _job(service, args.job_id)
    doc = service.document(job)
    try:
        grams_per_kwh = grid_intensity(service.store.home)
    except ValueError as err:  # a bad $AIR_GRAMS_CO2_PER_KWH, or the server's file
        raise CliError(str(err)) from None
    energy = {n: e.priced(grams_per_kwh) for n, e in _energies(service.store, doc).items()}
    if args.output == "json":
        for a in doc["attempts"]:
            found = energy.get(a["attempt"])
            a["gpu_energy"] = None if found is None else asdict(found)
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
    if job.spec.policy.guards:  # docs/guards.md
        print(f"  guards:   {'; '.join(job.spec.policy.guards)}")
    if doc["logs_expired"]:
        print("  logs:     expired (removed by retention)")
    for a in doc["attempts"]:
        failed = f", failed rank {a['failed_rank']}" if a["failed_rank"] is not None else ""
        # a running attempt has no exit codes yet: its status says so
        codes = a["exit_codes"]
        exits = f", exit codes {shown_exit_codes(codes)}" if codes is not None else ""
        print(
            f"  attempt {a['attempt']}: {a['status']}{exits}{failed}"
            + (f": {a['message']}" if a["message"] else "")
        )
        print(f"    run: {a['run_url'] or a['run_id'] or 'made once its tracking server answers'}")
        if a["resumed_from"]:
            step = f", step {a['resumed_step']}" if a["resumed_step"] is not None else ""
            print(f"    resumed from {a['resumed_from']}{step}")
        if a["attempt"] in energy:
            print(f"    energy:   {energy[a['attempt']].line()}")
        if a["progress"]:
            _print_progress(a["progress"])
        if a["hang"]:  # where its ranks were last seen waiting (air stacks ID --saved)
            print(f"    hang:     {a['hang']}")
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
    from ..job_dir import JobDir
    from ..tracking import backlog, journal, run_tails
    from ..tracking.targets import bound_requests

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


def _energies(store: JobStore, doc: dict[str, Any]) -> dict[int, RunEnergy]:
    """Each attempt's GPU energy, where its samples measured some (docs/prometheus.md)."""
    from ..job_dir import JobDir

    files = JobDir(store.job_dir(doc["id"]))
    found = {a["attempt"]: run_energy(files.attempt(a["attempt"])) for a in doc["attempts"]}
    return {number: energy for number, energy in found.items() if energy is not None}


def _print_progress(progress: dict[str, Any]) -> None:
    """An attempt's progress, its speed, and its MFU or why it has none."""
    print(f"    progress: {progress['line']}")
    speed = [f"{progress['step_time_s']:.3g} s/step"] if progress["step_time_s"] else []
    for key, unit in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        if progress[key] is not None:
            speed.append(f"{progress[key]:,.0f} {unit}")
    if speed:
        print(f"    speed:    {', '.join(speed)}")
    mfu = progress["mfu"]
    if mfu["value"] is None:
        print(f"    MFU:      none: {mfu['why']}")
    else:
        print(f"    MFU:      {percent(mfu['value'])} ({mfu['why']})")


def _print_waiting(doc: dict[str, Any], store: JobStore) -> None:
    """What of the job's runs waits for its tracking server: the line of the jobs API,
    or, for a journal no shipper has tried yet, how much of it waits."""
    from ..job_dir import JobDir
    from ..tracking import journal

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
    from ..job_dir import JobDir
    from ..jobs.sessions.cells import cells

    ran = cells(JobDir(store.job_dir(job_id)))
    print(f"  cells run: {len(ran)}" + (f" (air logs {job_id} --cell N)" if ran else ""))
    for c in ran:
        print(f"    cell {c.cell}  {c.status:<9} {c.ended - c.started:.1f} s  run: {c.run_id}")


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
        from ..jobs.api_models import stack_set_document

        sets = [stack_set_document(a, s, args.rank).model_dump(mode="json") for a, s in found]
        print(json.dumps(sets, indent=2))
        return 0
    for attempt, taken in found:
        print(f"Job {job.id}, attempt {attempt}: " + taken.text(args.rank), end="")
    return 0


def _notify(args: argparse.Namespace) -> int:
    from ..jobs.service import Refused
    from ..notify.targets import BadTarget, parse_all

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
