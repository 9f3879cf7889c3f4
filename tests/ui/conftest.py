"""Browser tests: a real ``jupyter lab`` on the fake NVML driver, driven by Debian's chromium.

These tests keep away from pytest-jupyter's event-loop fixtures (its autouse loop and
Playwright's sync API clash at teardown), so both are overridden here.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import Scenario, count_calls, env_for
from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.leftovers import end_processes_in
from tests.waits import answers, log_tail, until

CHROMIUM = Path(os.environ.get("AIR_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/ui drives a browser: marked ``browser``, so that
    ``-m "not browser"`` leaves them out (a conftest's ``pytestmark`` marks nothing)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.browser)


@dataclass
class Lab:
    """A running ``jupyter lab`` with jupyter_air on the fake driver."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    scenario_path: Path
    call_log: Path
    log_path: Path

    def write(self, scenario: Scenario) -> None:
        scenario.write(self.scenario_path)

    def server_calls(self, name: str) -> int:
        """NVML calls of ``name`` made by the Jupyter server process."""
        return count_calls(self.call_log, name, pid=self.process.pid)

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_settings(settings_dir: Path, settings: dict[str, dict[str, Any]]) -> None:
    quiet = {
        # The news toast would cover the page.
        "@jupyterlab/apputils-extension:notification": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for plugin, values in {**quiet, **settings}.items():
        package, name = plugin.rsplit(":", 1)
        path = settings_dir / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def air_home(module_home: Path) -> Path:
    """The ``AIR_HOME`` of the module's lab and jobs, its store migrated (tests/homes.py)."""
    return module_home


@pytest.fixture(scope="module")
def start_lab(
    fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Lab]]:
    """Start labs on demand; every lab started is stopped when the module ends, and
    what it left (a job's supervisor, the tail process, a courier) is ended with it."""
    labs: list[Lab] = []
    folders: list[Path] = []  # each lab's own, and those of the tests its env names

    def start(
        scenario: Scenario,
        settings: dict[str, dict[str, Any]] | None = None,
        server_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        app: str = "jupyterlab",
    ) -> Lab:
        """``app``: the server to start, ``jupyterlab`` or ``notebook`` (Notebook 7)."""
        work = tmp_path_factory.mktemp("lab")
        basetemp = tmp_path_factory.getbasetemp()
        named = (Path(value) for value in (env or {}).values())  # an AIR_HOME, a HOME
        folders.extend([work, *(path for path in named if basetemp in path.parents)])
        root = work / "root"
        root.mkdir()
        scenario_path = scenario.write(work / "nvml-scenario.txt")
        call_log = work / "nvml-calls.log"
        _write_settings(work / "settings", settings or {})
        port, token = _free_port(), secrets.token_hex(16)
        lab_env = {
            **os.environ,
            **env_for(fake_nvml_dir, scenario_path, call_log=call_log),
            "JUPYTER_CONFIG_DIR": str(work / "config"),
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
            **(env or {}),
        }
        log_path = work / "lab.log"
        process = subprocess.Popen(
            [
                sys.executable, "-m", app, "--no-browser", "--allow-root",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}", *(server_args or []),
            ],
            env=lab_env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        lab = Lab(f"http://127.0.0.1:{port}/", token, process, scenario_path, call_log, log_path)
        labs.append(lab)
        ready = answers(lambda: lab.api("api/status"), process, log_path)
        # About 5 s on a quiet machine; over a minute beside two busy loops (seen twice).
        until(ready, "jupyter lab answering", 180, seen=lambda: log_tail(log_path))
        return lab

    yield start
    for lab in labs:
        lab.process.terminate()
        try:
            lab.process.wait(15)
        except subprocess.TimeoutExpired:
            lab.process.kill()
    end_processes_in(*folders)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep a screenshot of every page open when a browser test fails."""
    report = yield
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.failed and call.when == "call" and page is not None:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"failed-{item.name}.png"))
        lines = getattr(page, "console_lines", [])
        (ARTIFACTS / f"failed-{item.name}.console.txt").write_text("\n".join(lines))
    return report


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
