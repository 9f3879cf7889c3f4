"""A scripted day of two users' jobs, in a job store's own records (attempts, hints,
system samples), for the GPU-hours tests (issue 41, item 3)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.node.hints import write_hints
from jupyter_air.jobs.permissions import parse_grant
from jupyter_air.jobs.store import JobStore
from jupyter_air.status import AttemptStatus
from jupyter_air.tracking import journal
from jupyter_air.tracking.sampling import Sample
from tests.factories import job_spec

HOUR = 3600.0
#: Samples every 10 minutes, each the mean since the one before.
EVERY = 600.0


@dataclass(frozen=True)
class Day:
    """The jobs made, by name, and the window's end (the day starts 24 h before)."""

    jobs: dict[str, str]
    now: float


@contextmanager
def clock_at(monkeypatch: pytest.MonkeyPatch, t: float) -> Iterator[None]:
    """The store's records made at ``t``."""
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: t)
        yield


def _attempt(
    monkeypatch: pytest.MonkeyPatch,
    store: JobStore,
    job_id: str,
    number: int,
    span: tuple[float, float],
    utils: dict[int, float],
    hinted: list[int] | None = None,
) -> None:
    """An attempt from ``span[0]`` to ``span[1]``, sampling GPUs ``utils`` (index ->
    utilization) every 10 minutes; ``hinted``: the GPUs its hints file names."""
    start, end = span
    with clock_at(monkeypatch, start):
        store.start_attempt(job_id, number, None)
    files = AttemptDir(store.attempt_dir(job_id, number)).make()
    if hinted is not None:
        write_hints(files.path, hinted, [], end)
    t, step, samples = start + EVERY, 0, []
    while t <= end:
        metrics = {f"gpu_{gpu}_utilization_percentage": util for gpu, util in utils.items()}
        samples.append(Sample(t, step, metrics))
        t, step = t + EVERY, step + 1
    journal.append_samples(files, "run", "system/", samples, [s.step for s in samples])
    with clock_at(monkeypatch, end):
        store.end_attempt(job_id, number, AttemptStatus.SUCCEEDED, [0])


def scripted_day(
    monkeypatch: pytest.MonkeyPatch, store: JobStore, alice: str, bob: str, day_end: float
) -> Day:
    """alice: "train", 2 GPUs for 2 h (GPU 1 idle: 4 GPU-h, 2 idle); "retry", 1 GPU over
    two attempts of 0.5 h and 1 h (idle in the second: 1.5 GPU-h, 1 idle). bob: "overnight",
    1 GPU idle from 2 h before the day to 2 h into it (2 GPU-h in the day, 2 idle);
    "yesterday", ended before the day (none). bob may view alice's "train"."""
    t0 = day_end - 24 * HOUR
    jobs: dict[str, str] = {}
    specs = [
        ("train", alice, 2, t0 + 1 * HOUR, ("bob:CAN_VIEW",)),
        ("retry", alice, 1, t0 + 5 * HOUR, ()),
        ("overnight", bob, 1, t0 - 2 * HOUR, ()),
        ("yesterday", bob, 1, t0 - 5 * HOUR, ()),
    ]
    for name, owner, nproc, created, grants in specs:
        with clock_at(monkeypatch, created):
            spec = job_spec("command", command=["true"], nproc_per_node=nproc, run_name=name)
            grant = tuple(parse_grant(g) for g in grants)
            jobs[name] = store.create(spec, owner=owner, grants=grant).id
    _attempt(
        monkeypatch, store, jobs["train"], 1, (t0 + HOUR, t0 + 3 * HOUR), {0: 90, 1: 0}, [0, 1]
    )
    # no hints file: the first GPU its samples read (GPUs 0-3 sampled, 1 rank)
    four = {0: 60.0, 1: 50.0, 2: 0.0, 3: 0.0}
    _attempt(monkeypatch, store, jobs["retry"], 1, (t0 + 5 * HOUR, t0 + 5.5 * HOUR), four)
    idle_four = {0: 2.0, 1: 50.0, 2: 0.0, 3: 0.0}
    _attempt(monkeypatch, store, jobs["retry"], 2, (t0 + 6 * HOUR, t0 + 7 * HOUR), idle_four)
    _attempt(monkeypatch, store, jobs["overnight"], 1, (t0 - 2 * HOUR, t0 + 2 * HOUR), {0: 1})
    _attempt(monkeypatch, store, jobs["yesterday"], 1, (t0 - 5 * HOUR, t0 - 3 * HOUR), {0: 99})
    for name, (_, _, _, created, _) in zip(jobs, specs, strict=True):
        store.update(jobs[name], status="SUCCEEDED", started=created)
    store.update(jobs["train"], ended=t0 + 3 * HOUR)
    store.update(jobs["retry"], ended=t0 + 7 * HOUR)
    store.update(jobs["overnight"], ended=t0 + 2 * HOUR)
    store.update(jobs["yesterday"], ended=t0 - 3 * HOUR)
    return Day(jobs, day_end)
