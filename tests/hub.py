"""A real JupyterHub on this machine: several identities, each with a single-user server.

The Hub runs on loopback ports in a temporary directory, with configurable-http-proxy
from the project's ``node_modules`` (a devDependency that ``make test`` installs),
DummyAuthenticator with one password, and ``SimpleLocalProcessSpawner``: every user's
server is this venv's ``jupyterhub-singleuser`` running as the current OS user, with
jupyter_air enabled (the editable install's config), the fake NVML driver, and an
AIR_HOME of its user. Users may share their own servers (JupyterHub 5 sharing). Who
the users and groups are, and what else the servers' environment holds, is a ``Team``.
A service token with admin scopes lets the
tests start servers and mint user tokens; everything else goes through the users'
own tokens, as it would on a real Hub.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.fake_nvml import Scenario, env_for
from tests.leftovers import end_processes_in
from tests.waits import until

ROOT = Path(__file__).resolve().parents[1]
PROXY = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
SINGLEUSER = Path(sys.executable).with_name("jupyterhub-singleuser")
#: The Hub of the browser tests: alice and bob, bob in group ``ml-team``.
USERS = ("alice", "bob")
GROUPS = {"ml-team": ["bob"]}
START_TIMEOUT = 240  # seconds; a shared test machine starts a lab slowly


@dataclass
class Response:
    status: int
    body: Any


@dataclass
class Hub:
    """A running JupyterHub; ``url`` is the proxy's public address (ends with ``/``)."""

    url: str
    work: Path
    password: str
    service_token: str
    process: subprocess.Popen[bytes]
    log_path: Path
    scenario_path: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def request(
        self, method: str, path: str, token: str, body: Any = None, timeout: float = 30
    ) -> Response:
        """One request to ``url + path`` with ``token``; any status comes back, not raised."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Response(status, parsed)

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """A Hub API call with the tests' service token; a failure raises."""
        response = self.request(method, f"hub/api/{path}", self.service_token, body)
        if response.status >= 400:
            raise AssertionError(f"{method} hub/api/{path}: {response.status} {response.body}")
        return response.body

    def new_token(self, user: str) -> str:
        """A new API token of ``user``, holding that user's own scopes.

        A single-user server caches what the Hub said of a token for a few minutes
        (``HubAuth.cache_max_age``): a token seen before a share was made keeps its answer.
        """
        made = self.admin("POST", f"users/{user}/tokens", {"note": "jupyter_air tests"})
        return str(made["token"])

    def token(self, user: str) -> str:
        """``user``'s API token of these tests (minted once)."""
        if user not in self.tokens:
            self.tokens[user] = self.new_token(user)
        return self.tokens[user]

    def as_user(self, user: str, method: str, path: str, body: Any = None) -> Response:
        """A request made by ``user`` with their own token (``path`` relative to ``url``)."""
        return self.request(method, path, self.token(user), body)

    def home(self, user: str) -> Path:
        return self.work / "home" / user

    def start_server(self, *users: str) -> None:
        """Start the default server of each of ``users`` (all at once) and wait until the
        proxy routes to each."""
        for user in users:
            self.admin("POST", f"users/{user}/server")
        started = time.monotonic()
        for user in users:
            until(
                partial(self._ready, user),
                f"{user}'s server ready",
                max(0.0, started + START_TIMEOUT - time.monotonic()),
                step=0.5,
                seen=self.log_tail,
            )

    def _ready(self, user: str) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"jupyterhub exited:\n{self.log_tail()}")
        return bool(self.admin("GET", f"users/{user}")["servers"].get("", {}).get("ready"))

    def share(self, owner: str, with_user: str) -> Any:
        """``owner`` shares their default server with ``with_user``, using the owner's token
        (a direct share: it holds at once, no code to accept)."""
        response = self.as_user(owner, "POST", f"hub/api/shares/{owner}/", {"user": with_user})
        assert response.status == 200, response
        return response.body

    def write(self, scenario: Scenario) -> None:
        scenario.write(self.scenario_path)

    def log_tail(self, chars: int = 8000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(work: Path) -> Path:
    """JupyterLab user settings shared by the users' servers: no news toast over the page."""
    settings = work / "lab-settings"
    path = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return settings


@dataclass(frozen=True)
class Team:
    """Who the Hub knows, and what every server's environment adds (a team's tracking
    server, say)."""

    users: tuple[str, ...] = USERS
    groups: dict[str, list[str]] = field(default_factory=lambda: dict(GROUPS))
    env: dict[str, str] = field(default_factory=dict)


def hub_config(
    work: Path, port: int, fake_nvml_dir: Path, password: str, service_token: str, team: Team
) -> str:
    """The ``jupyterhub_config.py`` of a test Hub (values embedded with ``repr``)."""
    hub_port, api_port = _free_port(), _free_port()
    scenario = work / "nvml-scenario.txt"
    env = {
        **env_for(fake_nvml_dir, scenario),
        "JUPYTERLAB_SETTINGS_DIR": str(_settings(work)),
        "PYTHONUNBUFFERED": "1",
        # The Hub passes its servers no PYTEST_CURRENT_TEST, by which MLflow would know a
        # test and send no telemetry. On this offline machine its telemetry thread fails
        # and removes a variable from os.environ while a request's proxy lookup iterates
        # it: a KeyError in a cell (stop 51's CI). Users may opt out the same way.
        "MLFLOW_DISABLE_TELEMETRY": "true",
        **team.env,
    }
    per_user = {  # {username} filled in per server
        "AIR_HOME": str(work / "air" / "{username}"),
        "JUPYTER_CONFIG_DIR": str(work / "config" / "{username}"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime" / "{username}"),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces" / "{username}"),
    }
    return f"""\
c = get_config()  # noqa: F821
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(work / "proxy.pid")!r}
c.JupyterHub.db_url = {"sqlite:///" + str(work / "hub.sqlite")!r}
c.JupyterHub.cookie_secret_file = {str(work / "cookie_secret")!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {set(team.users)!r}
c.JupyterHub.load_groups = { ({g: {"users": u} for g, u in team.groups.items()})!r}
c.JupyterHub.load_roles = [
    # Users may share their own servers, naming users and groups (JupyterHub 5 sharing).
    {{"name": "user", "scopes": ["self", "shares!user", "read:users:name", "read:groups:name"]}},
    {{"name": "air-tests", "services": ["air-tests"],
      "scopes": ["admin:users", "admin:servers", "tokens", "admin:groups", "shares"]}},
]
c.JupyterHub.services = [{{"name": "air-tests", "api_token": {service_token!r}}}]
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(work / "home" / "{username}")!r}
c.Spawner.cmd = [{str(SINGLEUSER)!r}]
c.Spawner.args = ["--allow-root"]  # the test machine runs as root; every user is this OS user
c.Spawner.default_url = "/lab"
c.Spawner.ip = "127.0.0.1"
c.Spawner.start_timeout = {START_TIMEOUT}
c.Spawner.http_timeout = {START_TIMEOUT}
_env = {env!r}
_per_user = {per_user!r}
c.Spawner.environment = {{
    **_env,
    **{{k: (lambda s, v=v: v.format(username=s.user.name)) for k, v in _per_user.items()}},
}}
"""


@contextmanager
def running_hub(work: Path, fake_nvml_dir: Path, team: Team | None = None) -> Iterator[Hub]:
    """A JupyterHub of ``team`` (by default alice and bob) in ``work``, no server started;
    stopped with its proxy and servers on the way out."""
    team = team or Team()
    if not PROXY.exists():
        raise RuntimeError(f"{PROXY} is missing: `make test` installs configurable-http-proxy")
    for user in team.users:
        (work / "home" / user).mkdir(parents=True)
        (work / "air" / user).mkdir(parents=True)
    password, service_token = secrets.token_hex(8), secrets.token_hex(16)
    config = work / "jupyterhub_config.py"
    port = _free_port()
    config.write_text(hub_config(work, port, fake_nvml_dir, password, service_token, team))
    scenario_path = Scenario(gpus=[]).write(work / "nvml-scenario.txt")
    log_path = work / "hub.log"
    url = f"http://127.0.0.1:{port}/"
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(config)],
        cwd=work,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so that a hung teardown can end the proxy and servers too
    )
    hub = Hub(url, work, password, service_token, process, log_path, scenario_path)
    try:

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"jupyterhub exited:\n{hub.log_tail()}")
            try:
                return bool(hub.request("GET", "hub/api/", service_token, timeout=5).status == 200)
            except OSError:
                return False

        until(up, "jupyterhub answering", 120, step=0.3, seen=hub.log_tail)
        yield hub
    finally:
        process.send_signal(signal.SIGTERM)  # the Hub stops the servers and the proxy
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        end_processes_in(work)  # what the users' servers started: supervisors, couriers
