"""A backend defined outside jupyter_air, as a third party would write one: this module
and the entry point of its distribution (``air_sandbox_backend-1.0.dist-info``) are all
it takes. It runs a job's ranks on this machine, as the local backend does, with one
setting of its own, ``label``, which every rank sees as ``AIR_SANDBOX_LABEL``."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jupyter_air.jobs.backends.base import AttemptContext, BackendRefused, Nodes, Placement
from jupyter_air.jobs.backends.local import LocalBackend


class SandboxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    label: str = Field("plain", pattern=r"^[a-z]+$", description="a word every rank sees")


class SandboxBackend(LocalBackend):
    name = "sandbox"
    summary = "ranks on this machine, labelled (a backend of the tests)"
    settings_model = SandboxSettings

    def prepare(self, placement: Placement) -> dict[str, Any]:
        settings = {"label": "plain", **placement.settings}
        if settings["label"] == "refused":
            raise BackendRefused("backend.label", "this sandbox refuses 'refused'")
        return {**super().prepare(placement), **settings}

    def start(self, attempt: AttemptContext) -> Nodes:
        label = str(attempt.spec.backend.settings["label"])
        env = {**attempt.env, "AIR_SANDBOX_LABEL": label}
        return super().start(dataclasses.replace(attempt, env=env))
