"""The lab ``make demo`` starts, as a new user meets it: the URL it prints opens the
quickstart notebook, whose kernel starts (over Unix sockets, with no warning of
unencrypted TCP), and a terminal runs ``air`` as the user types it there.

Jupyter starts a terminal as a login shell when the server's output is not a terminal
(here, as under a service manager), and a login shell's ``/etc/profile`` (Debian's)
sets PATH afresh. The lab gets what the Makefile gives it: the PATH it exports (the
venv's ``bin`` first) and the demo's settings folder on ``JUPYTER_CONFIG_PATH``; and a
home of its own, whose login file the terminal must still read. The one thing the test
adds, the terminal's screen-reader mode, puts what the terminal shows in the page as
text (xterm otherwise paints it on a canvas), so that the test can wait for it.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import demo
from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab

#: Where pip put ``air`` for the Python that serves the lab (``.venv/bin``).
VENV_BIN = Path(sysconfig.get_path("scripts"))
TERMINAL = ".jp-Terminal"
#: The terminal's screen, a row per line (in screen-reader mode).
ROWS = f"{TERMINAL} .xterm-accessibility-tree > div"
#: The launcher's tile that opens a terminal.
TERMINAL_TILE = ".jp-LauncherCard[data-category='Other'][title*='terminal']"
#: What the user's own login file exports, which the terminal must have read.
LOGIN_MARK = "read-my-profile"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's home with a login file, as Debian's skeleton gives one."""
    home = tmp_path_factory.mktemp("home")
    (home / ".profile").write_text(f"export AIR_TEST_LOGIN={LOGIN_MARK}\n")
    return home


@pytest.fixture(scope="module")
def demo_lab(start_lab: Callable[..., Lab], home: Path) -> Lab:
    """A lab as ``make demo`` starts it (its recipe's environment, see the Makefile)."""
    config_path = [str(demo.LAB_CONFIG), os.environ.get("JUPYTER_CONFIG_PATH", "")]
    return start_lab(
        Scenario(gpus=[]),
        settings={"@jupyterlab/terminal-extension:plugin": {"screenReaderMode": True}},
        env={
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
            "JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, config_path)),
            "HOME": str(home),
        },
    )


@pytest.fixture
def page(browser: Any, demo_lab: Lab) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.on("requestfailed", lambda r: page.console_lines.append(f"request failed: {r.url}"))
    # ?reset: the launcher, whatever another test left open in the lab's workspace
    page.goto(f"{demo_lab.url}lab?reset&token={demo_lab.token}")
    yield page
    page.close()


def terminal_text(page: Any) -> str:
    """What the terminal shows, line by line (xterm's screen-reader rows)."""
    lines: list[str] = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.textContent)")
    return "\n".join(line.rstrip() for line in lines)


def test_the_url_make_demo_prints_opens_the_quickstart_notebook(
    browser: Any, demo_lab: Lab, artifacts: Path
) -> None:
    demo.prepare(demo_lab.scenario_path.parent / "root")  # the lab's root, as make demo fills it
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(demo.notebook_url(f"{demo_lab.url}lab?token={demo_lab.token}"))
        tab = "#jp-main-dock-panel .lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel"
        page.wait_for_function(
            "s => document.querySelector(s)?.textContent === 'quickstart.ipynb'",
            arg=tab,
            timeout=60_000,
        )
        panel = "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)"
        page.wait_for_selector(f"{panel} .jp-MarkdownCell h1", timeout=60_000)
        assert "quickstart" in (page.text_content(f"{panel} .jp-MarkdownCell h1") or "")
        page.wait_for_selector(
            f'{panel} .jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=120_000
        )
        page.screenshot(path=str(artifacts / "demo-quickstart.png"))
    finally:
        page.close()
    (kernel,) = demo_lab.api("api/kernels")
    assert kernel["execution_state"] == "idle"
    assert "without encryption" not in demo_lab.log_path.read_text()


def test_air_help_in_a_new_terminal_shows_the_usage_of_the_venvs_air(
    page: Any, artifacts: Path
) -> None:
    page.click(TERMINAL_TILE, timeout=60_000)
    page.wait_for_selector(f"{TERMINAL} .xterm-helper-textarea", timeout=60_000)
    page.click(f"{TERMINAL} .xterm-screen")
    page.keyboard.type('echo "login: $AIR_TEST_LOGIN"; command -v air; air --help\n')
    # The usage's last line (by then the whole usage is on the screen), or bash's answer.
    page.wait_for_function(
        """selector => [...document.querySelectorAll(selector)].some(row =>
            /show this help message and exit|air: command not found/.test(row.textContent))""",
        arg=ROWS,
        timeout=60_000,
    )
    page.screenshot(path=str(artifacts / "demo-terminal-air-help.png"))
    text = terminal_text(page)
    assert "\nusage: air " in text
    assert "submit a workload file as a job" in text
    assert f"\n{VENV_BIN / 'air'}\n" in text, "the venv's air, first on PATH"
    assert f"\nlogin: {LOGIN_MARK}\n" in text, "the user's login file was read as usual"
