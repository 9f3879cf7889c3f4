"""Five users on one JupyterHub with one tracking server (issue 23, item 7; see
docs/benchmarks.md).

A real JupyterHub (``tests/hub.py``) with five users, each with their own server, the
team's one ``mlflow server`` (sqlite, ``--serve-artifacts``) in every server's
environment, and the machine's one (fake) GPU. All five work at once for ``--minutes``
(``tests/hub_team.py``): rounds of three trivial 1-rank cells logging one point (the
figure: from the cell sent through the Hub to the kernel's idle), a warm session's cell,
an ``air run`` job, every other round a 2-rank gloo cell, the GPU panel's API between
cells, and tries at another user's jobs with their own token.

Then: every job's end and its run's end, point and logs on the tracking server (the
time until all of them landed), the cross-user tries the Hub let through (must be
none), and each server's resident memory from the end of its first round to the end.

Run: ``.venv/bin/python bench/bench_hub_team.py [--minutes 10] [--pause 3]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.spec import JobKind  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from tests.fake_nvml import build_library  # noqa: E402
from tests.hub import Hub  # noqa: E402
from tests.hub_team import USERS, Day, team_on_hub, unfinished, workday  # noqa: E402

#: A trivial cell's time, cut where the job's record marks it.
PHASES = (
    "sent to the job recorded (kernel: options, tracking probe, submit)",
    "to its attempt started (supervisor process, run made by the tail process)",
    "to the rank's exit (an interpreter, jupyter_air, the cell's code)",
    "to the cell's idle (the kernel sees the end, ships and ends the run, shows it)",
)


def phases(hub: Hub, day: Day) -> list[float]:
    """The median seconds of each of ``PHASES`` over the trivial cells: the users' 1-rank
    cell jobs, in the order of the cells each sent."""
    cuts: list[list[float]] = [[] for _ in PHASES]
    for user, cells in day.trivial_cells.items():
        store = JobStore(hub.work / "air" / user)
        jobs = [
            j
            for j in sorted(store.jobs(), key=lambda j: j.created)
            if j.spec.kind == JobKind.PYTHON and j.spec.compute.world_size == 1
        ]
        for (sent, seconds), job in zip(cells, jobs, strict=True):
            (attempt,) = store.attempts(job.id)
            assert attempt.ended is not None
            marks = [sent, job.created, attempt.started, attempt.ended, sent + seconds]
            for i, (a, b) in enumerate(itertools.pairwise(marks)):
                cuts[i].append(b - a)
    return [statistics.median(c) for c in cuts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between cells")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-hub-team-"))
    with team_on_hub(work, build_library()) as (hub, tracking_uri):
        started = time.monotonic()
        day = workday(hub, list(USERS), tracking_uri, minutes=args.minutes, pause=args.pause)
        worked = time.monotonic() - started
        ended = time.monotonic()
        left = unfinished(hub, list(USERS), tracking_uri)
        while left and time.monotonic() - ended < 600:
            time.sleep(2)
            left = unfinished(hub, list(USERS), tracking_uri)
        landed = time.monotonic() - ended
        cut = phases(hub, day)

    print(f"{len(USERS)} users for {worked / 60:.1f} min, a pause of {args.pause:g} s")
    for kind, count in sorted(day.cells.items()):
        print(f"  {kind}: {count} succeeded")
    print(f"  failures: {len(day.failures)}")
    for failure in day.failures:
        print(f"    {failure[:500]}")
    print(
        f"trivial 1-rank cell with one point, send to idle: p50 {day.p50:.2f} s, "
        f"p90 {day.p90:.2f} s ({len(day.trivial)} cells)"
    )
    for name, seconds in zip(PHASES, cut, strict=True):
        print(f"    {seconds:5.2f} s  {name}")
    print(f"cross-user tries refused: {day.refused}, let through: {len(day.crossed)}")
    for crossed in day.crossed:
        print(f"    {crossed}")
    print(f"every run complete on the tracking server {landed:.1f} s after the last cell")
    for what in left:
        print(f"    NOT COMPLETE: {what}")
    growth = day.growth()
    print("server memory growth, MiB: " + ", ".join(f"{u} {g:+.1f}" for u, g in growth.items()))


if __name__ == "__main__":
    main()
