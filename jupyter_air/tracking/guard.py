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

    def end(self) -> None:
        """Called when the attempt's ranks have all exited, before anyone is told."""
        with self.lock:
            self.over.set()
