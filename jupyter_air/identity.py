"""Who someone is: the one module that says it, for the store, the server, the CLI and
the kernel.

An identity is a user name and the groups it belongs to: JupyterHub's on a Hub (the
server's handlers build it from the Hub's user), the OS's for the CLI and a server
without a Hub.
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    name: str
    groups: frozenset[str] = frozenset()


def os_user() -> str:
    """The OS user running this process ("unknown" if the OS cannot name it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def os_identity() -> Identity:
    """The OS user running this process and the OS groups it belongs to (the CLI's caller,
    and every caller of a Jupyter server without a Hub)."""
    name = os_user()
    try:
        gids = os.getgrouplist(name, pwd.getpwnam(name).pw_gid)
    except (KeyError, OSError):
        gids = os.getgroups()
    groups = set()
    for gid in gids:
        try:
            groups.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return Identity(name, frozenset(groups))


def server_owner() -> str:
    """Who owns the Jupyter server this process belongs to (its kernels' jobs, its MLflow
    UI): on a Hub, the user whose server it is (whoever typed into it), else the OS user."""
    return os.environ.get("JUPYTERHUB_USER") or os_user()


def mlflow_user() -> str:
    """The user MLflow names on runs and in default experiment names: the Jupyter user
    where a Hub tells it, else the OS user."""
    for variable in ("JUPYTERHUB_USER", "JUPYTER_USER"):
        if os.environ.get(variable):
            return os.environ[variable]
    return os_user()
