"""REST routes of the GPU resources panel (see docs/api.md)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tornado import web

from ..gpu.owners import job_of, owner_of
from ..gpu.sampler import GpuSampler
from .base import AirHandler

INVENTORY_ID = re.compile(r"[0-9a-f]{1,64}")


class GpuHandler(AirHandler):
    """``GET jupyter-air/gpu``: inventory, NVML status and samples since a time."""

    def initialize(self, sampler: GpuSampler) -> None:
        self.sampler = sampler

    @web.authenticated
    async def get(self) -> None:
        await self._answer()

    async def _answer(self) -> None:
        since = self.float_argument("since", minimum=0)
        inventory = self.get_query_argument("inventory", None)
        if inventory is not None and not INVENTORY_ID.fullmatch(inventory):
            raise web.HTTPError(
                400, f"'inventory' must be an id from a previous answer, got {inventory!r}"
            )
        loop = asyncio.get_running_loop()
        doc = await loop.run_in_executor(None, self.sampler.snapshot, since, inventory)
        await self._add_owners(doc)
        self.write_json(doc)

    async def _add_owners(self, doc: dict[str, Any]) -> None:
        """Name the job, or the kernel and its notebook, behind each GPU process."""
        processes = [p for state in doc["state"] for p in state["processes"]]
        if not processes:
            return
        owners: dict[int, dict[str, Any]] = {}
        paths = {}
        for session in await self.session_manager.list_sessions():  # type: ignore[no-untyped-call]
            kernel = session.get("kernel") or {}
            paths[kernel.get("id")] = session.get("path") or session.get("name")
        for kernel_id in self.kernel_manager.list_kernel_ids():
            pid = _kernel_pid(self.kernel_manager.get_kernel(kernel_id))
            if pid is not None:
                owners[pid] = {"kind": "kernel", "id": kernel_id, "name": paths.get(kernel_id)}
        for proc in processes:
            job_id = job_of(proc["pid"])
            if job_id is not None:
                proc["owner"] = {"kind": "job", "id": job_id, "name": None}
            else:
                proc["owner"] = owner_of(proc["pid"], owners)


class GpuSampleHandler(GpuHandler):
    """``POST jupyter-air/gpu/sample``: sample now, then answer as the GET does."""

    @web.authenticated
    async def post(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sampler.sample_now)
        await self._answer()


def _kernel_pid(kernel: Any) -> int | None:
    provisioner = getattr(kernel, "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    return pid if isinstance(pid, int) else None
