"""An attempt's guards (``jobs.guards``), checked by its supervisor while it runs.

Ranks append their points to the attempt's journal (``jupyter_air.log_metrics``), and
the trainers' hooks the guarded metrics to the guard points (``guard_hook``); the feed
reads what was appended since its last look, every ``LOOK`` seconds, so a guard fires
well within 2 s of its point, and no rank waits for any of it. A guard that holds acts:
``notify`` posts a notification to every target of the job; ``stop`` stops the ranks,
and the attempt ends FAILED with the guard's reason, not retried; ``checkpoint`` asks
the trainer to save first (``guard_hook``), waits ``SAVE_WAIT`` seconds at most for it,
then stops the ranks, and the attempt ends FAILED (retried if the job has retries left:
the retry resumes from that checkpoint).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from ...job_dir import AttemptDir
from ...status import Outcome
from ...tracking import journal
from ..guard_hook import POINTS, SAVE, SAVED, TRAINER
from ..guards import Action, Firing, Watcher, readable
from ..node.outcome import AttemptEnd

log = logging.getLogger("jupyter_air.supervisor")

#: Seconds between two looks at the journal.
LOOK = 0.2
#: Seconds a ``checkpoint`` guard waits for the trainer's save before it stops the ranks.
SAVE_WAIT = float(os.environ.get("AIR_GUARD_SAVE_WAIT", "300"))
#: Seconds the attempt's end waits for the feed's thread.
STOP_WAIT = 5.0


class GuardFeed:
    """Follows one attempt's points for its job's guards, and acts on those that hold."""

    def __init__(
        self,
        files: AttemptDir,
        guards: Sequence[str],
        stop: Callable[[], None],
        notify: Callable[[Firing], None],
        interval: float = LOOK,
    ) -> None:
        self._files = files
        self._watcher = Watcher(readable(guards))
        self._stop = stop
        self._notify = notify
        #: Each source's offset: the journal, and the trainers' guard points.
        self._offsets = {files.metrics_journal: 0, files.path / POINTS: 0}
        self._over = threading.Event()
        #: Why the guard that stops the attempt did, and whether a retry may follow.
        self._why: str | None = None
        self._final = True
        self._thread: threading.Thread | None = None
        if self._watcher.metrics:
            self._thread = threading.Thread(
                target=self._loop, args=(interval,), name="air-guards", daemon=True
            )
            self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._over.wait(interval):
            try:
                self._look()
            except Exception:  # a bug here costs the guards, never the job
                log.exception("the guards of attempt %d stopped looking", self._files.number)
                return

    def _look(self) -> None:
        for path, offset in self._offsets.items():
            for points, end in journal.read(path, offset):
                self._offsets[path] = end
                seen = ((p.key, p.value, p.step) for p in points)
                for firing in self._watcher.see(seen):
                    self._act(firing)

    def _act(self, firing: Firing) -> None:
        guard = firing.guard
        log.warning("%s: %s", firing.reason, ", ".join(guard.actions))
        if Action.NOTIFY in guard.actions:
            self._notify(firing)
        if not guard.stops or self._why is not None:  # one stop is enough
            return
        self._why = firing.reason
        if Action.CHECKPOINT in guard.actions:
            self._final = False
            self._why = f"{firing.reason}; {self._checkpoint(firing)}"
        self._stop()

    def _checkpoint(self, firing: Firing) -> str:
        """Ask the ranks' trainer to save, and wait for it: what became of it."""
        folder = self._files.path
        if not (folder / TRAINER).exists():
            return "no checkpoint: no HF Trainer or Lightning in the ranks to save one"
        (folder / SAVE).write_text(firing.reason)
        deadline = time.monotonic() + SAVE_WAIT
        while not (folder / SAVED).exists():
            if self._over.wait(0.1):  # the ranks ended (after saving, most often)
                break
            if time.monotonic() > deadline:
                return f"no checkpoint: not saved within {SAVE_WAIT:g} s"
        try:
            return f"checkpoint saved: {(folder / SAVED).read_text()}"
        except FileNotFoundError:
            return "no checkpoint: the ranks ended before saving one"

    def finish(self) -> None:
        """No more looks: the attempt's ranks have ended."""
        self._over.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT)

    def outcome(self, end: AttemptEnd) -> AttemptEnd:
        """The attempt's end, as the guard that stopped it says, if one did."""
        if self._why is None:
            return end
        return AttemptEnd(Outcome.FAILED, end.exit_codes, message=self._why, final=self._final)
