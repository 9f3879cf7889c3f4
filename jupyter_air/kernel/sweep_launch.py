"""A sweep from the notebook, for ``%%air_sweep`` and ``sweep(fn, ...)``: the cell's or the
function's payload (as ``%%air_distributed`` sends it) is every trial's program; the
sweep is started through the sweeps service, whose detached driver runs it, and the cell
only follows it.

A sweep is found again by its key: its notebook and its text (the magic's line and the
cell, or the function's source and the sweep's arguments). Running the same cell again,
after a kernel restart say, follows the sweep that runs (its driver started again if it
was not running: no trial runs twice); one that completed shows its result; one that was
stopped or failed is searched again, as is any with ``--new``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..identity import Identity, mlflow_user, server_owner
from ..jobs.service import Conflict
from ..jobs.store import JobStore
from ..jobs.workload_file import Submission
from ..notify.targets import Target
from ..sweeps import driver, space
from ..sweeps.service import SweepService
from ..sweeps.store import Code, Sweep, SweepStatus, best_of
from ..sweeps.sweep_file import SweepFile, from_dict
from .launch import Interrupted
from .session import notebook_path
from .sweep_view import SweepView, value_text

#: Seconds between two looks at the sweep while the cell follows it.
REFRESH = 1.0
#: Seconds between two checks that its driver lives (one that died is started again).
DRIVER_EVERY = 5.0
#: Drivers started again for one follow before the cell gives up on them.
DRIVER_RESTARTS = 3
#: Seconds a stopped sweep is followed while its trials are cancelled.
STOP_WAIT = 30.0


class SweepFailed(RuntimeError):
    """The sweep ended without a best trial (it failed, or no trial completed)."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mSweepFailed\x1b[0m: {self}"]


@dataclass(frozen=True)
class Search:
    """What to search and how, as the magic's flags or ``sweep()``'s arguments say it;
    checked as a sweep file's fields (``sweep_file``)."""

    #: Each parameter in the file's form (``space_text`` reads the inline one).
    space: dict[str, Any]
    #: ``{"minimize": "val_loss"}`` or ``{"maximize": "accuracy"}``.
    objective: dict[str, str]
    trials: int
    parallel: int = 1
    sampler: str = "tpe"
    pruner: str = "none"
    seed: int | None = None
    #: Whom the sweep's end is told, with its best trial (``sweeps.notices``).
    notify: tuple[Target, ...] = ()
    #: Where its study lives: an Optuna RDB URL (a sweep file's ``storage:``); None:
    #: AIR_HOME's own store.
    storage: str | None = None


def sweep_spec(
    search: Search,
    submission: Submission,
    *,
    experiment: str,
    run_name: str,
    label: str,
    name: Callable[[str], str],
) -> SweepFile:
    """The sweep as a file would give it: the trials' job options (``submission``) and
    the search; a bad field raises ``WorkloadError`` named by ``name`` (a flag)."""
    doc = {
        **submission.model_dump(mode="json"),
        "experiment_name": experiment,
        "command": label,  # what the sweep's record names; its trials run the payload
        "mlflow_run_name": run_name,
        "space": search.space,
        "objective": search.objective,
        "trials": search.trials,
        "parallel": search.parallel,
        "sampler": search.sampler,
        "pruner": search.pruner,
        "seed": search.seed,
        "storage": search.storage,
    }
    return from_dict(doc, name)


def sweep_key(text: str, notebook: str | None) -> str:
    """What finds a notebook's sweep again: its notebook and its text."""
    digest = hashlib.sha256(f"{notebook or ''}\0{text}".encode()).hexdigest()
    return digest[:32]


def experiment_name(option: str | None, user: str, tracking_uri: str) -> str:
    """The sweep's experiment, as a cell's would be: ``--experiment``, then the notebook's
    ``mlflow.set_experiment()``, then ``MLFLOW_EXPERIMENT_NAME``, then
    ``/Users/<user>/<notebook>``."""
    if option:
        return option
    from mlflow import MlflowClient
    from mlflow.tracking import fluent

    from ..tracking.targets import default_experiment_name

    if experiment_id := fluent._active_experiment_id:
        return str(MlflowClient(tracking_uri).get_experiment(experiment_id).name)
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or default_experiment_name(
        user, notebook_path()
    )


def kernel_sweeps() -> SweepService:
    """The sweeps service as this kernel's owner."""
    return SweepService(JobStore(), Identity(server_owner()))


def start_or_follow(
    make_spec: Callable[[str], SweepFile],
    payload: Callable[[], bytes],
    code: Code,
    key: str,
    new: bool = False,
    notify: tuple[Target, ...] = (),
) -> dict[str, Any]:
    """Follow this cell's running sweep, show its completed one, or start one (``new``:
    always), then follow it in the cell until it ends; the best trial's parameters.
    ``make_spec(tracking_uri)`` and ``payload()`` are only made for a new sweep."""
    from ..tracking.targets import current_tracking_uri

    service = kernel_sweeps()
    found = None if new else service.latest(key)
    if found is not None and found.status.active:
        print(
            f"Following sweep {found.id}, started from this cell "
            "(--new, or new=True, starts another)"
        )
        with contextlib.suppress(Conflict):  # it ended meanwhile
            service.resume(found.id)
        return follow(service, found.id)
    if found is not None and found.status is SweepStatus.COMPLETED:
        print(
            f"Sweep {found.id} of this cell completed: its result "
            "(--new, or new=True, searches again)"
        )
        return follow(service, found.id)
    tracking_uri = current_tracking_uri()
    spec = make_spec(tracking_uri)
    sweep, info = service.create(
        spec,
        working_dir=Path(os.getcwd()),
        tracking_uri=tracking_uri,
        user=mlflow_user(),
        payload=payload(),
        code=code,
        key=key,
        notify=notify,
    )
    print(
        f"Sweep {sweep.id}: {space.planned(spec)} trial(s), {spec.parallel} at a time, "
        f"{spec.direction.value} {spec.objective.metric} ({spec.sampler.value}, pruner "
        f"{spec.pruner.name.value}); its driver (pid {info.pid}) runs it without this "
        f"kernel: air sweep get {sweep.id}"
    )
    return follow(service, sweep.id)


def follow(service: SweepService, sweep_id: str) -> dict[str, Any]:
    """The sweep's table in the cell until it ends; its best trial's parameters. The
    kernel's interrupt (Stop) stops the sweep, as ``air sweep stop`` does."""
    view = SweepView()
    checked, restarts = time.monotonic(), 0
    try:
        while True:
            sweep = _show(service, sweep_id, view)
            if not sweep.status.active:
                break
            if time.monotonic() - checked > DRIVER_EVERY:
                checked = time.monotonic()
                if driver.running(service.jobs.home, sweep_id) is None:
                    restarts = _restart(service, sweep_id, restarts)
            time.sleep(REFRESH)
    except KeyboardInterrupt:
        with contextlib.suppress(Conflict):  # it ended meanwhile
            service.stop(sweep_id)
        deadline = time.monotonic() + STOP_WAIT
        sweep = _show(service, sweep_id, view)
        while sweep.status.active and time.monotonic() < deadline:
            time.sleep(REFRESH)
            sweep = _show(service, sweep_id, view)
        said = "stopped" if not sweep.status.active else "stopping"
        raise Interrupted(
            f"interrupted; sweep {sweep_id} {said}, its running trials cancelled "
            f"(air sweep get {sweep_id})"
        ) from None
    return _result(service, sweep)


def _restart(service: SweepService, sweep_id: str, restarts: int) -> int:
    """A driver that exited while its sweep runs, started again and said so; one that
    keeps exiting (``DRIVER_RESTARTS``) fails the cell with its last words, the sweep
    left as it is for ``air sweep resume``."""
    words = driver.last_words(service.jobs.home, sweep_id)
    if restarts >= DRIVER_RESTARTS:
        raise SweepFailed(
            f"sweep {sweep_id}'s driver exited {restarts + 1} times: {words}; "
            f"air sweep resume {sweep_id} once that is mended"
        )
    try:
        service.resume(sweep_id)
    except Conflict:  # it ended as its driver exited
        return restarts
    print(f"Sweep {sweep_id}'s driver exited, started again: {words}")
    return restarts + 1


def _show(service: SweepService, sweep_id: str, view: SweepView) -> Sweep:
    sweep = service.get(sweep_id)
    view.update(sweep, service.trials(sweep), space.planned(sweep.spec))
    return sweep


def _result(service: SweepService, sweep: Sweep) -> dict[str, Any]:
    """The best trial's parameters; a sweep that failed, or in which no trial completed,
    raises ``SweepFailed`` with why."""
    best = best_of(sweep, service.trials(sweep))
    if sweep.status is SweepStatus.FAILED:
        raise SweepFailed(f"sweep {sweep.id} failed: {sweep.message or 'no reason given'}")
    if best is None:
        raise SweepFailed(
            f"sweep {sweep.id} {sweep.status.lower()} with no trial completed: "
            f"air sweep get {sweep.id} says why each ended"
        )
    if sweep.status is SweepStatus.STOPPED:
        print(f"Sweep {sweep.id} was stopped: the best of the trials that completed")
    metric = sweep.spec.objective.metric
    print(f"Best: trial {best.number}, {metric} = {value_text(best.value)}")
    return dict(best.params)
