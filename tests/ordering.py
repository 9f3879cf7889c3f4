"""The order in which test files reach the workers (a plugin of tests/conftest.py).

``make test`` hands whole files to its workers (``--dist loadfile``) in collection order,
each worker holding up to two. By default xdist puts the files with the most tests first,
which are the unit tests': a file of one test that starts a lab, a Hub or a cluster (a
minute or two) then came last, run by one worker while the others had nothing left. The
costliest kinds of file go first here, the unit tests last, where they fill the gaps
(the Makefile turns xdist's own order off: ``--no-loadscope-reorder``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

#: The kinds of file, costliest first (their markers); a file is of its costliest test's.
COSTLIEST_FIRST = ("browser", "ray", "slurm", "slow", "heavy")


def cost_rank(item: pytest.Item) -> int:
    """Where ``item``'s kind stands in ``COSTLIEST_FIRST`` (unmarked: after them all)."""
    return next(
        (rank for rank, mark in enumerate(COSTLIEST_FIRST) if item.get_closest_marker(mark)),
        len(COSTLIEST_FIRST),
    )


@pytest.hookimpl(trylast=True)  # after tests/ui's conftest marks its tests ``browser``
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files by their kind, costliest first, then by their number of tests, most first
    (within a kind, the longer file); each file's tests in their own order."""
    files: dict[Path, list[pytest.Item]] = defaultdict(list)
    for item in items:
        files[item.path].append(item)

    def cost(tests: list[pytest.Item]) -> tuple[int, int]:
        return min(cost_rank(t) for t in tests), -len(tests)

    items[:] = [item for tests in sorted(files.values(), key=cost) for item in tests]
