"""The live chart widget's messages, in process (no kernel, no page): numbered points,
and the whole history to a page that asks for it, as a reloaded page does."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from jupyter_air.kernel.live_view import RunChart, chart_widget
from jupyter_air.tracking.metric_feed import Point

NOW = int(time.time() * 1000)


def loss(*steps: int) -> list[Point]:
    return [Point("loss", s, 1.0 / (s + 1), NOW + s) for s in steps]


@pytest.fixture
def widget(monkeypatch: pytest.MonkeyPatch) -> Any:
    widget = chart_widget(RunChart())
    widget.sent = []
    monkeypatch.setattr(widget, "send", widget.sent.append)
    yield widget
    widget.close()


def test_points_go_out_once_in_numbered_messages(widget: Any) -> None:
    widget.follow(lambda: widget.chart.add(1, loss(0, 1), None))
    widget.follow(lambda: widget.chart.add(1, loss(2), None))
    widget.follow(lambda: widget.chart.add(1, [], None))  # nothing new: no message
    assert [(m["type"], m["revision"]) for m in widget.sent] == [("add", 1), ("extend", 2)]
    assert widget.sent[1]["x"] == [[2.0]]
    (row,) = widget.chart_layout["rows"]
    assert row["panels"][0]["x"] == [-0.5, 2.5], "the layout follows"


def test_a_page_that_asks_gets_every_point_up_to_the_last_message(widget: Any) -> None:
    widget.follow(lambda: widget.chart.add(1, loss(0, 1), None))
    widget.follow(lambda: widget.chart.add(1, loss(2, 3), None))
    widget._handle_custom_msg({"type": "history"}, [])
    history = widget.sent[-1]
    assert history["type"] == "history"
    assert history["revision"] == 2, "the page keeps what follows message 2"
    (trace,) = history["traces"]
    assert trace["x"] == [0.0, 1.0, 2.0, 3.0]
    widget._handle_custom_msg({"type": "something else"}, [])
    assert widget.sent[-1] is history, "nothing else is answered"


def test_a_history_is_never_sent_between_a_read_and_its_message(widget: Any) -> None:
    """The cell's thread reads and sends while a subshell's thread answers a page: the
    history holds exactly the points of the messages up to its revision."""
    reading, answered = threading.Event(), threading.Event()

    def slow_read() -> Any:
        update = widget.chart.add(1, loss(0, 1, 2), None)
        reading.set()
        answered.wait(0.5)  # the answer must wait for this read's message
        return update

    asker = threading.Thread(
        target=lambda: (reading.wait(5), widget._handle_custom_msg({"type": "history"}, []))
    )
    asker.start()
    widget.follow(slow_read)
    answered.set()
    asker.join(5)
    add, history = widget.sent
    assert add["revision"] == 1
    assert history["revision"] == 1
    assert history["traces"][0]["x"] == add["traces"][0]["x"]
