"""A rank's pdb prompt in the cell that follows its job: pdb's output in the cell, its
questions in the notebook's own input box (IPython's ``input()`` in a kernel sends the
running cell's input request to the front end, as ``ipykernel``'s ``raw_input`` does).
"""

from __future__ import annotations

import sys

from IPython.core.error import StdinNotImplementedError

from ..jobs.debugger import GO_ON


class CellPrompt:
    """``jobs.debugger.Prompt`` through the kernel's stdin. A front end that takes no
    input (a notebook run by nbconvert, papermill or a schedule) is said once; then
    every stop goes on."""

    def __init__(self) -> None:
        self.answers = True

    def say(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def ask(self, prompt: str) -> str | None:
        if not self.answers:
            return None
        try:
            return input(prompt)
        except EOFError:
            return GO_ON
        except StdinNotImplementedError:
            self.answers = False
            print(
                f"{prompt.strip() or 'pdb'}: this front end takes no input: the rank goes on",
                file=sys.stderr,
            )
            return None
