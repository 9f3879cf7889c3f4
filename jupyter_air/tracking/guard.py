"""Ordering "the attempt is over" against "put the run back to RUNNING".

While ranks run, the metrics loop re-opens a run that a rank's ``with
mlflow.start_run(...)`` closed. Once the attempt is over, the kernel ends the run as
soon as it sees the job finish; the loop must never re-open it after that.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class RunGuard:
    lock: threading.Lock = field(default_factory=threading.Lock)
    over: threading.Event = field(default_factory=threading.Event)

    def end(self, wait: float = 2.0) -> None:
        """Called when the attempt's ranks have all exited, before anyone is told. A
        re-open under way is waited for ``wait`` seconds at most: one stuck on a tracking
        server that does not answer must not hold the job's end (if it lands later, the
        run's tail, done after it, ends the run again)."""
        taken = self.lock.acquire(timeout=wait)
        try:
            self.over.set()
        finally:
            if taken:
                self.lock.release()
