"""The jupyter_air server extension application."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp

from ..gpu.sampler import GpuSampler
from .gpu_handlers import GpuHandler, GpuSampleHandler


class AirExtension(ExtensionApp):
    """Serves the GPU resources API and owns the server's one GPU sampler."""

    name = "jupyter_air"
    load_other_extensions = True
    classes = [GpuSampler]  # noqa: RUF012 (traitlets reads a plain class attribute)

    sampler: GpuSampler

    def initialize_settings(self) -> None:
        self.sampler = GpuSampler(parent=self, log=self.log)

    def initialize_handlers(self) -> None:
        kwargs = {"sampler": self.sampler}
        self.handlers.extend(
            [
                (r"/jupyter-air/gpu", GpuHandler, kwargs),
                (r"/jupyter-air/gpu/sample", GpuSampleHandler, kwargs),
            ]
        )

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self.sampler.start()

    async def stop_extension(self) -> None:
        self.sampler.stop()
