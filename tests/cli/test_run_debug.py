"""``air run --watch`` in a terminal: a rank's ``breakpoint()`` stops at a pdb prompt on
that terminal (a pseudo-terminal here, typed into as a user would)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.isolation import jp_asyncio_loop, jp_server_cleanup  # noqa: F401
from tests.mlflow_store import fresh_store

pytestmark = pytest.mark.heavy

TRAIN = """import os
x = 40 + int(os.environ["RANK"])
breakpoint()
print("rank", os.environ["RANK"], "went on with", x, flush=True)
"""

WORKLOAD = """experiment_name: debug-test
command: {python} train.py
compute:
  nproc_per_node: 2
"""


class Terminal:
    """A process on a pseudo-terminal: what it wrote, and lines typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the command, on the terminal
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.text = ""  # not yet expected
        self.written = ""  # all of it

    def _read(self) -> None:
        chunk = os.read(self.fd, 4096).decode(errors="replace")
        self.text += chunk
        self.written += chunk

    def expect(self, text: str, timeout: float = 180) -> None:
        """Read until ``text`` has been written since the last ``expect``."""
        deadline = time.monotonic() + timeout
        while text not in self.text:
            assert time.monotonic() < deadline, f"no {text!r} in {self.text!r}"
            if select.select([self.fd], [], [], 0.5)[0]:
                try:
                    self._read()
                except OSError:  # the process ended, and its terminal with it
                    assert text in self.text, f"ended without {text!r}: {self.text!r}"
        self.text = self.text[self.text.index(text) + len(text) :]

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")

    def end(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # its terminal closed as it ended
                if select.select([self.fd], [], [], 0.5)[0]:
                    self._read()
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"still running after {timeout} s: {self.text!r}")


def test_air_run_watch_stops_at_a_ranks_breakpoint_on_the_terminal(
    tmp_path: Path, mlflow_template: Path
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(WORKLOAD.format(python=sys.executable))
    env = {
        **os.environ,
        "AIR_HOME": str(tmp_path / "air"),
        "MLFLOW_TRACKING_URI": fresh_store(mlflow_template, tmp_path),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),  # no server: no links
    }
    env.pop("PYTHONBREAKPOINT", None)
    argv = [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml", "--watch"]
    terminal = Terminal(argv, env, tmp_path)
    terminal.expect("(Pdb rank 0) ")
    terminal.type("p x")
    terminal.expect("40")
    terminal.expect("(Pdb rank 0) ")
    terminal.type("c")
    assert terminal.end() == 0, terminal.written
    said = terminal.written.replace("\r\n", "\n")
    assert "rank 0 went on with 40" in said
    assert "rank 1 went on with 41" in said
    assert "train.py:3 skipped: only rank 0 stops" in said, "rank 1 said it and went on"
    assert said.rstrip().endswith("succeeded"), said
    assert list((tmp_path / "air" / "debug").iterdir()) == [], "its ticket went with it"
