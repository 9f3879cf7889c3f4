"""Where jupyter_air keeps its state: the job store, job directories, rank logs."""

from __future__ import annotations

import os
from pathlib import Path


def air_home() -> Path:
    """``$AIR_HOME``, else ``<jupyter data dir>/air`` (e.g. ``~/.local/share/jupyter/air``)."""
    configured = os.environ.get("AIR_HOME")
    if configured:
        home = Path(configured).expanduser()
    else:
        from jupyter_core.paths import jupyter_data_dir

        home = Path(jupyter_data_dir()) / "air"
    home.mkdir(parents=True, exist_ok=True)
    return home
