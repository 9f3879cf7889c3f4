"""The sweep's display in its cell, drawn from a real store (fast: Optuna's trials told
by hand, no job): the line, the table with the best marked, the same as text, and the
chart of the objective by trial with the best so far."""

from __future__ import annotations

import re
from pathlib import Path

from jupyter_air.kernel.sweep_view import BEST, bundle
from tests.sweeps.told import lr_sweep


def test_the_table_marks_the_best_and_the_chart_steps_down_to_it(tmp_path: Path) -> None:
    store, sweep = lr_sweep(tmp_path, [(0.1, 0.9), (0.01, 0.3), (0.5, 0.7), (0.02, None)])

    shown = bundle(store.get(sweep.id), store.trials(sweep.id), 4)

    text = shown["text/plain"].splitlines()
    assert text[0].startswith(f"sweep {sweep.id} RUNNING: 3 of 4 trials ended, 1 running")
    assert "best val_loss = 0.3 (trial 1)" in text[0]
    assert text[1].split() == ["trial", "state", "lr", "val_loss", "job"]
    assert [row.split() for row in text[2:]] == [
        ["0", "COMPLETE", "0.1", "0.9"],
        ["1", "COMPLETE", "0.01", "0.3", BEST],
        ["2", "COMPLETE", "0.5", "0.7"],
        ["3", "RUNNING", "0.02"],
    ]
    page = shown["text/html"]
    assert page.count("<tr") == 5
    assert '<tr style="font-weight: bold"><td>1</td>' in page
    (steps,) = re.findall(r'<polyline points="([^"]+)"', page)
    heights = [float(p.split(",")[1]) for p in steps.split()]
    assert len(heights) == 3  # one per completed trial
    assert heights[0] < heights[1] == heights[2], "the best so far falls to 0.3, then stays"
    assert page.count("<circle") == 3
