"""Who runs the kernel, and for which notebook."""

from __future__ import annotations

import os


def notebook_path() -> str | None:
    """The notebook of this kernel, as Jupyter's session knows it (``JPY_SESSION_NAME``)."""
    return os.environ.get("JPY_SESSION_NAME") or None


def cell_id() -> str | None:
    """The id of the notebook cell running now, as JupyterLab and Notebook 7 send it with
    each execute request (``metadata.cellId``); it ties a run to its cell in the runs panel."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return None
    parent = kernel.get_parent("shell") if hasattr(kernel, "get_parent") else {}
    value = (parent or {}).get("metadata", {}).get("cellId")
    return value if isinstance(value, str) and 0 < len(value) <= 100 else None
