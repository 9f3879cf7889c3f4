"""The user's notification settings: their default targets and their SMTP server.

Read where a job is submitted (the defaults go into its spec) and where a message is
sent (the SMTP server, so that a password is never stored with a job): a kernel, the
supervisor, ``air``, the scheduler and the courier. None of them is a Jupyter
application, so the configuration is its own file, found as Jupyter's are:
``jupyter_air_config.py`` or ``.json`` in any of ``jupyter --paths``' config
directories (``c.AirNotify.smtp_host = "smtp.example.com"``). The environment gives the
documented defaults (``AIR_SMTP_HOST``, ...).
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path
from typing import Any

from traitlets import Enum, Float, Int, List, Unicode, default
from traitlets.config import Configurable

from ..config_file import load_config


class AirNotify(Configurable):
    """Notifications: default targets, the SMTP server, the links messages carry."""

    defaults: List[dict[str, Any]] = List(
        help="Targets of every job that runs unwatched (air run, a schedule's task, a "
        "--background call) and names none; a job's own 'notify' replaces them ('notify: "
        "[]' turns them off), and a call the notebook waits for uses only its own. Each "
        "as in a workload file: {'jupyterlab': True, 'on': ['failure']}, "
        "{'email': 'me@example.com'}, "
        "{'webhook': 'https://...', 'on': ['failure', 'duration:2h']}.",
    ).tag(config=True)

    @default("defaults")
    def _default_targets(self) -> list[dict[str, Any]]:
        return [{"jupyterlab": True, "on": ["failure"]}]

    smtp_host = Unicode(
        help="SMTP server that sends notification mails (default $AIR_SMTP_HOST; none: "
        "an email target is refused at submission)."
    ).tag(config=True)
    smtp_port = Int(
        0,
        help="SMTP port (default $AIR_SMTP_PORT, else 465 with tls, 587 with starttls, 25).",
    ).tag(config=True)
    smtp_tls = Enum(
        ["starttls", "tls", "none"],
        help="starttls: upgrade the connection (port 587); tls: TLS from the start (465); "
        "none: plain, for a relay on this machine (default $AIR_SMTP_TLS, else starttls).",
    ).tag(config=True)
    smtp_from = Unicode(help="The mails' sender (default $AIR_SMTP_FROM, else USER@HOST).").tag(
        config=True
    )
    smtp_user = Unicode(
        help="User to log in to the SMTP server as (default $AIR_SMTP_USER; none: no login)."
    ).tag(config=True)
    smtp_password_file = Unicode(
        help="File holding the SMTP password (default $AIR_SMTP_PASSWORD_FILE; else "
        "$AIR_SMTP_PASSWORD). Read when a mail is sent, never stored with a job.",
    ).tag(config=True)
    timeout = Float(
        10.0,
        min=1.0,
        max=30.0,
        help="Seconds one step of a delivery (connecting, each SMTP command, a webhook's "
        "answer) may take; at most 30, so that a try ends well within its 2-minute lease.",
    ).tag(config=True)
    max_tries = Int(
        8,
        min=1,
        help="Tries of a delivery before it is given up as failed (with backoff from 5 s to "
        "10 min: about 30 min in all).",
    ).tag(config=True)
    lab_url = Unicode(
        help="JupyterLab's address as the user's browser reaches it, for the links of mails "
        "and webhooks (behind JupyterHub: https://hub.example.com/user/NAME/). Default "
        "$AIR_LAB_URL, else $JUPYTERHUB_PUBLIC_URL (JupyterHub's address of the user's "
        "server, when the Hub's public_url is set), else the Jupyter server running here.",
    ).tag(config=True)

    @default("smtp_host")
    def _host(self) -> str:
        return os.environ.get("AIR_SMTP_HOST", "")

    @default("smtp_tls")
    def _tls(self) -> str:
        value = os.environ.get("AIR_SMTP_TLS", "starttls").lower()
        return value if value in ("starttls", "tls", "none") else "starttls"

    @default("smtp_from")
    def _from(self) -> str:
        return os.environ.get("AIR_SMTP_FROM") or f"{getpass.getuser()}@{socket.getfqdn()}"

    @default("smtp_user")
    def _user(self) -> str:
        return os.environ.get("AIR_SMTP_USER", "")

    @default("smtp_password_file")
    def _password_file(self) -> str:
        return os.environ.get("AIR_SMTP_PASSWORD_FILE", "")

    @default("lab_url")
    def _lab_url(self) -> str:
        """``$AIR_LAB_URL``, else the public address JupyterHub gives the user's server
        (``$JUPYTERHUB_PUBLIC_URL``, when the Hub knows it)."""
        public = os.environ.get("JUPYTERHUB_PUBLIC_URL", "")
        return os.environ.get("AIR_LAB_URL") or (
            public if public.startswith(("http://", "https://")) else ""
        )

    @property
    def port(self) -> int:
        if self.smtp_port:
            return int(self.smtp_port)
        env = os.environ.get("AIR_SMTP_PORT", "")
        if env.isdigit():
            return int(env)
        return {"tls": 465, "starttls": 587}.get(self.smtp_tls, 25)

    def password(self) -> str | None:
        """The SMTP password, read now (a file's first line, or the environment)."""
        if self.smtp_password_file:
            return Path(self.smtp_password_file).expanduser().read_text().splitlines()[0]
        return os.environ.get("AIR_SMTP_PASSWORD") or None


def load(config_dirs: list[str] | None = None) -> AirNotify:
    """The settings from jupyter_air's configuration file (``config_file``)."""
    return AirNotify(config=load_config(config_dirs))
