"""Job grants mirrored onto MLflow experiment permissions.

Real servers, started once for the module: ``mlflow server --app-name basic-auth`` with
its own auth database, where the default permission is NO_PERMISSIONS so that only a
grant lets bob read alice's experiment, and a plain ``mlflow server``. Who calls is
chosen the way MLflow's clients read it: MLFLOW_TRACKING_USERNAME / _PASSWORD.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import psutil
import pytest

from jupyter_air.tracking.permissions import MirrorReport, PermissionChange, mirror_grants
from tests.waits import answers, log_tail, until

PASSWORDS = {name: f"{name}-{secrets.token_urlsafe(12)}" for name in ("admin", "alice", "bob")}


@dataclass
class Server:
    uri: str
    process: subprocess.Popen[bytes]
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    root: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None
) -> Server:
    """``mlflow server`` with its store in ``root`` (on ``port``: the same server again)."""
    port = port or free_port()
    log = root / "server.log"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)),
            *("--workers", "1", "--backend-store-uri", f"sqlite:///{root}/mlflow.db"),
            *("--default-artifact-root", str(root / "artifacts"), *args),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner: fewer processes
        | (env or {}),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Server(f"http://127.0.0.1:{port}", process, log)


def auth_app(root: Path, admin_password: str, default_permission: str) -> dict[str, str]:
    """The environment of a server that runs MLflow's auth app, its users' store in
    ``root``. Credentials checked are cached for a minute, as docs/api.md advises a team
    (each check is a scrypt hash: about 90 ms of the server's CPU a request)."""
    config = root / "basic_auth.ini"
    config.write_text(
        "[mlflow]\n"
        f"default_permission = {default_permission}\n"
        f"database_uri = sqlite:///{root}/auth.db\n"
        "admin_username = admin\n"
        f"admin_password = {admin_password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        "auth_cache_ttl_seconds = 60\n"
    )
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
    }


def wait_ready(server: Server) -> None:
    def health() -> None:
        with urllib.request.urlopen(f"{server.uri}/health", timeout=2):
            pass

    until(
        answers(health, server.process, server.log),
        f"{server.uri} answering",
        180,
        step=0.5,
        seen=lambda: log_tail(server.log),
    )


def stop_server(server: Server) -> None:
    """End the server's whole process group and check that nothing of it is left."""
    try:
        parent = psutil.Process(server.process.pid)
        group = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        group = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.killpg(server.process.pid, sig)
        _, alive = psutil.wait_procs(group, timeout=30)
        if not alive:
            break
    server.process.wait(timeout=30)
    assert not alive, f"server processes left: {alive}"


@contextmanager
def as_user(name: str, password: str | None = None, token: str | None = None) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        if token:
            mp.setenv("MLFLOW_TRACKING_TOKEN", token)
        else:
            mp.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
        mp.setenv("MLFLOW_TRACKING_USERNAME", name)
        mp.setenv("MLFLOW_TRACKING_PASSWORD", password or PASSWORDS[name])
        yield


@dataclass
class Servers:
    auth: str
    plain: str


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Both servers, started side by side; alice and bob are MLflow users of the auth one."""
    auth_root = tmp_path_factory.mktemp("mlflow-auth")
    auth = start_server(
        auth_root,
        "--app-name",
        "basic-auth",
        env=auth_app(auth_root, PASSWORDS["admin"], "NO_PERMISSIONS"),
    )
    plain = start_server(tmp_path_factory.mktemp("mlflow-plain"))
    with ExitStack() as stop:
        stop.callback(stop_server, plain)
        stop.callback(stop_server, auth)
        wait_ready(auth)
        wait_ready(plain)
        from mlflow.server.auth.client import AuthServiceClient

        with as_user("admin"):
            for name in ("alice", "bob"):
                AuthServiceClient(auth.uri).create_user(name, PASSWORDS[name])
        yield Servers(auth.uri, plain.uri)


@pytest.fixture
def experiment(servers: Servers, request: pytest.FixtureRequest) -> str:
    """A new experiment of alice's (its creator holds MANAGE on it)."""
    import mlflow

    with as_user("alice"):
        return str(mlflow.MlflowClient(servers.auth).create_experiment(request.node.name))


def permission_of(servers: Servers, username: str, experiment_id: str) -> str:
    """What MLflow resolves for the user, as the admin sees it."""
    from mlflow.server.auth.client import AuthServiceClient

    with as_user("admin"):
        client = AuthServiceClient(servers.auth)
        return str(client.get_user_permission(username, "experiment", experiment_id).permission)


def can_read(servers: Servers, username: str, experiment_id: str) -> bool:
    import mlflow
    from mlflow.exceptions import MlflowException

    with as_user(username):
        try:
            mlflow.MlflowClient(servers.auth).get_experiment(experiment_id)
        except MlflowException as e:
            if e.error_code != "PERMISSION_DENIED":
                raise
            return False
    return True


def mirror_as_alice(
    servers: Servers, experiment_id: str, *grants: PermissionChange
) -> MirrorReport:
    with as_user("alice"):
        return mirror_grants(servers.auth, experiment_id, grants)


@pytest.mark.heavy
def test_a_grant_lets_the_grantee_read_the_experiment(servers: Servers, experiment: str) -> None:
    assert not can_read(servers, "bob", experiment)

    report = mirror_as_alice(servers, experiment, PermissionChange("bob", "CAN_VIEW"))

    assert report.status == "app"
    assert [(o.grantee, o.action, o.permission) for o in report.outcomes] == [
        ("bob", "set", "READ")
    ]
    assert report.lines() == [f"MLflow experiment {experiment}: bob has READ"]
    assert permission_of(servers, "bob", experiment) == "READ"
    assert can_read(servers, "bob", experiment)


@pytest.mark.heavy
def test_a_level_change_updates_and_a_revoke_deletes(servers: Servers, experiment: str) -> None:
    mirror_as_alice(servers, experiment, PermissionChange("bob", "CAN_VIEW"))

    report = mirror_as_alice(servers, experiment, PermissionChange("bob", "CAN_MANAGE_RUN"))
    assert [(o.action, o.permission) for o in report.outcomes] == [("updated", "EDIT")]
    assert permission_of(servers, "bob", experiment) == "EDIT"

    mirror_as_alice(servers, experiment, PermissionChange("bob", "CAN_MANAGE"))
    assert permission_of(servers, "bob", experiment) == "MANAGE"

    report = mirror_as_alice(servers, experiment, PermissionChange("bob", None))
    assert [o.action for o in report.outcomes] == ["removed"]
    assert permission_of(servers, "bob", experiment) == "NO_PERMISSIONS"
    assert not can_read(servers, "bob", experiment)

    again = mirror_as_alice(servers, experiment, PermissionChange("bob", None))
    assert [(o.action, o.error) for o in again.outcomes] == [("absent", None)]


@pytest.mark.heavy
def test_at_least_sets_a_missing_permission_and_never_changes_one(
    servers: Servers, experiment: str
) -> None:
    """What a late mirror does, not knowing the experiment's other jobs' grants (and
    MLflow shows what a user holds to its admin only)."""
    with as_user("alice"):
        report = mirror_grants(
            servers.auth, experiment, [PermissionChange("bob", "CAN_MANAGE_RUN")], at_least=True
        )
        assert [(o.action, o.permission) for o in report.outcomes] == [("set", "EDIT")]
        lower = mirror_grants(
            servers.auth, experiment, [PermissionChange("bob", "CAN_VIEW")], at_least=True
        )
    assert [(o.action, o.error) for o in lower.outcomes] == [("kept", None)]
    assert lower.lines() == [f"MLflow experiment {experiment}: bob keeps the permission they had"]
    assert permission_of(servers, "bob", experiment) == "EDIT"


@pytest.mark.heavy
def test_the_granting_user_keeps_their_own_permission(servers: Servers, experiment: str) -> None:
    """A grant naming the MLflow user who makes it would replace their MANAGE: left alone."""
    report = mirror_as_alice(
        servers, experiment, PermissionChange("alice", "CAN_VIEW"), PermissionChange("alice", None)
    )

    assert [o.action for o in report.outcomes] == ["own", "own"]
    assert report.status == "unasked"
    assert permission_of(servers, "alice", experiment) == "MANAGE"


@pytest.mark.heavy
def test_an_unknown_grantee_is_reported_and_not_created(servers: Servers, experiment: str) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient

    report = mirror_as_alice(
        servers,
        experiment,
        PermissionChange("nobody", "CAN_VIEW"),
        PermissionChange("bob", "CAN_VIEW"),
    )

    nobody, bob = report.outcomes
    assert nobody.action == "failed"
    assert nobody.error is not None
    assert "no user nobody" in nobody.error
    assert (bob.action, bob.permission) == ("set", "READ"), "one failure does not stop the rest"
    assert report.failures == (nobody,)
    with as_user("admin"), pytest.raises(MlflowException, match="not found"):
        AuthServiceClient(servers.auth).get_user("nobody")


@pytest.mark.heavy
def test_group_grants_are_reported_as_not_mirrored(servers: Servers, experiment: str) -> None:
    report = mirror_as_alice(
        servers,
        experiment,
        PermissionChange("ml-team", "CAN_VIEW", group=True),
        PermissionChange("bob", "CAN_VIEW"),
    )

    assert [(o.grantee, o.group, o.action) for o in report.outcomes] == [
        ("bob", False, "set"),
        ("ml-team", True, "not-mirrored"),
    ]
    assert "group grants are not mirrored" in report.lines()[1]
    only_groups = mirror_grants(
        servers.auth, experiment, [PermissionChange("ml-team", None, group=True)]
    )
    assert only_groups.status == "unasked"


@pytest.mark.heavy
def test_a_reader_cannot_change_who_has_the_experiment(servers: Servers, experiment: str) -> None:
    """READ does not let bob use grants to take alice's MANAGE away or to raise his own."""
    mirror_as_alice(servers, experiment, PermissionChange("bob", "CAN_VIEW"))

    with as_user("bob"):
        report = mirror_grants(servers.auth, experiment, [PermissionChange("alice", None)])
        raised = mirror_grants(servers.auth, experiment, [PermissionChange("bob", "CAN_MANAGE")])

    assert report.status == "failed"
    assert report.outcomes[0].error == f"MANAGE on experiment {experiment} is needed to share it"
    assert raised.outcomes[0].action == "own"
    assert permission_of(servers, "alice", experiment) == "MANAGE"
    assert permission_of(servers, "bob", experiment) == "READ"


@pytest.mark.heavy
def test_refused_credentials_are_reported_without_them(servers: Servers, experiment: str) -> None:
    wrong = "Wrong-" + secrets.token_urlsafe(8)
    with as_user("alice", wrong):
        report = mirror_grants(servers.auth, experiment, [PermissionChange("bob", "CAN_VIEW")])

    assert report.status == "failed"
    assert "refused the credentials" in str(report.outcomes[0].error)
    assert wrong not in json.dumps(report.to_json())
    assert permission_of(servers, "bob", experiment) == "NO_PERMISSIONS"


@pytest.mark.heavy
def test_a_server_without_the_app_is_named_once(servers: Servers) -> None:
    with as_user("alice"):
        first = mirror_grants(servers.plain, "0", [PermissionChange("bob", "CAN_VIEW")])
        second = mirror_grants(servers.plain, "0", [PermissionChange("carol", "CAN_MANAGE")])

    assert (first.status, second.status) == ("no-app", "no-app")
    assert first.lines() == [
        f"MLflow at {servers.plain} runs without its permission app (mlflow server "
        "--app-name basic-auth): grants give access to jobs only, not to their experiments"
    ]
    assert second.notice is None
    assert second.lines() == []


@pytest.mark.heavy
def test_a_server_that_is_down_is_reported_without_credentials(servers: Servers) -> None:
    port = free_port()
    uri = f"http://alice:{PASSWORDS['alice']}@127.0.0.1:{port}"
    with as_user("alice"):
        report = mirror_grants(
            uri, "1", [PermissionChange("bob", "CAN_VIEW"), PermissionChange("carol", None)]
        )

    assert report.status == "failed"
    assert [o.action for o in report.outcomes] == ["failed", "failed"]
    assert "cannot reach the tracking server ([Errno 111] Connection refused)" in str(
        report.outcomes[0].error
    )
    assert PASSWORDS["alice"] not in json.dumps(report.to_json())
    assert PASSWORDS["alice"] not in "\n".join(report.lines())


def test_a_server_that_never_answers_costs_one_timeout() -> None:
    """Connected but silent: the first request times out and the rest are not tried."""
    with socket.socket() as silent, as_user("alice"):
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        report = mirror_grants(
            uri,
            "1",
            [PermissionChange("bob", "CAN_VIEW"), PermissionChange("eve", "CAN_VIEW")],
            timeout=0.5,
        )

    assert report.status == "failed"
    assert [o.error for o in report.outcomes] == [
        "the tracking server did not answer within 0.5 s"
    ] * 2


@pytest.mark.heavy
def test_a_spent_budget_tries_nothing(servers: Servers, experiment: str) -> None:
    with as_user("alice"):
        report = mirror_grants(
            servers.auth, experiment, [PermissionChange("bob", "CAN_VIEW")], budget=0
        )

    assert report.outcomes[0].error == "MLflow took too long: the remaining grants were not tried"
    assert permission_of(servers, "bob", experiment) == "NO_PERMISSIONS"


Answer = tuple[int, str, bytes]


@contextmanager
def fake_server(answer: Callable[[str], Answer]) -> Iterator[str]:
    """An HTTP server answering each request with ``answer(path)``: (status, type, body)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, content_type, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    with HTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()


def test_an_app_older_than_the_grant_api_is_not_taken_for_no_app() -> None:
    """An app from before the per-user grant API: 404 there, but its users API answers."""

    def old_app(path: str) -> Answer:
        if path.startswith("/api/2.0/mlflow/users/get"):
            return 401, "text/plain", b"You are not authenticated."
        return 404, "text/html", b"<h1>Not Found</h1>"

    with fake_server(old_app) as uri:
        report = mirror_grants(uri, "1", [PermissionChange("bob", "CAN_VIEW")])

    assert (report.status, report.notice) == ("failed", None)
    assert report.outcomes[0].error == (
        "the server's permission app predates MLflow's per-user permission API"
    )


def test_credentials_echoed_by_the_server_are_masked() -> None:
    password, token = PASSWORDS["alice"], secrets.token_urlsafe(16)
    echo = f"bad request from alice:{password} with token {token}; see the log"

    def echoing_app(path: str) -> Answer:
        body = json.dumps({"error_code": "INVALID_PARAMETER_VALUE", "message": echo})
        return 400, "application/json", body.encode()

    with fake_server(echoing_app) as uri, as_user("alice", token=token):
        report = mirror_grants(uri, "1", [PermissionChange("bob", "CAN_VIEW")])

    assert report.status == "app"
    (failed,) = report.failures
    assert (
        failed.error
        == "INVALID_PARAMETER_VALUE: bad request from alice:*** with token ***; see the log"
    )


def test_an_unusable_mlflow_setting_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_INSECURE_TLS", "maybe")

    report = mirror_grants("http://127.0.0.1:9", "1", [PermissionChange("bob", "CAN_VIEW")])

    assert report.status == "failed"
    assert "ValueError: MLFLOW_TRACKING_INSECURE_TLS value must be" in str(report.outcomes[0].error)


@pytest.mark.parametrize("uri", ["sqlite:////tmp/x/mlflow.db", "file:///tmp/x/mlruns", "mlruns"])
def test_local_stores_have_nothing_to_mirror(uri: str) -> None:
    report = mirror_grants(uri, "1", [PermissionChange("bob", "CAN_VIEW")])

    assert (report.status, report.outcomes, report.lines()) == ("local", (), [])


def test_an_unknown_level_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="CAN_EDIT"):
        mirror_grants("sqlite:///x.db", "1", [("bob", "CAN_EDIT")])
