"""What a user sees when a distributed cell goes wrong, in a real kernel: a refused
option in one line, the help it points to, a failing rank's traceback once and from
the user's own code, an interrupted cell in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel, running_job
from tests.waits import job_processes

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    return ANSI.sub("", text)


def test_the_help_spells_the_cell_magic_and_shows_an_example(kernel: Kernel) -> None:
    reply = kernel.client.inspect("%%air_distributed", 17, detail_level=0, reply=True)
    help_text = plain(reply["content"]["data"]["text/plain"])
    assert "usage: %%air_distributed [-n N]" in help_text
    assert "::" not in help_text
    assert " %air_distributed" not in help_text
    assert "Example:\n\n    %%air_distributed -n 2\n" in help_text


def test_a_bad_option_is_refused_in_one_line_pointing_to_the_help(kernel: Kernel) -> None:
    for line, named in [
        ("--nproc-per-node two", "--nproc-per-node"),
        ("--no-such-option", "--no-such-option"),
        ("--output-ranks some", "--output-ranks"),
    ]:
        execution = kernel.run(f"%%air_distributed {line}\nprint('never runs')\n")
        # IPython shows a UsageError as one "UsageError: ..." line on stderr.
        shown = plain(execution.stderr + execution.traceback).strip()
        assert shown.startswith("UsageError: ")
        assert "\n" not in shown, f"more than one line for {line!r}:\n{shown}"
        assert named in shown
        assert shown.endswith("; see %%air_distributed? for the options")
        assert "never runs" not in execution.stdout


def test_a_failing_rank_shows_its_traceback_once_from_the_users_cell(
    kernel: Kernel, air_home: Path
) -> None:
    cell = (
        "%%air_distributed -n 2\n"
        "import os\n"
        "def check(rank):\n"
        "    if rank == '1':\n"
        "        raise ValueError('boom on rank 1')\n"
        "check(os.environ['RANK'])\n"
    )
    execution = kernel.run(cell)
    assert execution.error is not None
    assert execution.error["ename"] == "JobFailed"
    everything = plain(execution.text + "\n" + execution.traceback)
    assert everything.count("ValueError: boom on rank 1") == 1, everything
    assert everything.count("Traceback (most recent call last)") == 1, everything
    frames = re.findall(r'File "([^"]+)", line (\d+)', everything)
    # The lines as the editor numbers them: the magic's line is line 1.
    assert frames[:2] == [
        ("<air_distributed cell>", str(editor_line(cell, "check(os.environ['RANK'])"))),
        ("<air_distributed cell>", str(editor_line(cell, "raise ValueError"))),
    ], frames
    assert "jupyter_air" not in everything.split("Traceback (most recent call last)")[1]
    # The red line under the cell says which rank failed and points at its traceback.
    assert "rank 1" in plain(execution.traceback)


def test_a_syntax_error_names_the_editors_line_and_starts_nothing(kernel: Kernel) -> None:
    cell = "%%air_distributed -n 2\nx = 1\nprint(x\nprint('never runs')\n"
    execution = kernel.run(cell)
    shown = plain(execution.stderr + execution.traceback)
    assert shown.startswith("UsageError: "), shown
    assert f"line {editor_line(cell, 'print(x')}" in shown, shown
    assert "never runs" not in execution.stdout


def editor_line(cell: str, text: str) -> int:
    """The number the editor gives the first line of ``cell`` holding ``text``."""
    return next(n for n, line in enumerate(cell.splitlines(), 1) if text in line)


def test_an_interrupted_cell_ends_in_one_line_and_stops_every_rank(
    kernel: Kernel, air_home: Path
) -> None:
    msg_id = kernel.start(
        "%%air_distributed -n 2\nimport time\nprint('started', flush=True)\ntime.sleep(300)"
    )
    job_id = running_job(air_home, 2, timeout=60)
    kernel.interrupt()
    execution = kernel.collect(msg_id)
    assert execution.error is not None
    shown = plain(execution.traceback).strip()
    assert shown == f"KeyboardInterrupt: interrupted; job {job_id} cancelled, every rank stopped"
    assert JobStore(air_home).get(job_id).status == "CANCELLED"
    assert job_processes(job_id) == []
    # Still a KeyboardInterrupt: code around the call, and Run All, stop as for any other.
    caught = kernel.run(
        "from jupyter_air.kernel.launch import Interrupted\n"
        "issubclass(Interrupted, KeyboardInterrupt)"
    )
    assert caught.value() == "True"
