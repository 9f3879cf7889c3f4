"""The scheduler's sleep: any caught signal ends it, even one caught just before it began
(a wake-up sent while the scheduler ticks must not wait for the next due time)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from jupyter_air.wakeup import Wakeup


@pytest.fixture
def wakeup() -> Iterator[Wakeup]:
    caught: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: caught.append(signum))
    sleep = Wakeup()
    yield sleep
    sleep.close()
    signal.signal(signal.SIGUSR1, previous)


def test_a_signal_caught_before_the_sleep_ends_it(wakeup: Wakeup) -> None:
    os.kill(os.getpid(), signal.SIGUSR1)  # handled now, before the sleep starts
    started = time.monotonic()
    wakeup.sleep(600)
    assert time.monotonic() - started < 60  # woken, not timed out


def test_a_signal_during_the_sleep_ends_it_and_the_next_sleep_runs_its_course(
    wakeup: Wakeup,
) -> None:
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    started = time.monotonic()
    wakeup.sleep(600)
    assert time.monotonic() - started < 60
    started = time.monotonic()
    wakeup.sleep(0.3)  # the pipe was drained: no stale wake-up ends this one at once
    assert time.monotonic() - started >= 0.3


def test_a_burst_of_signals_is_one_wake_up(wakeup: Wakeup) -> None:
    for _ in range(2000):  # as many `air schedule` commands at once, each waking it
        os.kill(os.getpid(), signal.SIGUSR1)
    started = time.monotonic()
    wakeup.sleep(600)
    assert time.monotonic() - started < 60
    started = time.monotonic()
    wakeup.sleep(0.3)
    assert time.monotonic() - started >= 0.3
