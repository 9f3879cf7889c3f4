"""The order in which test files reach the workers (tests/ordering.py), on a small pytest
collection of its own: the costliest kinds of file first, then the longer file of a kind,
each file's tests kept in their own order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FILES = {
    "test_a_unit.py": "def test_1(): pass\ndef test_2(): pass\ndef test_3(): pass\n",
    "test_b_lab.py": "import pytest\npytestmark = pytest.mark.browser\ndef test_1(): pass\n",
    "test_c_mixed.py": (
        "import pytest\ndef test_1(): pass\n@pytest.mark.heavy\ndef test_2(): pass\n"
    ),
    "test_d_unit.py": "".join(f"def test_{n}(): pass\n" for n in (5, 1, 4, 2, 3)),
    "test_e_slow.py": "import pytest\n@pytest.mark.slow\ndef test_1(): pass\n",
    "test_f_slow.py": "import pytest\npytestmark = pytest.mark.slow\n"
    "def test_1(): pass\ndef test_2(): pass\n",
}
INI = """[pytest]
markers =
    browser: b
    slow: s
    heavy: h
"""


def test_files_go_costliest_kind_first_then_longest_and_keep_their_tests_order(
    tmp_path: Path,
) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text(INI)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.ordering"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected == [
        "test_b_lab.py::test_1",  # a lab's file, whatever its length
        "test_f_slow.py::test_1",  # slow: the file of two before the file of one
        "test_f_slow.py::test_2",
        "test_e_slow.py::test_1",
        "test_c_mixed.py::test_1",  # heavy, by its costliest test
        "test_c_mixed.py::test_2",
        "test_d_unit.py::test_5",  # unmarked, last: five tests, in their file's order
        "test_d_unit.py::test_1",
        "test_d_unit.py::test_4",
        "test_d_unit.py::test_2",
        "test_d_unit.py::test_3",
        "test_a_unit.py::test_1",
        "test_a_unit.py::test_2",
        "test_a_unit.py::test_3",
    ]
