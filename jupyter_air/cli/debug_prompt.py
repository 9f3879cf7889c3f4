"""``air run --watch``: a rank's pdb prompt on the terminal, while the job's lines stream.

The lines are followed on the main thread (Ctrl-C there stops following, not the job);
the prompt is served beside it, on a thread of its own, since a terminal's ``input()``
may be asked from any thread. A rank stopped when the command ends reads end-of-file
and goes on (``jobs.debugger``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from ..jobs.debugger import GO_ON, Watcher

#: Seconds the prompt's thread gets to end once the job's lines are all followed.
END_WAIT = 1.0


class TerminalPrompt:
    """``jobs.debugger.Prompt`` on this process's terminal; end-of-file (Ctrl-D) goes on."""

    def say(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def ask(self, prompt: str) -> str | None:
        try:
            return input(prompt)
        except EOFError:
            print()
            return GO_ON


@contextlib.contextmanager
def served(watcher: Watcher | None) -> Iterator[None]:
    """``watcher``'s prompt on the terminal while the body follows the job."""
    if watcher is None:
        yield
        return
    stop = threading.Event()
    prompt = TerminalPrompt()

    def serve() -> None:
        while not stop.is_set():
            watcher.serve(prompt, 0.2)

    thread = threading.Thread(target=serve, name="air-debug-prompt", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(END_WAIT)
        if not thread.is_alive():  # else it waits at a prompt: the process's end closes it
            watcher.close()
