"""A rank's ``breakpoint()`` and its watcher (``jobs.debugger``, ``jobs.rank_pdb``):
real rank-like processes with the environment a job's rank gets, served in this process
by a scripted prompt; no job, no kernel (``tests/kernel/test_debugger.py`` has those)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jupyter_air.jobs.debugger import GO_ON, TICKET_ENV, Watcher
from jupyter_air.jobs.node.rank_debugger import HOOK

NOBODY = 65534

#: A rank's code: a local to look at, a breakpoint, then proof that it went on.
RANK = """
import os
x = 41 + int(os.environ["RANK"])
breakpoint()
x += 1
breakpoint()
print("went on with", x, flush=True)
"""


class Script:
    """A user at the prompt: answers in order, and everything pdb showed."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []
        self.said = ""

    def say(self, text: str) -> None:
        self.said += text

    def ask(self, prompt: str) -> str | None:
        self.asked.append(prompt)
        return self.answers.pop(0) if self.answers else GO_ON


def rank(rank: int, ticket: Path | None, code: str = RANK) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in (TICKET_ENV, "PYTHONBREAKPOINT")}
    env.update({"RANK": str(rank), "PYTHONBREAKPOINT": HOOK})
    if ticket is not None:
        env[TICKET_ENV] = str(ticket)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def served(
    watcher: Watcher, prompt: Script, *procs: subprocess.Popen[str]
) -> list[tuple[str, str]]:
    """Serve until every process ended (two minutes at most); their stdout and stderr."""
    deadline = time.monotonic() + 120
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "a rank still runs after 120 s"
        watcher.serve(prompt, 0.1)
    return [p.communicate() for p in procs]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "air"


def test_the_chosen_rank_stops_at_its_prompt_and_the_others_say_one_line_and_go_on(
    home: Path,
) -> None:
    watcher = Watcher(home, 1)
    try:
        prompt = Script("p x", "c", "p x", "c")
        (out0, err0), (out1, err1) = served(
            watcher, prompt, rank(0, watcher.ticket), rank(1, watcher.ticket)
        )
    finally:
        watcher.close()
    assert prompt.asked == ["(Pdb rank 1) "] * 4, "labelled with the rank, asked each line"
    assert "> <string>(5)<module>()" in prompt.said, "pdb says where it stopped: after the call"
    assert "42\n" in prompt.said, "p x answered from the rank"
    assert "43\n" in prompt.said
    assert "went on with 43" in out1
    assert "went on with 42" in out0, "rank 0 never stopped"
    skipped = [line for line in err0.splitlines() if "skipped" in line]
    assert skipped == [
        "rank 0: breakpoint() at <string>:4 skipped: only rank 1 stops (--debug-rank 1); going on",
        "rank 0: breakpoint() at <string>:6 skipped: only rank 1 stops (--debug-rank 1); going on",
    ]
    assert not err1.strip(), err1
    assert not watcher.folder.exists(), "the ticket and the socket go with the watcher"


def test_a_job_nobody_watches_does_not_stop(home: Path) -> None:
    loop = "import os\nfor i in range(3):\n    breakpoint()\nprint('done', flush=True)\n"
    out, err = rank(0, None, loop).communicate(timeout=120)
    assert out == "done\n"
    assert err.splitlines() == [
        "rank 0: breakpoint() at <string>:3 skipped: nobody is watching this job (run in the "
        "background or without --watch); going on"
    ], "one line for the call site, not one per call"


def test_a_rank_stopped_when_its_watcher_goes_goes_on(home: Path) -> None:
    watcher = Watcher(home, 0)

    class Leaving(Script):
        def ask(self, prompt: str) -> str | None:
            watcher.close()  # the cell was interrupted, air run --watch stopped following
            return "p x"

    proc = rank(0, watcher.ticket)
    [(out, err)] = served(watcher, Leaving(), proc)
    assert "went on with 42" in out
    assert "rank 0: the debugger's watcher is gone: going on" in err
    assert "skipped: no watcher reachable (it stopped following the job" in err, "the next one"


def test_pdb_set_trace_in_a_rank_goes_the_same_way(home: Path) -> None:
    code = (
        "from jupyter_air.jobs.node import rank_debugger\n"
        "rank_debugger.install()\n"
        "import pdb\n"
        "y = 'seen'\n"
        "pdb.set_trace(header='looking at y')\n"
        "print('after', flush=True)\n"
    )
    watcher = Watcher(home, 0)
    try:
        prompt = Script("p y", "c")
        [(out, _)] = served(watcher, prompt, rank(0, watcher.ticket, code))
    finally:
        watcher.close()
    assert prompt.said.startswith("looking at y\n")
    assert "'seen'" in prompt.said
    assert out == "after\n"


def test_a_peer_without_the_secret_gets_no_prompt(home: Path) -> None:
    """Same user, the socket reached, a forged ticket: refused before anything is read."""
    watcher = Watcher(home, 0)
    forged = home / "forged.json"
    try:
        ticket = json.loads(watcher.ticket.read_text())
        forged.write_text(json.dumps({**ticket, "token": secrets.token_hex(32)}))
        prompt = Script()
        [(_, err)] = served(watcher, prompt, rank(0, forged))
    finally:
        watcher.close()
    assert (prompt.asked, prompt.said) == ([], "")
    assert "skipped: no watcher" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_can_neither_reach_nor_drive_the_prompt() -> None:
    """Another user of the machine: the folder keeps them from the socket and the ticket;
    with both opened to all, the watcher still turns them away (the peer's uid), so no
    line of theirs reaches a stopped rank and nothing of pdb reaches them."""
    home = Path(tempfile.mkdtemp())
    home.chmod(0o755)
    watcher = Watcher(home, 0)
    try:
        (home / "debug").chmod(0o755)
        sock = watcher.folder / "pdb.sock"
        attack = f"""
import socket, sys
for what in (lambda: open({str(watcher.ticket)!r}).read(),
             lambda: socket.socket(socket.AF_UNIX).connect({str(sock)!r})):
    try:
        what()
    except PermissionError:
        continue
    sys.exit("reached")
"""
        shut = subprocess.run(
            ["/usr/bin/python3", "-c", attack], user=NOBODY, capture_output=True, text=True
        )
        assert shut.returncode == 0, shut.stdout + shut.stderr
        watcher.folder.chmod(0o755)
        sock.chmod(0o777)
        pushy = f"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({str(sock)!r})
s.settimeout(20)
try:
    s.sendall(b"c\\n" * 100)
    answer = s.recv(100)
except (ConnectionResetError, BrokenPipeError):
    answer = b""
sys.exit("answered" if answer else "closed")
"""
        intruder = subprocess.Popen(
            ["/usr/bin/python3", "-c", pushy],
            user=NOBODY,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        prompt = Script()
        [(_, said)] = served(watcher, prompt, intruder)
        assert "closed" in said, said
        assert (prompt.asked, prompt.said) == ([], "")
    finally:
        watcher.close()
        shutil.rmtree(home)
