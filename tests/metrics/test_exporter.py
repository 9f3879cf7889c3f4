"""``air exporter``: what it refuses to start with, and what its HTTP server refuses
(tests/metrics/test_prometheus.py scrapes a real one)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.cli import main
from jupyter_air.cli.exporter import _guarded


def scraped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"DCGM_FI_DEV_GPU_UTIL 1\n"]


def request(token_file: Path, path: str = "/metrics", **headers: str) -> tuple[str, bytes]:
    answered: list[str] = []
    environ = {"PATH_INFO": path, **{f"HTTP_{k.upper()}": v for k, v in headers.items()}}
    body = b"".join(_guarded(scraped, str(token_file))(environ, lambda s, h: answered.append(s)))
    return answered[0], body


def test_only_the_metrics_path_with_the_token_is_answered(token_file: Path) -> None:
    token = token_file.read_text().strip()
    assert request(token_file, authorization=f"Bearer {token}")[0] == "200 OK"
    assert request(token_file)[0] == "403 Forbidden"
    assert request(token_file, authorization=f"Bearer {token}x")[0] == "403 Forbidden"
    assert request(token_file, authorization=f"token {token}")[0] == "403 Forbidden"
    status, body = request(token_file, "/", authorization=f"Bearer {token}")
    assert status == "404 Not Found"
    assert b"DCGM" not in body
    token_file.chmod(0o644)
    status, body = request(token_file, authorization=f"Bearer {token}")
    assert status == "503 Service Unavailable"
    assert b"DCGM" not in body


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "air exporter needs --token-file (or $AIR_METRICS_TOKEN_FILE)"),
        (["--token-file", "{missing}"], "No such file or directory"),
        (["--token-file", "{open}"], "is open to others (mode 644): run `chmod 600"),
        (["--token-file", "{token}", "--listen", "9410"], "--listen must be HOST:PORT"),
        (["--token-file", "{token}", "--interval", "0"], "interval must be > 0 seconds"),
        (["--token-file", "{token}", "--idle-threshold", "120"], "must be a percent, got 120"),
    ],
)
def test_air_exporter_refuses_to_start_in_one_line(
    argv: list[str],
    message: str,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("AIR_METRICS_TOKEN_FILE", raising=False)
    open_file = tmp_path / "open-token"
    open_file.write_text("o" * 40)
    open_file.chmod(0o644)
    paths = {"missing": tmp_path / "absent", "open": open_file, "token": token_file}
    argv = [arg.format(**paths) for arg in argv]
    assert main(["exporter", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("air: ")
    assert err.count("\n") == 1
