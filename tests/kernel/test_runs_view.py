"""How ``%air_runs`` writes a run's numbers in its table: readable at a glance."""

from __future__ import annotations

import pytest

from jupyter_air.kernel.runs_magic import readable_number


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (79_670.4, "79,670"),
        (9_999.95, "10,000"),
        (1_234_567.0, "1,234,567"),
        (3.0, "3"),
        (0.123456, "0.1235"),
        (-12.3456, "-12.35"),
        (0.0001, "0.0001"),
        (2e-05, "2e-05"),
        (None, ""),
    ],
)
def test_numbers_have_four_significant_digits_and_no_exponent_above_one(
    value: float | None, shown: str
) -> None:
    assert readable_number(value) == shown
