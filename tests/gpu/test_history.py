"""The sample ring: fixed size, time-windowed, columnar, compact."""

from __future__ import annotations

from itertools import pairwise

import pytest

from jupyter_air.gpu.history import Row, SampleHistory


def row(t: float, n_gpus: int = 1, util: float | None = 50.0) -> Row:
    return Row(t=t, host=(12.5, 1024.0), gpus=[(util, 2048.0, 40.0, 123.45)] * n_gpus)


def test_two_hours_at_ten_seconds_keeps_exactly_the_last_two_hours() -> None:
    history = SampleHistory(capacity=721, n_gpus=8, span=7200.0)
    for i in range(3 * 721):  # six hours of samples
        history.append(row(float(i * 10), n_gpus=8))
    now = (3 * 721 - 1) * 10.0
    t = history.columns(since=None, now=now)["t"]
    assert t[0] == now - 7200.0
    assert t[-1] == now
    assert len(t) == 721
    assert all(b - a == 10.0 for a, b in pairwise(t))


def test_samples_older_than_the_span_are_not_returned_even_if_the_ring_has_room() -> None:
    history = SampleHistory(capacity=100, n_gpus=1, span=60.0)
    for t in (0.0, 30.0, 100.0, 110.0):
        history.append(row(t))
    assert history.columns(since=None, now=120.0)["t"] == [100.0, 110.0]


def test_since_returns_only_later_samples() -> None:
    history = SampleHistory(capacity=10, n_gpus=1, span=1000.0)
    for t in (1.0, 2.0, 3.0):
        history.append(row(t))
    assert history.columns(since=2.0, now=3.0)["t"] == [3.0]
    assert history.columns(since=3.0, now=3.0)["t"] == []


def test_columns_are_per_metric_with_null_for_unreported_values() -> None:
    history = SampleHistory(capacity=4, n_gpus=2, span=100.0)
    history.append(
        Row(t=1.0, host=(10.04, 100.4), gpus=[(35.0, 2048.0, None, 300.06), (None,) * 4])
    )
    cols = history.columns(since=None, now=1.0)
    assert cols["cpu"] == [10.0]
    assert cols["mem"] == [100]
    assert cols["gpu"][0] == {"util": [35], "mem": [2048], "temp": [None], "power": [300.1]}
    assert cols["gpu"][1] == {"util": [None], "mem": [None], "temp": [None], "power": [None]}


def test_a_sample_with_the_wrong_number_of_gpus_is_refused() -> None:
    history = SampleHistory(capacity=4, n_gpus=2, span=100.0)
    with pytest.raises(ValueError, match="expected 2 GPUs"):
        history.append(row(1.0, n_gpus=1))
    assert len(history) == 0


def test_samples_out_of_time_order_are_refused() -> None:
    history = SampleHistory(capacity=4, n_gpus=1, span=100.0)
    history.append(row(5.0))
    with pytest.raises(ValueError, match="time order"):
        history.append(row(4.0))
    with pytest.raises(ValueError, match="1 ms apart"):
        history.append(row(5.0004))


def test_a_full_history_of_eight_gpus_is_small() -> None:
    history = SampleHistory(capacity=721, n_gpus=8, span=7200.0)
    assert history.nbytes() < 200 * 1024
