"""The level of an output line: error, warning or info.

Error: Python tracebacks (every line of one, through the exception line) and lines
logged at ERROR/CRITICAL/FATAL. Warning: WARNING/WARN, PyTorch's ``[W ...]``, glog's
``W1129 ...`` and Python's ``...Warning:``. Info: everything else, stderr included.
"""

from __future__ import annotations

import re
from typing import Literal

#: A line's level as readers see it (docs/api.md), the most severe last.
LevelName = Literal["info", "warning", "error"]

INFO, WARNING, ERROR = "I", "W", "E"
NAMES: dict[str, LevelName] = {INFO: "info", WARNING: "warning", ERROR: "error"}
CODES = {name: code for code, name in NAMES.items()}
#: The codes at or above a level, for filtering.
AT_LEAST = {"info": "IWE", "warning": "WE", "error": "E"}

_ERROR = re.compile(r"\b(?:CRITICAL|FATAL|ERROR)\b|^\[E |^[EF]\d{4} ")
_WARNING = re.compile(r"\b(?:WARNING|WARN)\b|^\[W |^W\d{4} |\b[A-Z]\w*Warning: ")
#: Every line that is not plain info contains one of these: a cheap test first.
_CANDIDATE = re.compile(r"ERROR|CRITICAL|FATAL|WARN|Warning: |^\[[EW] |^[EFW]\d{4} |Traceback")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct")


class LevelDetector:
    """Levels of one stream's lines, in order (a traceback spans several lines)."""

    def __init__(self) -> None:
        self._in_traceback = False

    def level(self, text: str) -> str:
        if self._in_traceback:
            if not text or text[0] in " \t" or text.startswith((*_CHAINED, _TRACEBACK)):
                return ERROR
            self._in_traceback = False  # the exception line ends it
            return ERROR
        head = text[:300]
        if not _CANDIDATE.search(head):
            return INFO
        if text.startswith(_TRACEBACK):
            self._in_traceback = True
            return ERROR
        if _ERROR.search(head):
            return ERROR
        if _WARNING.search(head):
            return WARNING
        return INFO
