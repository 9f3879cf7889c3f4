"""No test module leaves NVML initialized in the pytest process (a plugin of
tests/conftest.py).

The fake driver, once loaded in a worker, stays loaded for the worker's life, and so does
its count of ``nvmlInit`` calls not yet shut down. A module that leaves one (an ``Nvml``
never shut down, a sampler or an XID watch still running) makes a later module's
"uninitialized" expectations fail, far from the cause. So when a module's last test is
torn down (its module fixtures with it), the count must be back where it was at the
module's first test, else that teardown fails, naming the module.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.fake_nvml import init_count
from tests.waits import until

#: Seconds a module's threads get to shut NVML down after its last teardown.
SETTLE = 30.0

_module: list[object] = []
_at_start: list[int | None] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    module = getattr(item, "module", None)
    if not _module or _module[0] is not module:
        _module[:] = [module]
        _at_start[:] = [init_count()]
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    result = yield
    last_of_module = nextitem is None or getattr(nextitem, "module", None) is not _module[0]
    before = _at_start[0] if _at_start else None
    if last_of_module and (now := init_count()) is not None and now > (before or 0):
        until(
            lambda: (init_count() or 0) <= (before or 0),
            f"NVML shut down as often as {item.path.name} initialized it"
            f" ({now - (before or 0)} nvmlInit left)",
            SETTLE,
        )
    return result
