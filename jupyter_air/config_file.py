"""jupyter_air's own configuration file, read by the processes that are not Jupyter
applications (a kernel, a supervisor, ``air``, the scheduler, the courier):
``jupyter_air_config.py`` or ``.json`` in any of ``jupyter --paths``' config
directories, as Jupyter's are (``c.AirNotify.smtp_host = ...``,
``c.AirCheckpoints.root = ...``)."""

from __future__ import annotations

import logging
from pathlib import Path

from traitlets.config import Config

log = logging.getLogger(__name__)

CONFIG_NAME = "jupyter_air_config"


def load_config(config_dirs: list[str] | None = None) -> Config:
    """Every file's settings (later, more personal, files win, as Jupyter's own
    applications read theirs). A file that cannot be read is logged and skipped: one
    typo must not stop what reads an unrelated setting."""
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    if config_dirs is None:
        from jupyter_core.paths import jupyter_config_path

        config_dirs = jupyter_config_path()
    config = Config()
    for directory in reversed(config_dirs):  # the first directory wins: merged last
        for loader in (JSONFileConfigLoader, PyFileConfigLoader):
            suffix = ".json" if loader is JSONFileConfigLoader else ".py"
            path = Path(directory) / f"{CONFIG_NAME}{suffix}"
            if not path.is_file():
                continue
            try:
                config.merge(loader(path.name, path=str(path.parent)).load_config())
            except Exception as err:
                log.warning("%s not read: %s", path, err)
    return config
