"""What a sweep's end tells whom its owner asked (``--notify``): one message with the
best trial, ``sweep sw-1 done: best val_loss = 0.12 (trial 7: lr=0.001, layers=2)``.

Posted by the driver that ended the sweep, under a key naming the sweep's end, so a
driver started again posts nothing twice; the courier sends it, so the driver never
waits on a mail server. The targets are a job's (``notify.targets``): each says which
ends it wants (by default all: completed is ``success``, failed ``failure``, stopped
``cancelled``).
"""

from __future__ import annotations

import logging

from ..jobs.store import JobStore
from ..notify import courier
from ..notify.message import Message, duration
from ..notify.outbox import Notice
from ..notify.targets import Event
from .store import Sweep, SweepStatus, TrialRecord, best_of

log = logging.getLogger(__name__)

EVENT = {
    SweepStatus.COMPLETED: Event.SUCCESS,
    SweepStatus.FAILED: Event.FAILURE,
    SweepStatus.STOPPED: Event.CANCELLED,
}
_WORD = {
    SweepStatus.COMPLETED: "done",
    SweepStatus.FAILED: "failed",
    SweepStatus.STOPPED: "stopped",
}
_LEVEL = {Event.SUCCESS: "success", Event.FAILURE: "error", Event.CANCELLED: "warning"}


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def title(sweep: Sweep, trials: list[TrialRecord]) -> str:
    """One line: how the sweep ended and its best trial."""
    head = f"sweep {sweep.id} {_WORD.get(sweep.status, sweep.status.lower())}"
    best = best_of(sweep, trials)
    if best is None:
        return f"{head}: no trial completed" + (f" ({sweep.message})" if sweep.message else "")
    params = ", ".join(f"{k}={_value(v)}" for k, v in best.params.items())
    metric = sweep.spec.objective.metric
    return f"{head}: best {metric} = {_value(best.value)} (trial {best.number}: {params})"


def message(sweep: Sweep, trials: list[TrialRecord], event: Event) -> Message:
    counts = {s: sum(t.state == s for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL")}
    facts = [
        ("Sweep", sweep.id),
        ("Objective", f"{sweep.spec.direction.value} {sweep.spec.objective.metric}"),
        ("Trials", ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) or "none"),
    ]
    if sweep.ended is not None:
        facts.append(("Duration", duration(sweep.ended - sweep.created)))
    if sweep.message:
        facts.append(("Why", sweep.message))
    return Message(
        event=event,
        title=title(sweep, trials),
        level=_LEVEL[event],
        owner=sweep.owner,
        facts=tuple(facts),
        command=f"air sweep get {sweep.id}",
    )


def post_end(jobs: JobStore, sweep: Sweep, trials: list[TrialRecord]) -> None:
    """Tell the sweep's targets that want its end (never raises: a notification must not
    stop the driver from ending)."""
    event = EVENT.get(sweep.status)
    chosen = [(i, t) for i, t in enumerate(sweep.notify) if event and t.wants(event)]
    if event is None or not chosen:
        return
    try:
        said = message(sweep, trials, event)
        notices = [
            Notice(f"sweep:{sweep.id}:end#{i}", sweep.owner, target, said) for i, target in chosen
        ]
        courier.send(jobs.outbox, notices, try_now=False)
    except Exception:
        log.exception("notification of sweep %s's end", sweep.id)
