"""jupyter_air: run and watch GPU training from JupyterLab.

Importing this package is cheap: the server extension, NVML and MLflow are only
imported by the entry points that need them.
"""

from __future__ import annotations

from typing import Any

try:
    from ._version import __version__  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # a source tree that was never built
    __version__ = "0.0.0.dev0"

__all__ = [
    "__version__",
    "distributed",
    "log_metrics",
    "params",
    "rank_zero_only",
    "step",
    "sweep",
]


def __getattr__(name: str) -> Any:
    if name == "distributed":
        from .kernel.decorator import distributed

        return distributed
    if name in ("log_metrics", "rank_zero_only"):
        from . import ranks

        return getattr(ranks, name)
    if name == "step":
        from .perf.hooks import step

        return step
    if name == "sweep":
        from .kernel.sweep_function import sweep

        return sweep
    if name == "params":
        from .sweeps.params import params

        return params
    raise AttributeError(f"module 'jupyter_air' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-air"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import AirExtension

    return [{"module": "jupyter_air.server.app", "app": AirExtension}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_air``: registers ``%%air_distributed``, ``%air_gpu``,
    ``%air_runs``, ``%air_schedule`` and ``%%air_sweep`` (MLflow, NVML, ipywidgets and
    plotly are imported at their first use). The kernel's runs go to the user's one
    default store unless it names another (see ``tracking.targets``)."""
    import contextlib
    import os

    from .paths import UnsafeHome, air_home
    from .tracking.run_tails import ensure_running
    from .tracking.targets import adopt_default_store, bound_requests, default_tracking_uri

    adopt_default_store()
    home = air_home()
    default = default_tracking_uri(home)
    # The user's tail process makes a cell's run and ships its points: started now (if
    # none runs), it has MLflow loaded, and the default store open, by the first cell,
    # which a process started then held 2.6 s. It delivers what a server that was down
    # still owes, too.
    with contextlib.suppress(OSError, UnsafeHome):  # the first cell says why, or starts one
        ensure_running(home, default if os.environ["MLFLOW_TRACKING_URI"] == default else None)
    bound_requests()  # MLflow calls of this kernel (and of the user's code) end in time

    from .kernel.gpu_magic import AirGpuMagics
    from .kernel.magics import AirMagics
    from .kernel.runs_magic import AirRunsMagics
    from .kernel.schedule_magic import AirScheduleMagics
    from .kernel.session_magic import AirSessionMagics
    from .kernel.sweep_magic import AirSweepMagics

    ipython.register_magics(AirMagics)
    ipython.register_magics(AirGpuMagics)
    ipython.register_magics(AirRunsMagics)
    ipython.register_magics(AirScheduleMagics)
    ipython.register_magics(AirSessionMagics)
    ipython.register_magics(AirSweepMagics)
