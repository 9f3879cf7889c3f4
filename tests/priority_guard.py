"""No test leaves the pytest process's thread at a lower priority (a plugin of
tests/conftest.py).

On Linux a thread has a nice value of its own, and every thread and process it starts
inherits it. A test that lowers the thread it runs on (product code that lowers "its"
thread, called from a test's) leaves the whole rest of its worker's run at that priority:
every lab, kernel, job and rank it starts then waits behind any other work on the machine
(in a rehearsal beside two busy loops, a 2-rank job's first step took 567 s). So
each test's teardown checks the thread's nice value against the session's start, puts it
back (where the user may) and fails that test, naming what happened.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator

import pytest

_at_start: list[int] = []


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def pytest_sessionstart(session: pytest.Session) -> None:
    _at_start[:] = [_nice()]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    result = yield
    now = _nice()
    if _at_start and now != _at_start[0]:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _at_start[0])
            put_back = "put back"
        except OSError as err:
            put_back = f"not put back ({err}): later tests of this worker run at it"
        pytest.fail(
            f"{item.nodeid} left the test thread at nice {now} (it began at "
            f"{_at_start[0]}; {put_back}): what it starts inherits that priority"
        )
    return result
