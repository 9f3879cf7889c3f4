"""Jobs for tests: a spec from the flat fields a test speaks of, built by the package's
one builder (``jupyter_air.jobs.spec.job_spec``) and then given its tracking, as the
jobs service's ``submit`` does."""

from __future__ import annotations

from typing import Any

from jupyter_air.jobs.spec import JobKind, JobSpec
from jupyter_air.jobs.spec import job_spec as build

TRACKING = (
    "tracking_uri",
    "experiment_id",
    "experiment_name",
    "artifact_location",
    "parent_run_id",
    "first_run_id",
)


def job_spec(kind: str = "command", **fields: Any) -> JobSpec:
    """``job_spec("command", command=["true"], nproc_per_node=2, tracking_uri=...)``;
    ``ray_address`` is the ray backend's setting."""
    tracking = {name: fields.pop(name) for name in TRACKING if name in fields}
    if "ray_address" in fields:
        address = fields.pop("ray_address")
        fields["backend_settings"] = {"address": address} if address else {}
    spec = build(JobKind(kind), **fields)
    return spec.with_tracking(**tracking) if tracking else spec
