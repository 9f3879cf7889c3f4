"""A team's day on one JupyterHub (issue 23): several users at once, each on their own
server, sharing the machine's GPU panel and the team's one MLflow tracking server.

Each user works as people do, with a pause between cells: trivial 1-rank cells that log
one point (each timed, send to idle, as the user waits for it), a 2-rank gloo cell, a
warm session's cells, and an ``air run`` job from their server's terminal (the CLI with
their server's environment). Between cells they look at the GPU panel (its API) and try
another user's jobs with their own token: list, read, cancel, all of which the Hub must
refuse. Everything goes through the Hub's proxy with the user's own token, the kernels
included (their websocket).

``workday`` runs it for a while and returns a ``Day``; ``unfinished`` then says which of
the users' jobs lack their end or their run's points, end and logs on the tracking
server. The test (``tests/test_hub_team.py``) and the benchmark
(``bench/bench_hub_team.py``) share it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from mlflow import MlflowClient
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyter_air.jobs.spec import JobKind
from jupyter_air.jobs.store import JobStore
from tests.fake_nvml import FakeGpu, Scenario
from tests.hub import Hub, Team, running_hub
from tests.tracking.test_mlflow_permissions import start_server, stop_server, wait_ready

#: The team: five users, each with their own server.
USERS = ("ada", "bea", "cem", "dov", "eli")

#: The cell whose time is the figure: one rank, one point, one line.
TRIVIAL = """%%air_distributed -n 1
from jupyter_air import log_metrics
log_metrics({"x": 1.0}, step=0)
print("trivial done")"""

DDP = """%%air_distributed -n 2
import torch, torch.distributed as dist
from jupyter_air import log_metrics
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
log_metrics({"sum": float(t)}, step=0)
print("ddp done", float(t))
dist.destroy_process_group()"""

SESSION_CELL = """%%air_distributed --session
from jupyter_air import log_metrics
log_metrics({"s": 1.0}, step=0)
print("session cell done")"""

WORK = """from jupyter_air import log_metrics
log_metrics({"w": 1.0}, step=0)
print("workload done")
"""

WORKLOAD = "command: {python} work.py\nexperiment_name: {user}-workloads\n"


#: The point each kind of job logs (a session's are in its cells' runs).
POINTS = {(JobKind.PYTHON, 1): "x", (JobKind.PYTHON, 2): "sum", (JobKind.COMMAND, 1): "w"}


class CellFailed(AssertionError):
    pass


@dataclass
class Cell:
    sent: float  # wall-clock time the request left
    seconds: float
    text: str
    error: str | None


class HubKernel:
    """A kernel of a user's server, driven over its websocket through the Hub's proxy."""

    def __init__(self, hub: Hub, user: str, ws: WebSocketClientConnection) -> None:
        self.hub, self.user, self.ws = hub, user, ws
        self.session = uuid.uuid4().hex

    @classmethod
    async def open(cls, hub: Hub, user: str, notebook: str) -> HubKernel:
        """A new notebook session's kernel (so the kernel knows its notebook's path)."""
        made = await api(
            hub,
            user,
            "POST",
            f"user/{user}/api/sessions",
            {"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}},
        )
        kernel_id = made["kernel"]["id"]
        url = hub.url.replace("http", "ws", 1) + f"user/{user}/api/kernels/{kernel_id}/channels"
        ws = await websocket_connect(
            HTTPRequest(url, headers={"Authorization": f"token {hub.token(user)}"}),
            max_message_size=64 << 20,
        )
        return cls(hub, user, ws)

    async def run(self, code: str, timeout: float = 300) -> Cell:
        """Execute ``code``; its time from the request to the kernel's idle, its text."""
        msg_id = uuid.uuid4().hex
        message = {
            "header": {
                "msg_id": msg_id,
                "msg_type": "execute_request",
                "session": self.session,
                "username": self.user,
                "version": "5.3",
                "date": "",
            },
            "parent_header": {},
            "metadata": {},
            "content": {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
            "channel": "shell",
            "buffers": [],
        }
        sent, started = time.time(), time.monotonic()
        await self.ws.write_message(json.dumps(message))
        text: list[str] = []
        error: str | None = None
        replied = idle = False
        deadline = started + timeout
        while not (replied and idle):
            left = deadline - time.monotonic()
            if left <= 0:
                raise CellFailed(f"{self.user}: no end of the cell in {timeout:g} s: {text}")
            raw = await asyncio.wait_for(self.ws.read_message(), left)
            if raw is None:
                raise CellFailed(f"{self.user}: the kernel's websocket closed")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind in ("display_data", "update_display_data", "execute_result"):
                text.append(content.get("data", {}).get("text/plain", ""))
            elif kind == "error":
                error = "\n".join(content["traceback"])
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        return Cell(sent, time.monotonic() - started, "".join(text), error)

    async def must(self, code: str, says: str) -> Cell:
        cell = await self.run(code)
        if cell.error is not None or says not in cell.text:
            raise CellFailed(f"{self.user}: {code.splitlines()[0]}: {cell.error or cell.text}")
        return cell

    def close(self) -> None:
        self.ws.close()


async def request(hub: Hub, user: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request to the Hub's proxy as ``user``; any status comes back."""
    client = AsyncHTTPClient()
    try:
        response = await client.fetch(
            hub.url + path,
            method=method,
            headers={
                "Authorization": f"token {hub.token(user)}",
                "Content-Type": "application/json",
            },
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True,
            follow_redirects=False,
            request_timeout=120,
        )
        status, raw = response.code, response.body
    except HTTPClientError as err:
        status, raw = err.code, err.response.body if err.response else b""
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


async def api(hub: Hub, user: str, method: str, path: str, body: Any = None) -> Any:
    status, parsed = await request(hub, user, method, path, body)
    if status >= 400:
        raise AssertionError(f"{user}: {method} {path}: {status} {parsed}")
    return parsed


@dataclass
class Day:
    """What the users' day gave."""

    trivial: list[float] = field(default_factory=list)
    #: Each user's trivial cells in order: when each was sent, and its seconds.
    trivial_cells: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    cells: dict[str, int] = field(default_factory=dict)  # kind -> cells that succeeded
    failures: list[str] = field(default_factory=list)
    #: Cross-user requests the Hub let through: (who, what, status).
    crossed: list[tuple[str, str, int]] = field(default_factory=list)
    refused: int = 0
    #: Each user's server's resident memory (bytes) after the first round, and at the end.
    rss_start: dict[str, int] = field(default_factory=dict)
    rss_end: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.cells[kind] = self.cells.get(kind, 0) + 1

    @property
    def p50(self) -> float:
        return statistics.median(self.trivial)

    @property
    def p90(self) -> float:
        return statistics.quantiles(self.trivial, n=10)[-1] if len(self.trivial) > 1 else 0.0

    def growth(self) -> dict[str, float]:
        """MiB each server grew from the first round to the end."""
        return {u: (self.rss_end[u] - self.rss_start[u]) / 2**20 for u in self.rss_end}


def server_process(hub: Hub, user: str) -> psutil.Process:
    """``user``'s single-user server (a child of the Hub's spawner)."""
    for proc in psutil.Process(hub.process.pid).children(recursive=True):
        try:
            if "jupyterhub-singleuser" in " ".join(proc.cmdline()) and (
                proc.environ().get("JUPYTERHUB_USER") == user
            ):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"{user}'s server is not running")


def user_env(hub: Hub, user: str, tracking_uri: str) -> dict[str, str]:
    """The environment of ``user``'s server's terminal: what ``air`` there sees."""
    return {
        **os.environ,
        "AIR_HOME": str(hub.work / "air" / user),
        "HOME": str(hub.home(user)),
        "MLFLOW_TRACKING_URI": tracking_uri,
        "CUDA_VISIBLE_DEVICES": "",
    }


async def air(hub: Hub, user: str, tracking_uri: str, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jupyter_air.cli",
        *args,
        cwd=hub.home(user),
        env=user_env(hub, user, tracking_uri),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 300)
    return process.returncode or 0, out.decode(errors="replace")


def last_job(hub: Hub, user: str) -> str | None:
    jobs = JobStore(hub.work / "air" / user).jobs()
    return jobs[-1].id if jobs else None


async def cross(hub: Hub, user: str, other: str, day: Day) -> None:
    """``user`` tries ``other``'s jobs with their own token: the Hub must refuse each
    (403: anything else is a crossing, or a broken server, both failures); ``other``'s
    own token reads the same job, so a refusal is not an outage."""
    job = last_job(hub, other) or "0" * 12
    base = f"user/{other}/jupyter-air/jobs"
    for method, path in [
        ("GET", f"{base}?all=1"),
        ("GET", f"{base}/{job}"),
        ("GET", f"{base}/{job}/logs"),
        ("POST", f"{base}/{job}/cancel"),
    ]:
        status, _ = await request(hub, user, method, path, {} if method == "POST" else None)
        if status == 403:
            day.refused += 1
        else:
            day.crossed.append((user, f"{method} {path}", status))
    status, _ = await request(hub, other, "GET", f"{base}?all=1")
    if status != 200:
        day.failures.append(f"{other} could not list their own jobs: {status}")


async def user_day(
    hub: Hub,
    user: str,
    users: list[str],
    tracking_uri: str,
    clock: Clock,
    day: Day,
    pause: float,
) -> None:
    """One user's rounds: cells, session cells, a workload, the panel, a cross try each."""
    rng = random.Random(user)
    home = hub.home(user)
    (home / "work.py").write_text(WORK)
    (home / "workload.yaml").write_text(WORKLOAD.format(python=sys.executable, user=user))
    kernel = await HubKernel.open(hub, user, "train.ipynb")
    try:
        await kernel.must("%load_ext jupyter_air", "")
        await clock.ready(user)
        await kernel.must("%air_session start -n 1", "")
        round_ = 0
        while round_ == 0 or time.monotonic() < clock.until:
            for _ in range(3):
                cell = await kernel.must(TRIVIAL, "trivial done")
                day.trivial.append(cell.seconds)
                day.trivial_cells.setdefault(user, []).append((cell.sent, cell.seconds))
                day.count("trivial")
                await asyncio.sleep(pause * rng.uniform(0.5, 1.5))
                panel = await api(hub, user, "GET", f"user/{user}/jupyter-air/gpu")
                if len(panel["gpus"]) != 1:
                    day.failures.append(f"{user}: the GPU panel showed {panel['gpus']}")
            await kernel.must(SESSION_CELL, "session cell done")
            day.count("session")
            code, out = await air(hub, user, tracking_uri, "run", "-f", "workload.yaml", "--watch")
            if code != 0 or "workload done" not in out:
                day.failures.append(f"{user}: air run: {out[-2000:]}")
            day.count("air run")
            if round_ % 2 == 0:
                await kernel.must(DDP, "ddp done 3.0")
                day.count("ddp")
            await cross(hub, user, rng.choice([u for u in users if u != user]), day)
            if round_ == 0:
                day.rss_start[user] = server_process(hub, user).memory_info().rss
            round_ += 1
        day.rss_end[user] = server_process(hub, user).memory_info().rss
        await kernel.must("%air_session stop", "")
    except CellFailed as err:
        day.failures.append(str(err))
    finally:
        kernel.close()


class Clock:
    """The day starts once every user's kernel is up; it ends ``minutes`` later."""

    def __init__(self, users: int, minutes: float) -> None:
        self.users, self.minutes = users, minutes
        self.until = 0.0
        self._ready: set[str] = set()
        self._start = asyncio.Event()

    async def ready(self, user: str) -> None:
        """``user``'s kernel is up: wait for the others' (10 minutes at most)."""
        self._ready.add(user)
        if len(self._ready) == self.users:
            self.until = time.monotonic() + 60 * self.minutes
            self._start.set()
        await asyncio.wait_for(self._start.wait(), 600)


def workday(
    hub: Hub, users: list[str], tracking_uri: str, minutes: float, pause: float = 3.0
) -> Day:
    """Every user's rounds at once, from the moment all kernels are up, until ``minutes``
    have passed (a round begun is finished; each user does one at least)."""
    day = Day()

    async def everyone() -> None:
        clock = Clock(len(users), minutes)
        tasks = [
            asyncio.create_task(user_day(hub, u, users, tracking_uri, clock, day, pause))
            for u in users
        ]
        for task in tasks:
            try:
                await task
            except Exception as err:  # one user's failure is reported, the rest go on
                day.failures.append(f"{type(err).__name__}: {err!r}")

    asyncio.run(everyone())
    return day


def unfinished(hub: Hub, users: list[str], tracking_uri: str) -> list[str]:
    """What of the users' jobs is not complete yet: a job without its end, or a run
    without its end, its point or its logs on the tracking server (a session's points are
    in its cells' runs)."""
    client = MlflowClient(tracking_uri)
    missing = []
    for user in users:
        store = JobStore(hub.work / "air" / user)
        for job in store.jobs():
            name = f"{user} {job.spec.kind} {job.id}"
            if job.status != "SUCCEEDED":
                missing.append(f"{name}: {job.status} {job.message}")
                continue
            runs = [a.run_id for a in store.attempts(job.id)]
            if job.spec.kind == JobKind.SESSION and job.experiment_id:
                cells = client.search_runs([job.experiment_id], "tags.`air.session_cell` != ''")
                if not cells:
                    missing.append(f"{name}: no cell's run")
                missing += [
                    f"{name}: cell run {c.info.run_id} {c.info.status} {c.data.metrics}"
                    for c in cells
                    if c.info.status != "FINISHED" or "s" not in c.data.metrics
                ]
            for run_id in runs:
                if not run_id:
                    missing.append(f"{name}: no run")
                    continue
                run = client.get_run(run_id)
                if run.info.status != "FINISHED":
                    missing.append(f"{name}: run {run.info.status}")
                elif (key := POINTS.get((job.spec.kind, job.spec.compute.world_size))) and (
                    key not in run.data.metrics
                ):
                    missing.append(f"{name}: run without its {key!r} point")
                elif not client.list_artifacts(run_id, "logs/node_0"):
                    missing.append(f"{name}: run without its logs")
    return missing


@contextmanager
def team_on_hub(
    work: Path, fake_nvml_dir: Path, users: tuple[str, ...] = USERS
) -> Iterator[tuple[Hub, str]]:
    """The team's tracking server (``mlflow server``, sqlite, ``--serve-artifacts``) and a
    Hub whose users' servers (all started) point at it, on a machine with one GPU; the Hub
    and the server's address."""
    root = work / "tracking"
    root.mkdir(parents=True)
    server = start_server(root, "--serve-artifacts", "--artifacts-destination", str(root / "a"))
    try:
        wait_ready(server)
        (work / "hub").mkdir()
        env = {"MLFLOW_TRACKING_URI": server.uri, "CUDA_VISIBLE_DEVICES": ""}
        with running_hub(work / "hub", fake_nvml_dir, Team(users, {}, env)) as hub:
            hub.write(Scenario(gpus=[FakeGpu(util=[30, 60, 90], temp=[50, 55])]))
            hub.start_server(*users)
            yield hub, server.uri
    finally:
        stop_server(server)
