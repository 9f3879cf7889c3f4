"""REST routes of the GPU resources panel (see docs/api.md)."""

from __future__ import annotations

import asyncio
import re
from bisect import bisect_right
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import web

from ..gpu.owners import job_of, owner_of
from ..gpu.sampler import GpuSampler
from ..job_dir import AttemptDir
from ..jobs.service import JobService
from ..jobs.store import JobStore
from ..status import JobStatus
from .base import AirHandler
from .jobs_handlers import JobsBase, in_store_thread

INVENTORY_ID = re.compile(r"[0-9a-f]{1,64}")


def _inventory_argument(handler: AirHandler) -> str | None:
    inventory = handler.get_query_argument("inventory", None)
    if inventory is not None and not INVENTORY_ID.fullmatch(inventory):
        raise web.HTTPError(
            400, f"'inventory' must be an id from a previous answer, got {inventory!r}"
        )
    return inventory


class GpuHandler(AirHandler):
    """``GET jupyter-air/gpu``: inventory, NVML status and samples since a time, plus
    the nodes of running multi-node jobs (whose GPUs the panel can show instead)."""

    def initialize(self, sampler: GpuSampler, store: JobStore) -> None:
        self.sampler = sampler
        self.store = store

    @property
    def service(self) -> JobService:
        """The jobs service as this request's caller."""
        return JobService(self.store, self.caller())

    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self._answer()

    async def _answer(self) -> None:
        since = self.float_argument("since", minimum=0)
        inventory = _inventory_argument(self)
        loop = asyncio.get_running_loop()
        doc = await loop.run_in_executor(None, self.sampler.snapshot, since, inventory)
        doc["nodes"] = await in_store_thread(self.service.running_nodes)
        await self._add_owners(doc)
        await hide_others(self.service, doc)
        self.write_json(doc)

    async def _add_owners(self, doc: dict[str, Any]) -> None:
        """Name the job, or the kernel and its notebook, behind each GPU process."""
        processes = [p for state in doc["state"] for p in state["processes"]]
        if not processes:
            return
        owners = await kernel_owners(self)
        for proc in processes:
            job_id = job_of(proc["pid"])
            if job_id is not None:
                proc["owner"] = {"kind": "job", "id": job_id, "name": None}
            else:
                proc["owner"] = owner_of(proc["pid"], owners)
        await add_job_details(self.service, processes)


class GpuSampleHandler(GpuHandler):
    """``POST jupyter-air/gpu/sample``: sample now, then answer as the GET does."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sampler.sample_now)
        await self._answer()


class JobGpuHandler(JobsBase):
    """``GET jupyter-air/jobs/<id>/gpu?node=N``: what node N's sampler last reported,
    answered like ``GET jupyter-air/gpu``; it stays readable after the job."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        node = self.int_argument("node", None, 0, 1 << 16)
        if node is None:
            raise web.HTTPError(400, "'node' is required: a node number of the job")
        since = self.float_argument("since", minimum=0)
        inventory = _inventory_argument(self)
        job = await self.job(job_id)
        place = await self.attempt_of(job)
        attempt = place.attempt
        stored = await in_store_thread(AttemptDir(place.directory).read_gpu, node)
        if stored is None:
            raise web.HTTPError(404, f"no GPU samples of node {node} in attempt {attempt}")
        running = job.status is JobStatus.RUNNING and attempt == place.attempts
        doc = _cut(stored, since, inventory)
        if running:  # its jobs' hints and sessions as they are now, as for this server
            processes = [p for state in doc["state"] for p in state.get("processes") or []]
            await add_job_details(self.service, processes)
        await hide_others(self.service, doc)
        self.write_json(
            {**doc, "job": job.id, "attempt": attempt, "node": node, "running": running}
        )


async def kernel_owners(handler: JupyterHandler) -> dict[int, dict[str, Any]]:
    """This server's kernels by pid: ``{"kind": "kernel", "id", "name": its notebook}``."""
    owners: dict[int, dict[str, Any]] = {}
    paths = {}
    for session in await handler.session_manager.list_sessions():  # type: ignore[no-untyped-call]
        kernel = session.get("kernel") or {}
        paths[kernel.get("id")] = session.get("path") or session.get("name")
    for kernel_id in handler.kernel_manager.list_kernel_ids():
        pid = _kernel_pid(handler.kernel_manager.get_kernel(kernel_id))
        if pid is not None:
            owners[pid] = {"kind": "kernel", "id": kernel_id, "name": paths.get(kernel_id)}
    return owners


async def add_job_details(service: JobService, processes: list[dict[str, Any]]) -> None:
    """What is known of each running job beside its processes: its efficiency hints
    (``owner.hints``: texts, present only when there are some) and, for a warm session,
    whether it runs a cell or holds its GPUs idle (``owner.session``)."""
    owners = [
        owner
        for p in processes
        if isinstance(owner := p.get("owner"), dict)  # None: nobody we know
        and owner.get("kind") == "job"
        and isinstance(owner.get("id"), str)
    ]
    if not owners:
        return
    details = await in_store_thread(service.running_details, {o["id"] for o in owners})
    for owner in owners:
        owner.update(details.get(owner["id"], {}))


async def hide_others(service: JobService, doc: dict[str, Any]) -> None:
    """What the caller may not view leaves ``doc``: a process of such a job becomes
    "another user's job" with its memory only (no pid, name, job id or anything added
    to it). Done last, on the server (the service lists only the nodes of the jobs the
    caller may view)."""
    states = [s for s in doc.get("state", []) if isinstance(s.get("processes"), list)]
    ids = {
        p["owner"]["id"]
        for state in states
        for p in state["processes"]
        if isinstance(p.get("owner"), dict) and p["owner"].get("kind") == "job"
    }
    visible = await in_store_thread(service.visible, ids)
    for state in states:
        state["processes"] = [
            p
            if (p.get("owner") or {}).get("kind") != "job" or p["owner"]["id"] in visible
            # another user's job
            else {
                "pid": None,
                "name": None,
                "mem_mib": p.get("mem_mib"),
                "owner": {"kind": "other"},
            }
            for p in state["processes"]
        ]


def _cut(stored: dict[str, Any], since: float | None, inventory: str | None) -> dict[str, Any]:
    """A stored full-history snapshot cut as ``GpuSampler.snapshot`` would cut its own."""
    doc = dict(stored)
    doc["paused"] = False  # this request resumed nothing
    doc["reset"] = inventory is not None and inventory != stored["inventory"]
    if inventory == stored["inventory"]:
        for key in ("nvml", "host", "gpus"):
            doc.pop(key, None)
    if since is not None and not doc["reset"]:
        samples = stored["samples"]
        start = bisect_right(samples["t"], since)
        doc["samples"] = {
            **{name: values[start:] for name, values in samples.items() if name != "gpu"},
            "gpu": [
                {name: values[start:] for name, values in gpu.items()} for gpu in samples["gpu"]
            ],
        }
    return doc


def _kernel_pid(kernel: Any) -> int | None:
    provisioner = getattr(kernel, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    return pid if isinstance(pid, int) else None
