"""REST routes of a job's profiles (docs/api.md): ask for one, list them with their
summaries, download a merged trace. Translation only: the jobs service checks each call
(asking needs CAN_MANAGE_RUN, reading CAN_VIEW).

A profile asked here is waited on and finished (merged, summed up, kept on the run) by a
thread of this server, so that the browser that asked may go away; a listing finishes
any that a server stopped meanwhile left unfinished.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..jobs.service import JobService, Refused
from ..jobs.store import JobStore
from ..perf import profiles
from ..perf.profiles import Profile, ProfileState
from .jobs_handlers import JOB, JobsBase, in_store_thread

log = logging.getLogger(__name__)

PROFILE = r"(?P<profile_id>\d{8}-\d{6}-[0-9a-f]{6})"


class JobProfilesHandler(JobsBase):
    """``GET jupyter-air/jobs/<id>/profiles``: the job's profiles, oldest first, each with
    its state and, once finished, its summary (CAN_VIEW). ``POST`` ``{"steps": N}``:
    every running rank profiles its next N steps (CAN_MANAGE_RUN); 202 with the profile,
    409 when no rank runs or another profile waits for its ranks."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        job, found = await in_store_thread(self.service.profiles, job_id)
        loop = asyncio.get_running_loop()
        docs = []
        for profile in found:
            if profile.finished() is None and profile.state(job.done) is not ProfileState.WAITING:
                await loop.run_in_executor(None, profiles.finish, profile)
            docs.append(profile.to_json(job.done))
        self.write_json({"job": job.id, "running": not job.done, "profiles": docs})

    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        steps, timeout = _asked(self.request.body)
        service = self.service
        try:
            profile = await in_store_thread(service.profile, job_id, steps, timeout)
        except Refused as err:
            raise web.HTTPError(400, str(err).replace("%", "%%")) from None
        threading.Thread(
            target=_finish_when_answered,
            args=(service, profile),
            name=f"air-profile-{profile.id}",
            daemon=True,
        ).start()
        self.set_status(202)
        self.write_json(profile.to_json())


class JobProfileTraceHandler(JobsBase):
    """``GET jupyter-air/jobs/<id>/profiles/<profile>/trace``: the merged trace, gzipped
    Chrome JSON for Perfetto or ``chrome://tracing`` (CAN_VIEW); 404 before it exists."""

    @web.authenticated
    @authorized
    async def get(self, job_id: str, profile_id: str) -> None:
        _, found = await in_store_thread(self.service.profiles, job_id)
        profile = next((p for p in found if p.id == profile_id), None)
        merged = profile.folder / profiles.MERGED if profile is not None else None
        if merged is None or not merged.is_file():
            raise web.HTTPError(404, f"profile {profile_id} of job {job_id} has no merged trace")
        data = await asyncio.get_running_loop().run_in_executor(None, merged.read_bytes)
        name = f"{job_id}-profile-{profile_id}.json.gz"
        self.set_header("Content-Type", "application/gzip")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        self.finish(data)


def _asked(body: bytes) -> tuple[int, float]:
    """Steps and seconds to wait for the ranks of ``{"steps": N, "timeout": S}`` (both
    optional); 400 otherwise (the service checks their ranges)."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        raise web.HTTPError(400, 'the body must be JSON: {"steps": N}') from None
    if not isinstance(doc, dict) or set(doc) - {"steps", "timeout"}:
        raise web.HTTPError(400, 'the body is {"steps": N, "timeout": seconds}')
    steps = doc.get("steps", profiles.DEFAULT_STEPS)
    timeout = doc.get("timeout", profiles.DEFAULT_TIMEOUT)
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise web.HTTPError(400, f"'steps' must be an integer, got {steps!r}")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool):
        raise web.HTTPError(400, f"'timeout' must be a number of seconds, got {timeout!r}")
    return steps, float(timeout)


def _finish_when_answered(service: JobService, profile: Profile) -> None:
    """Wait for the ranks, then finish the profile (on a thread of its own)."""

    def ended() -> bool:
        try:
            return service.store.get(profile.job_id).done
        except Exception:  # the store gone or locked for long: finish with what is there
            return True

    try:
        profiles.wait(profile, ended)
        profiles.finish(profile)
    except Exception:
        log.exception("could not finish profile %s of job %s", profile.id, profile.job_id)


def profile_handlers(store: JobStore) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"store": store}
    return [
        (rf"/jupyter-air/jobs/{JOB}/profiles", JobProfilesHandler, kwargs),
        (rf"/jupyter-air/jobs/{JOB}/profiles/{PROFILE}/trace", JobProfileTraceHandler, kwargs),
    ]
