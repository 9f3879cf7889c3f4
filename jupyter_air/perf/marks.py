"""A rank's step marks: one JSON line per training step (its end, its length, this
rank's samples and tokens), the run's planned length, and the few notes others add
(FLOPs, profiles), appended to ``<AIR_PERF_DIR>/rank-<RANK>.jsonl``.

The rank only appends (one ``os.write`` per line, ``O_APPEND``) and goes on: the
supervisor, the server and the CLI read the files (``perf.progress``), so no rank waits
on any analysis. A failure to write prints one ``[air]`` line and turns the marks off
for the rest of the folder's life; the training never notices.

Line kinds (keys kept short; ``t`` is ``time.time()`` at the event):

- step: ``{"s": 12, "t": ..., "dt": 0.21, "n": 32, "k": 4096, "src": "hf", "ph": {...}}``,
  ``s`` the step number, ``dt`` seconds per step since the previous mark (or since the
  step's begin, for the first), ``n``/``k`` samples/tokens of one step of this rank
  (absent when unknown), ``ph`` the step's split by ``Phase`` (when someone measured it);
- plan: ``{"plan": 10000, "src": "hf", "t": ...}``, the planned number of steps;
- anything ``note`` writes (``{"flops": ...}``, ``{"prof": ...}``): readers skip kinds
  they do not know.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

#: The folder of the marks files, set for every rank by the job's environment.
PERF_DIR_ENV = "AIR_PERF_DIR"
#: ``0`` turns every rank-side hook of the performance figures off.
PERF_ENV = "AIR_PERF"


class Source(StrEnum):
    """Who marked the step; a higher one wins, lower ones are then ignored."""

    LOOP = "loop"  # log_metrics(step=...) cadence, on each rank that calls it
    HF = "hf"
    LIGHTNING = "lightning"
    STEP = "step"  # the public jupyter_air.step(...)


_ORDER = {source: i for i, source in enumerate(Source)}


class Phase(StrEnum):
    """Where a step's time went (``ph`` of a step line)."""

    DATA = "data"
    COMPUTE = "compute"
    COMM = "comm"


def enabled(env: dict[str, str] | os._Environ[str]) -> bool:
    """Whether ``AIR_PERF`` leaves the rank-side hooks on."""
    return env.get(PERF_ENV, "1") != "0"


def rank_file(perf_dir: Path, rank: int) -> Path:
    return perf_dir / f"rank-{rank}.jsonl"


def rank_files(perf_dir: Path) -> dict[int, Path]:
    """The marks files in ``perf_dir`` by global rank (none when it does not exist)."""
    found: dict[int, Path] = {}
    try:
        entries = list(perf_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        name = entry.name
        if name.startswith("rank-") and name.endswith(".jsonl") and name[5:-6].isdigit():
            found[int(name[5:-6])] = entry
    return dict(sorted(found.items()))


def parse(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The complete lines of ``data`` as objects, and how many bytes they took: a line
    still being written (no newline yet) is left for the next read; one that is not a
    JSON object (cut short by a crash, then followed by others) is skipped."""
    end = data.rfind(b"\n") + 1
    found: list[dict[str, Any]] = []
    for raw in data[:end].split(b"\n"):
        if not raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            found.append(line)
    return found, end


class Marks:
    """This process's marks: one per process, writing to the folder ``AIR_PERF_DIR``
    names now (a warm session's rank changes it with each cell; listeners stay)."""

    def __init__(self, folder: str, rank: int) -> None:
        self._rank = rank
        self._lock = threading.Lock()
        self._listeners: list[Callable[[int], None]] = []
        self._fd: int | None = None
        self._target(folder)

    @property
    def folder(self) -> str:
        return self._folder

    def _target(self, folder: str) -> None:
        """Start afresh in ``folder``: a new file, a new numbering."""
        if self._fd is not None:
            os.close(self._fd)
        self._folder = folder
        self._fd = None
        self._off = False
        self._top: Source | None = None
        self._last_step: int | None = None
        self._last_end: float | None = None
        self._since = time.time()  # the first step's start when nothing better is known
        self._begin: float | None = None
        self._split: dict[str, float] = {}
        self._plan: int | None = None

    def begin(self) -> None:
        """A step begins: the first step's length is counted from here."""
        self._begin = time.time()

    def step(
        self,
        source: Source,
        step: int | None = None,
        samples: int | None = None,
        tokens: int | None = None,
    ) -> None:
        """A step ended: ``step`` its number (the next one when not given), ``samples`` and
        ``tokens`` this rank's batch. A lower source than one already seen is ignored; a
        step number seen already is no new step, a lower one starts the count again."""
        now = time.time()
        with self._lock:
            if self._off or (self._top is not None and _ORDER[source] < _ORDER[self._top]):
                return
            if source is not self._top:  # a higher source: its own numbering
                self._top, self._last_step = source, None
            last = self._last_step
            number = step if step is not None else (last or 0) + 1
            if last is not None and number <= last:
                if number < last:
                    self._last_step, self._last_end, self._begin = number, now, None
                    self._split = {}
                return
            if last is not None and self._last_end is not None:
                dt = (now - self._last_end) / (number - last)
            else:
                dt = now - (self._begin if self._begin is not None else self._since)
            line: dict[str, Any] = {"s": number, "t": round(now, 3), "dt": round(dt, 6)}
            if samples is not None:
                line["n"] = samples
            if tokens is not None:
                line["k"] = tokens
            line["src"] = source.value
            if self._split:
                line["ph"] = {k: round(v, 6) for k, v in self._split.items()}
            self._last_step, self._last_end, self._begin, self._split = number, now, None, {}
            self._write(line)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(number)
            except Exception as err:  # dropped, never in the training's way
                self._drop(listener, err)

    def plan(self, source: Source, total_steps: int) -> None:
        """The run's planned number of steps: written when it is new or changed."""
        with self._lock:
            if self._off or (self._top is not None and _ORDER[source] < _ORDER[self._top]):
                return
            if not isinstance(total_steps, int):
                if not (isinstance(total_steps, float) and math.isfinite(total_steps)):
                    return
                total_steps = int(total_steps)
            if total_steps <= 0 or total_steps == self._plan:
                return
            self._plan = total_steps
            self._write({"plan": total_steps, "src": source.value, "t": round(time.time(), 3)})

    def phase(self, phase: Phase, seconds: float) -> None:
        """Add ``seconds`` of ``phase`` to the current step's split."""
        with self._lock:
            self._split[phase.value] = self._split.get(phase.value, 0.0) + seconds

    def note(self, **fields: object) -> None:
        """One line of another kind (FLOPs, a profile), its time added."""
        with self._lock:
            if not self._off:
                self._write({**fields, "t": round(time.time(), 3)})

    def on_step(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call ``listener(step)`` after each step mark; returns its unsubscribe. A
        listener that raises is dropped, with one line on stderr."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _drop(self, listener: Callable[[int], None], err: Exception) -> None:
        with self._lock:
            if listener not in self._listeners:
                return
            self._listeners.remove(listener)
        name = getattr(listener, "__qualname__", type(listener).__name__)
        print(f"[air] step listener {name} is off: {err!r}", file=sys.stderr, flush=True)

    def _write(self, line: dict[str, Any]) -> None:
        """Append one line (the caller holds the lock); a failure turns the marks off."""
        data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
        try:
            if self._fd is None:
                path = rank_file(Path(self._folder), self._rank)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                self._fd = os.open(path, flags, 0o600)
            os.write(self._fd, data)
        except (OSError, ValueError) as err:
            self._off = True
            print(f"[air] step marks are off: {err!r}", file=sys.stderr, flush=True)


_made: Marks | None = None
_made_lock = threading.Lock()
_missing: str | None = None  # a folder found missing: not looked for again


def current() -> Marks | None:
    """This process's marks; None outside a job, with ``AIR_PERF=0``, or when the folder
    ``AIR_PERF_DIR`` names does not exist."""
    global _made, _missing
    env = os.environ
    folder = env.get(PERF_DIR_ENV)
    if not folder or env.get(PERF_ENV) == "0":
        return None
    made = _made
    if made is not None and made.folder == folder:
        return made
    if folder == _missing:
        return None
    with _made_lock:
        if _made is not None and _made.folder == folder:
            return _made
        if not os.path.isdir(folder):
            _missing = folder
            return None
        if _made is None:
            _made = Marks(folder, int(env.get("RANK", "0")))
        else:
            with _made._lock:
                _made._target(folder)
        return _made
