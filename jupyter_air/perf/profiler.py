"""A profile on demand, the rank's side: ``torch.profiler`` on for the next N steps when
asked, then off, without a restart.

A listener on this rank's step marks (``install``) looks for the attempt's request
(``perf/profiles/request.json``, see ``perf.profiles``) at most every ``CHECK_EVERY``
seconds: between looks a step costs it one clock read. The first rank to see a request
picks the step all start at (far enough ahead for the others to see it too, from the
step time it measured), so that every rank profiles the same steps; one that sees it
after that step starts at once. The profile then runs one warm-up step (where the
profiler's first start, about a second, is spent) and N recorded steps, exports this
rank's Chrome trace beside the request and answers (``rank-R.done.json``): its steps
and host, or its error. ``torch.profiler`` is imported only then.

A failure is answered as the rank's error and never reaches the training; the listener
stays for the next request.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..job_dir import read_json, replace_json
from ..paths import write_private
from . import profiles
from .marks import Marks, current

#: Seconds between two looks for a request.
CHECK_EVERY = 0.5
#: Most steps ahead the first rank to see a request starts the profile at.
MAX_LEAD = 10_000


def install(marks: Marks | None = None) -> None:
    """Profile this rank when asked (a no-op outside a job, or with ``AIR_PERF=0``)."""
    marks = marks or current()
    if marks is not None:
        marks.on_step(Listener(marks, int(os.environ.get("RANK", "0"))))


@dataclass(frozen=True)
class _Asked:
    id: str
    folder: Path
    steps: int
    until: float
    start: int  # the step after whose mark the profiler starts


class Listener:
    """``Marks.on_step``'s listener: called with each step's number, after its mark."""

    def __init__(self, marks: Marks, rank: int, check_every: float = CHECK_EVERY) -> None:
        self._marks = marks
        self._rank = rank
        self._every = check_every
        self._next = 0.0
        self._looked: tuple[float, int] | None = None  # (monotonic, step) at the last look
        self._seen: tuple[int, int] | None = None  # the request file's (mtime, inode)
        self._done: set[str] = set()
        self._asked: _Asked | None = None
        self._running: _Running | None = None

    def __call__(self, step: int) -> None:
        try:
            if self._running is not None:
                if self._running.step(step):
                    self._end()
            elif self._asked is not None:
                if step >= self._asked.start or time.time() > self._asked.until:
                    self._begin(step)  # or given up, its time past
            else:
                now = time.monotonic()
                if now >= self._next:
                    self._next = now + self._every
                    self._look(step, now)
        except Exception as err:  # never the training's problem: the rank's answer
            self._fail(err)

    # -- asked -------------------------------------------------------------------------

    def _look(self, step: int, now: float) -> None:
        last, self._looked = self._looked, (now, step)
        path = profiles.request_file(Path(self._marks.folder))
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_mtime_ns, st.st_ino) == self._seen:
            return
        self._seen = (st.st_mtime_ns, st.st_ino)
        doc = read_json(path)
        if not isinstance(doc, dict):
            return
        name, steps, until = doc.get("id"), doc.get("steps"), doc.get("until")
        if (
            not isinstance(name, str)
            or not profiles.PROFILE_ID.fullmatch(name)
            or name in self._done
            or not isinstance(steps, int)
            or not 1 <= steps <= profiles.MAX_STEPS
            or not isinstance(until, int | float)
            or until < time.time()
        ):
            return
        folder = path.parent / name
        if profiles.rank_answer(folder, self._rank).exists():
            self._done.add(name)
            return
        step_s = None
        if last is not None and step > last[1]:
            step_s = (now - last[0]) / (step - last[1])
        start = self._start(folder, step, step_s)
        self._asked = _Asked(name, folder, steps, float(until), start)
        if step >= start:
            self._begin(step)

    def _start(self, folder: Path, step: int, step_s: float | None) -> int:
        """The step every rank starts after: claimed by the first to look (far enough
        ahead that the others look before it), else the claim read."""
        lead = 2 if not step_s else 1 + math.ceil(2 * self._every / max(step_s, 1e-6))
        lead = min(lead, MAX_LEAD)
        claim = folder / profiles.START
        mine = folder / f".{profiles.START}.{self._rank}"
        with contextlib.suppress(OSError):
            write_private(mine, f'{{"step": {step + lead}, "rank": {self._rank}}}')
            try:
                os.link(mine, claim)  # exactly one rank's claim lands, whole
                return step + lead
            except FileExistsError:
                pass
            finally:
                mine.unlink(missing_ok=True)
        doc = read_json(claim)
        start = doc.get("step") if isinstance(doc, dict) else None
        if not isinstance(start, int) or start < step or start - step > MAX_LEAD:
            return step  # it passed already, or this rank counts otherwise: at once
        return start

    # -- profiling ---------------------------------------------------------------------

    def _begin(self, step: int) -> None:
        asked, self._asked = self._asked, None
        assert asked is not None
        self._done.add(asked.id)
        if time.time() > asked.until:
            return
        self._running = _Running(asked, step)

    def _end(self) -> None:
        running, self._running = self._running, None
        assert running is not None
        running.save(self._rank)

    def _fail(self, err: Exception) -> None:
        running, self._running = self._running, None
        asked = running.asked if running is not None else self._asked
        self._asked = None
        if running is not None:
            with contextlib.suppress(Exception):
                running.profiler.stop()
        message = f"[air] profile failed on rank {self._rank}: {err!r}"
        print(message, file=sys.stderr, flush=True)
        if asked is not None:
            self._done.add(asked.id)
            with contextlib.suppress(OSError):
                replace_json(
                    profiles.rank_answer(asked.folder, self._rank),
                    {"rank": self._rank, "host": socket.gethostname(), "error": repr(err)},
                )


class _Running:
    """``torch.profiler`` on: one warm-up step, then the steps asked for."""

    def __init__(self, asked: _Asked, step: int) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.asked = asked
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # it uses its GPU
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.profiler: Any = profile(
                activities=activities,
                schedule=schedule(wait=0, warmup=1, active=asked.steps, repeat=1),
            )
        self.after = step  # the last step before the profile
        self.count = 0
        self.profiler.start()

    def step(self, step: int) -> bool:
        """One more step ended; whether the profile has all of its steps."""
        self.profiler.step()
        self.count += 1
        return self.count > self.asked.steps

    def save(self, rank: int) -> None:
        self.profiler.stop()
        trace = profiles.rank_trace(self.asked.folder, rank)
        partial = trace.with_name(f".{trace.name}.tmp")
        self.profiler.export_chrome_trace(str(partial))
        os.chmod(partial, 0o600)
        partial.replace(trace)
        first = self.after + 2  # after the warm-up step
        replace_json(
            profiles.rank_answer(self.asked.folder, rank),
            {
                "rank": rank,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "steps": [first, first + self.asked.steps - 1],
                "bytes": trace.stat().st_size,
                "t": time.time(),
            },
        )
