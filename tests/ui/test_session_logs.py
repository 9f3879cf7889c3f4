"""The "Job logs" view of a warm session, in headless chromium against a real lab: a cell
picker over the session's cells, and each line's cell.

The session is made in the job store as a kernel and its supervisor leave one (a session
job, its ranks' logs and its cells file), not by a kernel: the kernel side has tests of
its own, and the view reads only the store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.sessions import cells as session_cells
from jupyter_air.jobs.sessions.cells import CellRecord
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs.capture import RankLog
from tests.factories import job_spec
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import run_from_palette
from tests.ui.test_job_logs import (  # that file's lab, on an AIR_HOME of this module
    ROWS,
    click_link,
    logs_lab,  # noqa: F401
    open_page,
    rows,
    select,
)

#: (seconds after the session started, rank, text): two cells, and a line between them.
LINES = [
    (1.0, 0, "x = model(batch): rank 0 of 2"),
    (1.2, 1, "x = model(batch): rank 1 of 2"),
    (3.0, 0, "between cells"),
    (5.0, 0, "epoch 0 loss=0.4321 rank 0"),
    (5.1, 1, "epoch 0 loss=0.4320 rank 1"),
]
#: (cell, notebook cell id, start, end), in seconds after the session started.
CELLS = [(1, "cell-a", 0.5, 2.0), (2, "cell-b", 4.5, 6.0)]


@pytest.fixture(scope="module")
def session(air_home: Path) -> str:
    """An ended two-rank session with two cells."""
    store = JobStore(air_home)
    job = store.create(job_spec("session", nproc_per_node=2, command=["python"]))
    store.start_attempt(job.id, 1, None)
    t0 = time.time() - 60
    logs = store.attempt_dir(job.id, 1) / "logs" / "node_0"
    for rank in (0, 1):
        log = RankLog(logs / f"rank_{rank}.log")
        for at, _, text in (line for line in LINES if line[1] == rank):
            log.write("OI", text, ts=t0 + at)
        log.close()
    files = JobDir(store.job_dir(job.id))
    for cell, cell_id, start, end in CELLS:
        record = CellRecord(cell, f"run{cell}", cell_id, t0 + start, t0 + end, "SUCCEEDED")
        session_cells.record(files, record)
    store.end_attempt(job.id, 1, "SUCCEEDED", [0, 0])
    store.update(job.id, status="SUCCEEDED", ended=t0 + 7)
    return job.id


@pytest.fixture(scope="module")
def page(
    browser: Any,
    logs_lab: Lab,  # noqa: F811 (the fixture, imported)
    session: str,
) -> Iterator[Any]:
    page = open_page(browser, logs_lab, f"&air-job={session}")
    yield page
    page.context.close()


def shown(page: Any, count: int) -> list[tuple[str, str]]:
    """(cell, text) of the rows top to bottom, once ``count`` rows are rendered."""
    page.wait_for_function(
        f"document.querySelectorAll('{ROWS}').length === {count}", timeout=30_000
    )
    return [(row["cell"], row["text"]) for row in rows(page)]


def test_one_cell_of_a_session_is_picked_and_a_link_preselects_another(
    page: Any, session: str, artifacts: Path
) -> None:
    assert shown(page, 5) == [
        ("1", "x = model(batch): rank 0 of 2"),
        ("1", "x = model(batch): rank 1 of 2"),
        ("", "between cells"),
        ("2", "epoch 0 loss=0.4321 rank 0"),
        ("2", "epoch 0 loss=0.4320 rank 1"),
    ]
    badges = page.eval_on_selector_all(
        f"{ROWS} .jp-air-JobLogs-cellBadge", "nodes => nodes.map(n => n.textContent)"
    )
    assert sorted(badges) == ["c1", "c1", "c2", "c2", "·"]
    page.screenshot(path=str(artifacts / "session-logs-all.png"))
    options = page.eval_on_selector_all(
        ".jp-air-JobLogs-cell option", "nodes => nodes.map(n => n.textContent)"
    )
    assert options[0] == "All cells"
    assert [o.split(" · ")[:2] for o in options[1:]] == [
        ["Cell 1", "SUCCEEDED"],
        ["Cell 2", "SUCCEEDED"],
    ]

    select(page, "cell", "1")
    assert shown(page, 2) == [
        ("1", "x = model(batch): rank 0 of 2"),
        ("1", "x = model(batch): rank 1 of 2"),
    ]
    page.wait_for_selector(
        ".jp-air-JobLogs-message:has-text('All lines of cell 1 loaded: it has ended.')"
    )
    page.screenshot(path=str(artifacts / "session-logs-cell.png"))

    click_link(page, f"/lab?air-job={session}&air-cell=2")  # as a session cell's link
    assert shown(page, 2) == [
        ("2", "epoch 0 loss=0.4321 rank 0"),
        ("2", "epoch 0 loss=0.4320 rank 1"),
    ]
    assert page.input_value(".jp-air-JobLogs-cell select") == "2"


#: The toolbar's box and its items' (those with a size: not the spacer).
TOOLBAR_LAYOUT = """bar => {
    const box = bar.getBoundingClientRect();
    const items = [...bar.children]
        .map(item => item.getBoundingClientRect())
        .filter(r => r.width > 0 && r.height > 0);
    return {
        right: box.right,
        middles: items.map(r => r.top + r.height / 2),
        rights: items.map(r => r.right),
    };
}"""


def toolbar_layout(page: Any) -> dict[str, Any]:
    layout: dict[str, Any] = page.eval_on_selector(".jp-air-JobLogs-toolbar", TOOLBAR_LAYOUT)
    return layout


def test_the_toolbar_stays_one_line_with_the_cell_picker(page: Any, artifacts: Path) -> None:
    """At a common width (a 1400 px window, the file browser open beside the view) the
    session's toolbar keeps one line: its buttons turn to icons (their tooltips name
    them) and its pickers shrink (a label cut with an ellipsis is whole in its tooltip)
    before anything wraps. Narrower, it may wrap, but nothing overflows."""
    page.wait_for_selector(".jp-air-JobLogs-cell select")
    assert page.input_value(".jp-air-JobLogs-cell select") == "2"  # the longest label shown
    layout = toolbar_layout(page)
    assert max(layout["middles"]) - min(layout["middles"]) <= 2, layout  # one line
    assert max(layout["rights"]) <= layout["right"] + 0.5, layout
    # a label cut with an ellipsis is whole in the picker's tooltip
    title = page.get_attribute(".jp-air-JobLogs-cell select", "title") or ""
    assert title.startswith("Session cell: Cell 2 · SUCCEEDED · "), title
    page.locator(".jp-air-JobLogs-header").screenshot(
        path=str(artifacts / "session-logs-toolbar.png")
    )
    page.set_viewport_size({"width": 900, "height": 900})
    try:
        page.wait_for_function(
            "() => document.querySelector('.jp-air-JobLogs-toolbar')"
            ".getBoundingClientRect().right < 900",
            timeout=10_000,
        )
        layout = toolbar_layout(page)
        assert max(layout["rights"]) <= layout["right"] + 0.5, layout
        page.screenshot(path=str(artifacts / "session-logs-narrow.png"))
    finally:
        page.set_viewport_size({"width": 1400, "height": 900})


def test_the_jobs_picker_names_a_session_as_such(page: Any, session: str) -> None:
    run_from_palette(page, "Open job logs", "jupyter-air:open-job-logs")
    page.wait_for_selector(f'.jp-air-JobPicker-item[data-job-id="{session}"]')
    label = page.text_content(f'.jp-air-JobPicker-item[data-job-id="{session}"]')
    assert label == f"{session} · SUCCEEDED · session"
    page.keyboard.press("Escape")
