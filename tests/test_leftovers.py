"""The guard of tests/leftovers.py, on a small pytest run of its own: a test that leaves a
detached process behind (its own session, its parent gone) fails the run, which names
the process and ends it; under xdist too; one left in a test's ``tmp_path`` ends with its
test; and a process pointing anywhere else is left alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.procs import alive
from tests.leftovers import end_processes_in

REPO = Path(__file__).resolve().parent.parent

#: A sleeper that notes a SIGTERM in the file it is given, and sleeps on (a supervisor
#: waiting for its ranks, a courier finishing a delivery).
STUBBORN = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(sys.argv[1]).write_text("term"))
pathlib.Path(sys.argv[1] + ".ready").touch()
time.sleep(600)
"""

#: Starts a sleeper in a session of its own, prints its pid, and exits: the sleeper's
#: parent is gone, as a supervisor's or a courier's is once its starter exited.
DETACH = """
import subprocess, sys
sleeper = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1] if len(sys.argv) > 1 else "import time; time.sleep(600)"],
    start_new_session=True,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
print(sleeper.pid)
"""

INNER = """
import os, subprocess, sys, time
from pathlib import Path

DETACH = {detach!r}
STUBBORN = {stubborn!r}


def detach(home: Path, *code: str) -> int:
    env = {{**os.environ, "AIR_HOME": str(home)}}
    run = [sys.executable, "-c", DETACH, *code]
    return int(subprocess.run(run, env=env, capture_output=True, text=True).stdout)


def test_leaves_a_process_in_a_folder_of_its_module(tmp_path_factory):
    pid = detach(tmp_path_factory.mktemp("home") / "air")
    Path({pid_file!r}).write_text(str(pid))


def test_leaves_a_process_in_its_own_tmp_path(tmp_path):
    stubborn = "import sys; sys.argv[1:] = [" + repr({term_file!r}) + "]\\n" + STUBBORN
    pid = detach(tmp_path / "air", stubborn)
    deadline = time.monotonic() + 120  # its handler in place before the test ends
    while not Path({term_file!r} + ".ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path({pid_file!r} + "-own").write_text(str(pid))
"""


def term_file(tmp_path: Path) -> Path:
    """Where the inner run's stubborn sleeper notes a SIGTERM."""
    return tmp_path / "sleeper.term"


def run_inner(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int, int]:
    """The inner run's result, and the pids of its two sleepers."""
    inner = tmp_path / "inner"
    inner.mkdir()
    pid_file = tmp_path / "sleeper.pid"
    (inner / "test_inner.py").write_text(
        INNER.format(
            detach=DETACH,
            stubborn=STUBBORN,
            pid_file=str(pid_file),
            term_file=str(term_file(tmp_path)),
        )
    )
    (inner / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(inner / "pytest.ini"),
            "-p",
            "tests.leftovers",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'basetemp'}",
            *args,
            str(inner / "test_inner.py"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    return result, int(pid_file.read_text()), int(Path(f"{pid_file}-own").read_text())


@pytest.fixture
def bystander(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose home shares the inner run's base folder's name as a prefix
    (``basetemp-2``): not the inner run's, so never its guard's to end."""
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, "AIR_HOME": str(tmp_path / "basetemp-2" / "air")},
    )
    yield sleeper
    sleeper.kill()
    sleeper.wait()


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "1"]], ids=["alone", "xdist"])
def test_a_detached_process_left_after_the_tests_fails_the_run_and_is_ended(
    tmp_path: Path, workers: list[str], bystander: subprocess.Popen[bytes]
) -> None:
    result, pid, own = run_inner(tmp_path, *workers)
    out = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "2 passed" in out, out
    assert "processes left running after the tests" in out, out
    assert f"pid {pid}: " in out, out
    assert f"pid {own}: " not in out, "its own test's end ended it"
    assert "AIR_HOME=" in out, out
    made_in = "test_inner.py::test_leaves_a_process_in_a_folder_of_its_module"
    assert f"a folder made during {made_in}" in out, out
    assert f"started during {made_in} (call)" in out, out
    assert "ended now" in out, out
    assert not alive(pid), "the guard ended it"
    assert not alive(own), "its test's end ended it"
    assert not term_file(tmp_path).exists(), "killed outright: no SIGTERM handler ran"
    assert re.search(r"processes ended at their test's end \(\d+ s\): python", out), out
    assert bystander.poll() is None, "a process outside the run's folder is left alone"


def test_a_fixture_may_end_only_what_points_into_this_session_s_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a folder of this session's tests"):
        end_processes_in(Path.home() / ".local")  # the developer's own Jupyter lives there
    assert end_processes_in(tmp_path) == []
