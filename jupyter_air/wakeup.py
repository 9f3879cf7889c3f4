"""A sleep that a caught signal ends: the loops of the detached processes (the
scheduler, a sweep's driver) sleep until their next look or until told to look now."""

from __future__ import annotations

import contextlib
import os
import select
import signal


class Wakeup:
    """A sleep that any caught signal ends, through ``signal.set_wakeup_fd``: the signal's
    number is written to a pipe, so one that arrives before the sleep begins still ends
    it, and the Python handler takes no lock. (A ``threading.Event`` set from a handler
    deadlocks when the signal lands while the loop holds the Event's own lock, in
    ``clear`` or ``wait``.) Main thread only, as signal handlers are."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()  # not inherited by the jobs' supervisors (PEP 446)
        for fd in (self.read, self.write):
            os.set_blocking(fd, False)
        self.previous = signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)

    def sleep(self, seconds: float) -> None:
        """Until ``seconds`` have passed or a signal was caught since the last sleep."""
        ready, _, _ = select.select([self.read], [], [], max(0.0, seconds))
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.read, 512):
                    pass

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous)
        os.close(self.read)
        os.close(self.write)
