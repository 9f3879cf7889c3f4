"""Where jobs keep their checkpoints when the call names no place: the user's
``c.AirCheckpoints.root`` (``jupyter_air_config.py``, see ``config_file``), else
``$AIR_CHECKPOINT_ROOT``, else each job's own directory. Read where a job is
submitted, never in a rank (traitlets is no import of theirs)."""

from __future__ import annotations

import os

from traitlets import Unicode, default
from traitlets.config import Configurable

from ..config_file import load_config
from .checkpoints import CHECKPOINT_ROOT_ENV


class AirCheckpoints(Configurable):
    """The checkpoint places of jobs (docs/long-runs.md)."""

    root = Unicode(
        help="A folder for every job's checkpoints, one folder per job in it "
        "(<root>/<job id>), on a shared or larger filesystem than AIR_HOME's; made "
        "private to you, refused if others can write into it. Default "
        "$AIR_CHECKPOINT_ROOT; empty: under each job's directory, removed with its logs "
        "after the retention period. A call's --checkpoint-dir wins.",
    ).tag(config=True)

    @default("root")
    def _root(self) -> str:
        return os.environ.get(CHECKPOINT_ROOT_ENV, "")


def checkpoint_root(config_dirs: list[str] | None = None) -> str:
    """The configured root, ``~`` expanded; "" for none."""
    root = AirCheckpoints(config=load_config(config_dirs)).root
    return os.path.expanduser(root) if root else ""
