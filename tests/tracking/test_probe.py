"""Whether a tracking server answers, asked in seconds before anything is submitted
(issue 23)."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from jupyter_air.tracking import probe


class Answers(http.server.BaseHTTPRequestHandler):
    """``/health`` answered with the status the server was made with."""

    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (Answers,), {"status": request.param})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://user:secret@127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.parametrize("server", [200, 401, 404], indirect=True)
def test_any_answer_but_a_5xx_is_a_server_that_answers(server: str) -> None:
    probe.check(server)  # an auth app's 401 or a proxy's 404: MLflow says the rest


@pytest.mark.parametrize("server", [503], indirect=True)
def test_a_5xx_is_a_server_that_does_not_answer_named_without_credentials(server: str) -> None:
    with pytest.raises(probe.Unreachable) as err:
        probe.check(server)
    port = server.rsplit(":", 1)[1]
    assert str(err.value) == (
        f"tracking: http://***@127.0.0.1:{port} does not answer (HTTP 503 Service Unavailable)"
    )


def test_a_closed_port_is_said_with_what_the_caller_can_do() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    uri = f"http://127.0.0.1:{port}"
    with pytest.raises(probe.Unreachable) as err:
        probe.check(uri)
    assert err.value.refusal() == (
        f"tracking: {uri} does not answer (connection refused); nothing was started: start "
        "the server, or set MLFLOW_TRACKING_URI to one that answers, or run with --tracking "
        "deferred"
    )
    with pytest.raises(probe.Unreachable) as session:
        probe.check(uri, deferrable=False)  # a warm session has no deferred mode
    assert not session.value.refusal().endswith("--tracking deferred")


def test_a_store_that_is_a_file_or_a_database_is_not_asked() -> None:
    probe.check("sqlite:////nowhere/mlflow.db")
    probe.check("postgresql://db.team/mlflow")
    probe.check("file:///nowhere/mlruns")
