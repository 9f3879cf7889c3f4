"""What a rank needs of ``jobs.rank_pdb`` before its user's code runs: its name for
``PYTHONBREAKPOINT``, and ``pdb.set_trace()`` made the same as ``breakpoint()``.

Nothing here imports the debugger's channel: a rank that never stops never loads it.
"""

from __future__ import annotations

import os
import pdb
import sys

#: ``breakpoint()`` in every rank (``env.rank_env``), unless the user chose another.
HOOK = "jupyter_air.jobs.rank_pdb.breakpoint_hook"


def install() -> None:
    """``pdb.set_trace()`` as ``breakpoint()``, where the rank's breakpoint is ours."""
    if os.environ.get("PYTHONBREAKPOINT") == HOOK:
        pdb.set_trace = set_trace


def set_trace(*, header: str | None = None) -> None:
    """``pdb.set_trace()`` in a rank: the breakpoint hook, stopping in the caller's frame."""
    sys.breakpointhook(header=header, frame=sys._getframe(1))
