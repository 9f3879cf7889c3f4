"""Who runs the kernel, and for which notebook."""

from __future__ import annotations

import getpass
import os


def notebook_path() -> str | None:
    """The notebook of this kernel, as Jupyter's session knows it (``JPY_SESSION_NAME``)."""
    return os.environ.get("JPY_SESSION_NAME") or None


def user_name() -> str:
    """The Jupyter identity where a hub tells it, else the OS user."""
    for variable in ("JUPYTERHUB_USER", "JUPYTER_USER"):
        if os.environ.get(variable):
            return os.environ[variable]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
