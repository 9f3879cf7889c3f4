"""The cost of job permissions on ``GET jupyter-air/jobs`` (issue 9; docs/benchmarks.md).

One store of 1,000 finished jobs with 10 grants each (nine users and one group). Two
real ``jupyter server`` processes on it, side by side, requests alternating:

- before: the extension as it was before permissions (``git archive`` of ``--before``,
  default the commit before them), which lists every job without a check;
- after: the extension of ``--after`` (default HEAD), which chooses the jobs the caller
  may view in SQL. Both from commits, so uncommitted work in the tree is in neither.

Both answer ``?all=1&limit=1000`` with every job: a single-user server's caller is the
OS user, who owns them all. A third arm asks the after-server's store in-process the
way the route does, as a grantee who sees the jobs through a group grant only (the
SQL's worst case: no row is owned, each one goes through the grants), against the
same listing without the filter.

Run: ``.venv/bin/python bench/bench_permissions.py [--rounds 20] [--before C] [--after C]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.identity import Identity, os_user  # noqa: E402
from jupyter_air.jobs.documents import job_document  # noqa: E402
from jupyter_air.jobs.permissions import Grant, Level, Principal  # noqa: E402
from jupyter_air.jobs.spec import JobKind, job_spec  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402

JOBS, GRANTS = 1000, 10


def fill(store: JobStore) -> None:
    workload = job_spec(JobKind.COMMAND, command=["python", "train.py"], nproc_per_node=2)
    for n in range(JOBS):
        grants = tuple(
            Grant(Principal("user", f"user{n % 50}-{k}"), Level.CAN_VIEW) for k in range(9)
        )
        grants += (Grant(Principal("group", f"team{n % 7}"), Level.CAN_MANAGE_RUN),)
        job = store.create(workload, owner=os_user(), grants=grants)
        store.start_attempt(job.id, 1, f"run{n}")
        store.end_attempt(job.id, 1, "SUCCEEDED", [0, 0])
        store.update(job.id, status="SUCCEEDED", ended=time.time())


@contextmanager
def server(home: Path, pythonpath: Path, log: Path) -> Iterator[Callable[[], float]]:
    """A jupyter server with jupyter_air on ``home``; yields a timed GET of the listing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "AIR_HOME": str(home), "JUPYTER_RUNTIME_DIR": str(log.parent / log.stem)}
    env["PYTHONPATH"] = str(pythonpath)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={log.parent}",
                "--ServerApp.jpserver_extensions={'jupyter_air': True}",
                "--GpuSampler.interval=3600",
            ],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/jupyter-air/jobs?all=1&limit=1000"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})

    def timed() -> float:
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read()
        elapsed = time.perf_counter() - start
        assert body.count(b'"id"') == JOBS, body[:200]
        return elapsed

    try:
        for _ in range(300):
            try:
                timed()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        yield timed
    finally:
        process.terminate()
        process.wait(10)


def checkout(commit: str, where: Path) -> Path:
    """The ``jupyter_air`` package of ``commit``, under ``where``."""
    where.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "jupyter_air"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def in_process(store: JobStore, who: Identity | None) -> float:
    start = time.perf_counter()
    jobs = store.jobs(limit=1000, visible_to=who)
    docs = [job_document(store, job) for job in jobs]
    assert len(docs) == JOBS
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--before", default="888e3b8~1", help="the commit before permissions")
    parser.add_argument("--after", default="HEAD", help="a commit with permissions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        home = tmp / "air"
        store = JobStore(home)
        fill(store)
        old, new = checkout(args.before, tmp / "before"), checkout(args.after, tmp / "after")
        with (
            server(home, old, tmp / "before.log") as before,
            server(home, new, tmp / "after.log") as after,
        ):
            times: dict[str, list[float]] = {"before": [], "after": []}
            for n in range(args.rounds):  # alternating which goes first
                for name in ("before", "after")[:: 1 if n % 2 else -1]:
                    times[name].append((before if name == "before" else after)())
        grantee = Identity("someone", frozenset({f"team{n}" for n in range(7)}))
        local: dict[str, list[float]] = {"no filter": [], "grantee": []}
        for _ in range(args.rounds):
            local["no filter"].append(in_process(store, None))
            local["grantee"].append(in_process(store, grantee))
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"GET jupyter-air/jobs, {JOBS} jobs x {GRANTS} grants, median of {args.rounds}:")
    print(f"  before {b * 1000:7.1f} ms   after {a * 1000:7.1f} ms   ratio {a / b:.2f}x")
    n, g = statistics.median(local["no filter"]), statistics.median(local["grantee"])
    print("The route's store work in-process (listing + documents):")
    print(f"  no filter {n * 1000:7.1f} ms   group grantee {g * 1000:7.1f} ms   ratio {g / n:.2f}x")


if __name__ == "__main__":
    main()
