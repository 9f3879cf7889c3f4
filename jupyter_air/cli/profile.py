"""``air profile JOB [--steps N]``: every rank of a running job profiles its next N steps
(``torch.profiler``), without a restart; the summary is printed, the merged trace and
each rank's are kept with the attempt and on its run."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..jobs.permissions import Forbidden
from ..jobs.service import Conflict, JobService, Refused
from ..jobs.store import UnknownJob
from ..perf import profiles
from ..perf.profiles import Profile, ProfileState
from .common import CliError, _output, _service


def add_commands(sub: Any) -> None:
    """Register ``air profile``."""
    profiling = sub.add_parser(
        "profile",
        help="profile the next steps of every rank of a running job (torch.profiler)",
        description="Turn torch.profiler on in every rank of a running job for its next N "
        "steps, then off; print the top operators by self time and each rank's compute / "
        "communication / idle split; keep each rank's trace and one merged trace (a process "
        "per rank, clocks aligned; open it in Perfetto or chrome://tracing) with the attempt "
        "and on its MLflow run. Needs CAN_MANAGE_RUN. Steps are marked by the HF Trainer, "
        "Lightning or jupyter_air.step() in every rank (log_metrics marks rank 0's only).",
    )
    profiling.add_argument("job_id")
    profiling.add_argument(
        "--steps",
        type=int,
        default=profiles.DEFAULT_STEPS,
        help=f"steps to profile (default {profiles.DEFAULT_STEPS}, at most {profiles.MAX_STEPS})",
    )
    profiling.add_argument(
        "--timeout",
        type=float,
        default=profiles.DEFAULT_TIMEOUT,
        help=f"seconds to wait for the ranks (default {profiles.DEFAULT_TIMEOUT:g})",
    )
    _output(profiling)
    profiling.set_defaults(func=_profile)


def _profile(args: argparse.Namespace) -> int:
    service = _service()
    try:
        asked = service.profile(args.job_id, args.steps, args.timeout)
    except UnknownJob:
        raise CliError(f"no job {args.job_id!r}") from None
    except (Forbidden, Conflict, Refused) as err:
        raise CliError(str(err)) from None
    if args.output == "text":
        print(
            f"asked the {asked.ranks} rank{'s' if asked.ranks != 1 else ''} of job "
            f"{asked.job_id} to profile {asked.steps} steps; waiting for them "
            f"(at most {args.timeout:g} s)",
            file=sys.stderr,
            flush=True,
        )
    state = profiles.wait(asked, lambda: service.get(asked.job_id).done)
    done = profiles.finish(asked)
    if args.output == "json":
        print(json.dumps(asked.to_json(), indent=2))
    else:
        print(_text(service, asked, done), end="")
    return 0 if state is ProfileState.DONE else 1


def _text(service: JobService, asked: Profile, done: dict[str, Any]) -> str:
    """The summary, then where the traces are."""
    lines = [f"Profile {asked.id} of job {asked.job_id}, attempt {asked.attempt}:", done["text"]]
    if done.get("merged"):
        merged = asked.folder / done["merged"]
        lines.append(f"Merged trace: {merged} (open it in Perfetto or chrome://tracing)")
    kept = done.get("artifacts") or {}
    if kept.get("error"):
        lines.append(f"Not kept on the run: {kept['error']} (the files stay in {asked.folder})")
    elif kept:
        job = service.get(asked.job_id)
        link = None
        if job.experiment_id and kept.get("run_id"):
            link = service.run_link and service.run_link(
                job.spec.tracking.tracking_uri or "", job.experiment_id, kept["run_id"]
            )
        lines.append(f"On the run: {kept['path']}/ of {link or 'run ' + str(kept['run_id'])}")
    return "\n".join(line.rstrip("\n") for line in lines) + "\n"
