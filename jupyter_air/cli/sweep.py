"""``air sweep -f sweep.yaml``, ``air sweep list``, ``get ID``, ``stop ID``, ``resume ID``.

A sweep runs in a driver process of its own (``sweeps.driver``): these commands start,
read and stop it, and return; ``--watch`` follows the trials until the sweep ends. The
caller is the OS user with its OS groups, checked against the sweep's grants as for
jobs. Optuna and MLflow are imported only by the commands that run, not by ``air``'s
parser.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..identity import os_identity
from .common import CliError, _output, _service, _time

if TYPE_CHECKING:
    from ..jobs.permissions import Level
    from ..sweeps.service import SweepService
    from ..sweeps.store import Sweep

#: Seconds between two looks of ``--watch``.
WATCH_EVERY = 1.0


def add_commands(sub: Any) -> None:
    """Register ``sweep`` and its commands."""
    sweep = sub.add_parser(
        "sweep",
        help="a hyperparameter search whose trials are jobs: start, list, get, stop, resume",
        description="air sweep -f sweep.yaml starts a sweep (a workload plus space:, "
        "objective:, trials:, parallel:, sampler:, pruner:; docs/sweeps.md); the other "
        "commands read or change one.",
    )
    sweep.add_argument("-f", "--file", type=Path, help="the sweep YAML: start it")
    sweep.add_argument(
        "--watch",
        action="store_true",
        help="follow its trials until it ends; exit 1 unless it completed",
    )
    sweep.add_argument(
        "--notify",
        dest="told",
        action="append",
        default=[],
        metavar="TARGET",
        help="tell of the sweep's end, with its best trial (repeatable): jupyterlab, "
        "email:ADDRESS or webhook:URL (the file's notify: is each trial's job's)",
    )
    _output(sweep)
    sweep.set_defaults(func=_start, sweep_command=None)
    cmds = sweep.add_subparsers(dest="sweep_command")

    def command(name: str, func: Any, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = cmds.add_parser(name, help=help)
        if name != "list":
            p.add_argument("sweep_id", metavar="ID")
        _output(p)
        p.set_defaults(func=func)
        return p

    command("list", _list, "the sweeps you own or were granted, newest first")
    command("get", _get, "one sweep: its status, best trial and every trial")
    command("stop", _stop, "cancel its running trials and start no other")
    command("resume", _resume, "start its driver again: it goes on where it stopped")


def _sweeps() -> SweepService:
    from ..sweeps.service import SweepService

    return SweepService(_service().store, os_identity())


def _sweep(service: SweepService, sweep_id: str, needed: Level | None = None) -> Sweep:
    from ..jobs.permissions import Forbidden, Level
    from ..sweeps.store import UnknownSweep

    try:
        return service.get(sweep_id, needed or Level.CAN_VIEW)
    except UnknownSweep:
        raise CliError(f"no sweep {sweep_id!r}") from None
    except Forbidden as err:
        raise CliError(
            f"You don't have {err.needed.name} on sweep {sweep_id}: its owner, {err.owner}, "
            "can grant it"
        ) from None


def _start(args: argparse.Namespace) -> int:
    from ..identity import mlflow_user
    from ..jobs.service import Refused
    from ..jobs.workload_file import WorkloadError
    from ..notify.targets import BadTarget, parse
    from ..sweeps import storage, sweep_file
    from ..tracking.probe import Unreachable
    from ..tracking.targets import current_tracking_uri

    if args.file is None:
        raise CliError("give -f sweep.yaml to start a sweep, or a command: list, get, stop, resume")
    told = []
    for given in args.told:
        try:
            told.append(parse(given))
        except BadTarget as err:
            raise CliError(f"--notify {given}: {err}") from None
    try:
        spec = sweep_file.load(args.file)
    except WorkloadError as err:
        raise CliError(str(err)) from None
    working_dir = (args.file.parent / spec.working_dir).resolve()
    if not working_dir.is_dir():
        raise CliError(f"working_dir {working_dir} is not a directory")
    service = _sweeps()
    try:
        sweep, driver = service.create(
            spec, working_dir, current_tracking_uri(), mlflow_user(), notify=tuple(told)
        )
    except Refused as err:
        if err.field == "notify" and told:
            raise CliError(f"--notify: {err}") from None
        raise CliError(f"{args.file}: {err.field}: {err}" if err.field else str(err)) from None
    except Unreachable as err:
        raise CliError(err.refusal()) from None
    if args.output == "text":
        print(
            f"Sweep {sweep.id} started: {spec.trials} trial(s), {spec.parallel} at a time, "
            f"{spec.direction.value} {spec.objective.metric} ({spec.sampler.value}, pruner "
            f"{spec.pruner.name.value}), experiment {spec.experiment_name!r}"
        )
        if spec.storage:
            print(f"  study:  {sweep.id} at {storage.shown(sweep.spec.storage or '')}")
        print(f"  driver: pid {driver.pid}, log {driver.log}")
        print(f"  follow: air sweep get {sweep.id}")
    if args.watch:
        return _watch(service, sweep.id, args.output)
    if args.output == "json":
        print(json.dumps(service.document(service.get(sweep.id)), indent=2))
    return 0


def _watch(service: SweepService, sweep_id: str, output: str) -> int:
    """Say each trial's change of state until the sweep ends; its end and best trial."""
    seen: dict[int, str] = {}
    while True:
        sweep = service.get(sweep_id)
        for t in service.trials(sweep):
            if seen.get(t.number) != t.state and output == "text":
                print(f"  trial {t.number}: {_trial_line(t.as_json())}", flush=True)
            seen[t.number] = t.state
        if not sweep.status.active:
            break
        time.sleep(WATCH_EVERY)
    doc = service.document(sweep)
    if output == "json":
        print(json.dumps(doc, indent=2))
    else:
        _print_end(doc)
    return 0 if doc["status"] == "COMPLETED" else 1


def _print_end(doc: dict[str, Any]) -> None:
    print(f"Sweep {doc['id']} {doc['status'].lower()}" + _message(doc))
    if doc["best"]:
        best = doc["best"]
        value = f"{_objective(doc)} {best['value']:g}"
        print(f"  best: trial {best['number']}, {value}, {best['params']}")


def _message(doc: dict[str, Any]) -> str:
    return f": {doc['message']}" if doc["message"] else ""


def _objective(doc: dict[str, Any]) -> str:
    return str(next(iter(doc["objective"].values())))


def _trial_line(t: dict[str, Any]) -> str:
    value = f" {t['value']:g}" if t["value"] is not None else ""
    pruned = f" at step {t['pruned_step']}" if t["pruned_step"] is not None else ""
    job = f", job {t['job_id']}" if t["job_id"] else ""
    why = f" ({t['message']})" if t["message"] else ""
    return f"{t['state']}{pruned}{value} {t['params']}{job}{why}"


def _list(args: argparse.Namespace) -> int:
    service = _sweeps()
    docs = [service.document(s) for s in service.sweeps()]
    if args.output == "json":
        print(json.dumps(docs, indent=2))
        return 0
    if not docs:
        print("no sweeps")
        return 0
    print(f"{'SWEEP':12} {'STATUS':10} {'CREATED':19} {'TRIALS':>9} {'BEST':>12} EXPERIMENT")
    for d in docs:
        done = sum(d["counts"][s] for s in ("COMPLETE", "PRUNED", "FAIL"))
        best = f"{d['best']['value']:g}" if d["best"] else "-"
        trials = f"{done}/{d['trials_planned']}"
        print(
            f"{d['id']:12} {d['status']:10} {_time(d['created']):19} "
            f"{trials:>9} {best:>12} {d['experiment_name']}"
        )
    return 0


def _get(args: argparse.Namespace) -> int:
    service = _sweeps()
    doc = service.document(_sweep(service, args.sweep_id), with_trials=True)
    if args.output == "json":
        print(json.dumps(doc, indent=2))
        return 0
    print(f"Sweep {doc['id']}: {doc['status']}{_message(doc)}")
    print(f"  owner:     {doc['owner']}")
    print(f"  created:   {_time(doc['created'])}   ended: {_time(doc['ended'])}")
    direction, metric = next(iter(doc["objective"].items()))
    print(
        f"  objective: {direction} {metric}; {doc['trials_planned']} trial(s), "
        f"{doc['parallel']} at a time"
    )
    print(f"  run:       {doc['run_id'] or 'made as its driver starts'}")
    if doc["storage"]:
        print(f"  study:     {doc['id']} at {doc['storage']}")
    if doc["storage_error"]:
        print(f"  trials:    not read: {doc['storage_error']}")
    driver = doc["driver"]
    print(f"  driver:    {'pid ' + str(driver['pid']) if driver else 'not running'}")
    if doc["best"]:
        best = doc["best"]
        print(f"  best:      trial {best['number']}: {best['value']:g} {best['params']}")
    for t in doc["trials"]:
        print(f"  trial {t['number']}: {_trial_line(t)}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    return _change(args, stop=True)


def _resume(args: argparse.Namespace) -> int:
    return _change(args, stop=False)


def _change(args: argparse.Namespace, stop: bool) -> int:
    """``stop`` or ``resume`` (CAN_MANAGE_RUN): the sweep's driver asked or started."""
    from ..jobs.permissions import Level
    from ..jobs.service import Conflict

    service = _sweeps()
    _sweep(service, args.sweep_id, Level.CAN_MANAGE_RUN)
    try:
        if stop:
            said = (
                f"Sweep {service.stop(args.sweep_id).id} stopping: its running trials are cancelled"
            )
        else:
            driver = service.resume(args.sweep_id)
            said = f"Sweep {args.sweep_id}: driver pid {driver.pid}, log {driver.log}"
    except (Conflict, RuntimeError) as err:  # ended; a driver that did not start
        raise CliError(str(err)) from None
    if args.output == "json":
        print(json.dumps(service.document(service.get(args.sweep_id)), indent=2))
    else:
        print(said)
    return 0
