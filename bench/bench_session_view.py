"""What the live view costs a trivial warm session cell (see docs/benchmarks.md, "Warm
sessions: the live view in session cells").

In one kernel, on one 2-rank session, alternately, medians of ``--runs``: ``x = 1`` as a
session cell with the live view as shipped (static outputs: a kernel not started by a
Jupyter server), the same with the widget view (``c.LiveView.mode = 'widget'``, what
JupyterLab gets), the same without the view's run parts (a ``JobView`` given no tracking
URI: no chart, no summary: what session cells showed before), and a bare kernel cell
``pass`` (the floor). Every time is from the execute request to the kernel's idle status,
each cell half a second after the one before (a cell run at once after another waits for
the MLflow work of the one before: that is the tail's cost, not the view's).

Run: ``.venv/bin/python bench/bench_session_view.py [--runs 15]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kernel.conftest import Kernel  # noqa: E402

CELL = "%%air_distributed --session\nx = 1\n"
MODE = "from jupyter_air.kernel.live_view import live_view_config\nlive_view_config().mode = {!r}"
#: The view as it was before session cells had a chart: a JobView with no tracking URI.
NO_CHART = """\
import jupyter_air.kernel.warm_session as _w
from jupyter_air.kernel.display import JobView as _JobView
_w.JobView = lambda *a, tracking_uri=None, **k: _JobView(*a, **k)
"""
WITH_CHART = "_w.JobView = _JobView"
#: Seconds between two cells.
PAUSE = 0.5


def timed(kernel: Kernel, code: str) -> float:
    """Seconds to idle, after a pause: the cell before has ended its run and made the
    next one (on the session's tail thread), as between a user's cells."""
    time.sleep(PAUSE)
    start = time.perf_counter()
    done = kernel.run(code)
    seconds = time.perf_counter() - start
    assert done.error is None, done.traceback
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-session-view-"))
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "CUDA_VISIBLE_DEVICES": "",
    }
    kernel = Kernel(env, cwd=work)
    times: dict[str, list[float]] = {"static": [], "widget": [], "no_chart": [], "kernel": []}
    try:
        assert kernel.run("%load_ext jupyter_air").error is None
        started = kernel.run("%air_session start -n 2 --oversubscribe --idle-timeout 0")
        assert started.error is None, started.traceback
        assert kernel.run(NO_CHART).error is None
        for mode in ("widget", "static"):  # warm-up: imports, plotly.js's model once
            timed(kernel, MODE.format(mode))
            timed(kernel, CELL)
        for _ in range(args.runs):
            timed(kernel, WITH_CHART)
            times["static"].append(timed(kernel, CELL))
            timed(kernel, MODE.format("widget"))
            times["widget"].append(timed(kernel, CELL))
            timed(kernel, MODE.format("static") + "\n" + NO_CHART)
            times["no_chart"].append(timed(kernel, CELL))
            times["kernel"].append(timed(kernel, "pass"))
        kernel.run("%air_session stop")
    finally:
        kernel.shutdown()
    medians = {k: statistics.median(v) for k, v in times.items()}
    floor = medians["kernel"]
    print(
        json.dumps(
            {
                "runs": args.runs,
                "median_ms": {k: round(v * 1000, 1) for k, v in medians.items()},
                "over_kernel_ms": {k: round((v - floor) * 1000, 1) for k, v in medians.items()},
                "static_vs_no_chart": round(medians["static"] / medians["no_chart"], 2),
                "widget_vs_no_chart": round(medians["widget"] / medians["no_chart"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
