"""``air run``: a workload file submitted as a job, watched if asked."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..identity import os_identity
from ..jobs.debugger import Watcher
from ..jobs.guards import OFF, resolved
from ..jobs.request import Defaults, JobRequest, Program
from ..jobs.service import JobService
from ..jobs.spec import JobKind
from ..jobs.workload_file import TrackingMode, WorkloadFile
from ..logs.query import LogFilter
from ..redact import redact
from ..status import JobStatus
from .common import CliError, _run_link, _service
from .debug_prompt import served
from .logs import _follow


def add_commands(sub: Any) -> None:
    """Register ``run``."""
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
    run.add_argument(
        "--guard",
        action="append",
        metavar="GUARD",
        help="a condition on a logged metric and its actions, added to the workload's "
        "`guard:` (repeatable), e.g. 'loss: nan' or 'loss: > 10 -> stop'; docs/guards.md",
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


def _with(spec: WorkloadFile, field: str, value: Any, flag: str) -> WorkloadFile:
    """The workload with ``flag``'s value for ``field``, checked as the file's is."""
    from pydantic import ValidationError

    from ..jobs.workload_file import WorkloadError, describe

    try:
        return type(spec).model_validate({**spec.model_dump(), field: value})
    except ValidationError as err:
        raise WorkloadError(describe(err, lambda loc: flag)) from None


def _guards(given: list[Any], added: list[str]) -> list[Any]:
    """The file's guards and ``--guard``'s; ``--guard none`` turns them all off, and a
    guard given on the command line turns the file's ``guard: none`` back on."""
    if any(g.strip().lower() == OFF for g in added):
        return added
    return [*(g for g in given if not (isinstance(g, str) and g.strip().lower() == OFF)), *added]


def _on_backend(spec: WorkloadFile, backend: str, pairs: list[str]) -> WorkloadFile:
    """The workload on ``backend`` (``--backend``) with ``--backend-opt``'s settings over
    its own (those of another backend dropped), checked as the file's are."""
    from pydantic import ValidationError

    from ..jobs import backends
    from ..jobs.backends.settings import FLAG, BadPair, from_pairs
    from ..jobs.workload_file import FILE_NAMES, WorkloadError, describe

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
    from ..jobs.service import Refused, place
    from ..jobs.workload_file import WorkloadError, load
    from ..tracking.probe import Unreachable

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
        if args.guard:
            spec = _with(spec, "guard", _guards(spec.guard, args.guard), "--guard")
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
        targets = spec.targets(unwatched=True)
        print(
            json.dumps(
                {
                    **spec.model_dump(),
                    "notify": [t.shown() for t in targets],
                    "guard": list(resolved(spec.guard, has_targets=bool(targets))),
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
    # a rank's breakpoint() stops at a prompt on this terminal while the job is watched
    debug = Watcher(service.store.home, 0) if args.watch and args.output != "json" else None
    try:
        started = service.start(_request(spec, working_dir, defaults, debug))
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
    from ..tracking.ui_links import logs_url

    view = logs_url(job.id, absolute=True)
    print(f"  logs: air logs {job.id} --follow" + (f"  or  {view}" if view else ""))
    if not args.watch:
        return 0
    with served(debug):
        _follow(service.store, job.id, LogFilter(node=0), None)
    return _watched(service, job.id)


def _outcome_known(service: JobService, job_id: str) -> None:
    """Wait, without printing, until the job's outcome is known (``--watch`` in JSON)."""
    from ..jobs.follow import outcome

    while outcome(service.store, job_id) is None:
        time.sleep(0.2)


def _exit_status(service: JobService, job_id: str) -> int:
    return 0 if service.document(service.store.get(job_id))["status"] == JobStatus.SUCCEEDED else 1


def _watched(service: JobService, job_id: str) -> int:
    """The end of ``--watch``: the outcome and the last attempt's run, as soon as the
    outcome is known; the run's MLflow tail (its end, its logs as artifacts) goes on
    in the background, and ``air get`` shows the job ended once it is done."""
    from ..jobs.follow import outcome

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


def _request(
    spec: WorkloadFile, working_dir: Path, defaults: Defaults, debug: Watcher | None
) -> JobRequest:
    """A workload file's job: its command on every rank, in nobody's kernel."""
    from ..identity import mlflow_user
    from ..tracking.targets import ExperimentRef, current_tracking_uri

    return JobRequest(
        spec,
        Program(
            JobKind.COMMAND,
            command=spec.argv,
            background=True,  # nobody's kernel: the job outlives this shell
            working_dir=str(working_dir),
            run_name=spec.run_name,
            debug=None if debug is None else debug.ticket,
        ),
        ExperimentRef(current_tracking_uri(), spec.experiment_name, spec.mlflow_artifact_location),
        mlflow_user(),
        defaults=defaults,
        tags={"air.command": redact(spec.command)},
    )
