"""A Ray job's own settings: ``backend: {name: ray, address: ...}`` in a workload or
schedule file, ``--backend-opt address=...`` on the magics and ``air run``, and the
older ``ray_address`` / ``--ray-address``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..base import Alias


class RaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    address: str | None = Field(
        None,
        min_length=1,
        description=(
            "the Ray cluster: `host:port`, `ray://host:port` or `auto` (default: "
            "`c.AirMagics.ray_address` in a kernel, then `$RAY_ADDRESS`, then `auto`)"
        ),
    )


ALIASES = (
    Alias(
        "ray_address",
        "--ray-address",
        "Ray cluster for --backend ray (default: c.AirMagics.ray_address, $RAY_ADDRESS).",
        setting="address",
    ),
)
