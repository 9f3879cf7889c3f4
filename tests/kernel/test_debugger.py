"""``breakpoint()`` in a rank, from a real kernel: pdb's prompt comes as the cell's input
requests (the notebook's input box), answered here as a user would; the chosen rank
stops, the others say one line and wait in their next collective."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Execution, Kernel
from tests.kernel.test_distributed_magic import job_id_of
from tests.waits import wait_done

CELL = """%%air_distributed -n 2 --debug-rank 1
import torch.distributed as dist
dist.init_process_group("gloo")
x = 40 + dist.get_rank()
breakpoint()
dist.barrier()  # rank 0 waits here while rank 1 is stopped
print("rank", dist.get_rank(), "went on with", x, flush=True)
"""

SESSION_CELL = """%%air_distributed --session
y = ["seen on", int(os.environ["RANK"])]
breakpoint()
print("rank", os.environ["RANK"], "left its breakpoint", flush=True)
"""


def answered(
    kernel: Kernel, code: str, answers: list[str], timeout: float = 240
) -> tuple[list[str], Execution]:
    """Run ``code`` with the notebook's input box: each input request answered with the
    next of ``answers``; the prompts asked, and what the cell showed."""
    msg_id = kernel.client.execute(code, allow_stdin=True)
    prompts: list[str] = []
    deadline = time.monotonic() + timeout
    while answers:
        assert time.monotonic() < deadline, f"asked {prompts}, {answers} left unasked"
        try:
            request = kernel.client.get_stdin_msg(timeout=1)
        except queue.Empty:
            continue
        assert request["msg_type"] == "input_request"
        prompts.append(request["content"]["prompt"])
        kernel.client.input(answers.pop(0))
    return prompts, kernel.collect(msg_id, timeout)


@pytest.mark.heavy
def test_a_ranks_breakpoint_opens_pdb_in_the_cell_and_continues(
    kernel: Kernel, air_home: Path
) -> None:
    prompts, cell = answered(kernel, CELL, ["p x", "p dist.get_rank()", "c"])
    assert cell.error is None, cell.traceback
    assert prompts == ["(Pdb rank 1) "] * 3, "labelled with the rank that stopped"
    assert "<air_distributed cell>(6)<module>()" in cell.stdout, "where it stopped"
    assert "-> dist.barrier()" in cell.stdout, "the cell's line, as pdb shows it"
    assert "41\n1\n" in cell.stdout, "p answered from rank 1's frame"
    assert "rank 0 went on with 40" in cell.text
    assert "rank 1 went on with 41" in cell.text
    skipped = "rank 0: breakpoint() at <air_distributed cell>:5 skipped: only rank 1 stops"
    assert skipped in cell.text
    assert list((air_home / "debug").iterdir()) == [], "its ticket and socket went with the cell"

    # nobody watches a background job: it never waits for an answer
    background = kernel.run("%%air_distributed -n 1 --background\nbreakpoint()\nprint('on')")
    assert background.error is None, background.traceback
    job_id = job_id_of(background)
    assert wait_done(air_home, job_id).status == "SUCCEEDED"
    log = (JobStore(air_home).attempt_dir(job_id, 1) / "logs/node_0/rank_0.log").read_text()
    assert "breakpoint() at <air_distributed cell>:2 skipped: nobody is watching this job" in log
    assert "on" in log.splitlines()[-1]

    started = kernel.run("%air_session start -n 2 --oversubscribe")
    assert started.error is None, started.traceback
    try:
        kernel.run("import os")
        prompts, cell = answered(kernel, SESSION_CELL, ["p y", "c"])
        assert cell.error is None, cell.traceback
        assert prompts == ["(Pdb rank 0) "] * 2, "rank 0 by default"
        assert "['seen on', 0]" in cell.stdout
        assert "rank 1: breakpoint() at <air_session cell 1>:3 skipped" in cell.text
        assert "rank 0 left its breakpoint" in cell.text
    finally:
        kernel.run("%air_session stop")
    assert list((air_home / "debug").iterdir()) == []


def test_a_session_function_takes_its_debug_rank_as_a_session_cell_does() -> None:
    from jupyter_air import distributed

    def train() -> None: ...

    assert distributed(session=True, debug_rank=1)(train)._options.debug_rank == 1
    with pytest.raises(TypeError, match="nproc_per_node does not apply"):
        distributed(session=True, debug_rank=1, nproc_per_node=2)
