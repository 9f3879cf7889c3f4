"""The quickstart's training cell as a user sees it: its first seconds and its length
(issue 28; see docs/benchmarks.md).

The cell from ``notebooks/quickstart.ipynb`` runs in a real kernel with the live view on,
``--runs`` times on a quiet machine and as many with two busy processes beside it (one
per core of the 2-core machine it is meant for), alternating. From the cell's start, as
the page would get them (each kernel message's header date): the job's header, the
first status saying it runs, the first point of ``train_loss`` on the chart, the end;
and the gap between the two ranks' first steps (from their log lines).

Run: ``.venv/bin/python bench/bench_quickstart.py [--runs 3]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_nvml import Scenario, build_library, env_for  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402

QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
#: The live view as a page that draws widgets has it (a bare kernel client draws none).
WIDGETS = """\
from jupyter_air.kernel.live_view import live_view_config
live_view_config().mode = "widget"
"""


def burn() -> None:
    while True:
        pass


def timed_cell(kernel: Kernel, source: str) -> dict[str, float | None]:
    """Seconds from the cell's execute request to each first sight, by message dates."""
    from dateutil.parser import isoparse

    msg_id = kernel.start(source)
    start: float | None = None
    seen: dict[str, float | None] = {"header": None, "running": None, "first_point": None}
    while True:
        msg = kernel.client.get_iopub_msg(timeout=600)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        at = isoparse(str(msg["header"]["date"])).timestamp()
        content = msg["content"]
        if start is None and msg["msg_type"] == "status":
            start = at  # busy: the kernel took the cell
        text = json.dumps(content.get("data", {}))
        if seen["header"] is None and "Job " in text:
            seen["header"] = at
        if seen["running"] is None and "running" in text:
            seen["running"] = at
        if seen["first_point"] is None and "train_loss" in text:
            seen["first_point"] = at
        if msg["msg_type"] == "status" and content["execution_state"] == "idle":
            seen["end"] = at
            break
    assert start is not None
    return {k: round(v - start, 2) if v is not None else None for k, v in seen.items()}


def first_steps_gap(air_home: Path) -> float | None:
    """Seconds between the two ranks' ``step 0`` lines in the latest job: rank 1 waits
    for rank 0 at the step's all-reduce, so this is rank 0's delay to its first step."""
    from jupyter_air.job_dir import AttemptDir
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.logs.capture import parse_record

    store = JobStore(air_home)
    job = max(store.jobs(), key=lambda j: j.id)
    firsts = []
    for rank_log in AttemptDir(store.attempt_dir(job.id, 1)).rank_logs():
        for line in rank_log.path.read_text(errors="replace").splitlines():
            record = parse_record(line)
            if record and record[3].startswith("step 0:"):
                firsts.append(record[0])
                break
    return round(abs(firsts[1] - firsts[0]), 2) if len(firsts) == 2 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import nbformat

    cells = [c.source for c in nbformat.read(QUICKSTART, as_version=4).cells]
    work = Path(tempfile.mkdtemp(prefix="air-bench-quickstart-"))
    env = {
        **os.environ,
        **env_for(build_library(), Scenario(gpus=[]).write(work / "scenario.txt")),
        "AIR_HOME": str(work / "air"),
        "CUDA_VISIBLE_DEVICES": "",
    }
    env.pop("MLFLOW_TRACKING_URI", None)  # the user's one store, as after `make demo`
    kernel = Kernel(env, cwd=work)
    results: dict[str, list[dict[str, Any]]] = {"quiet": [], "busy": []}
    try:
        for source in (cells[1], WIDGETS, cells[3]):
            assert kernel.run(source).error is None
        for _ in range(args.runs):
            for load in ("quiet", "busy"):
                burners = []
                if load == "busy":
                    burners = [multiprocessing.Process(target=burn) for _ in range(2)]
                    for p in burners:
                        p.start()
                try:
                    seen = timed_cell(kernel, cells[5])
                finally:
                    for p in burners:
                        p.kill()
                        p.join()
                seen["ranks_first_step_gap"] = first_steps_gap(work / "air")
                results[load].append(seen)
    finally:
        kernel.shutdown()
    summary = {
        load: {
            key: statistics.median(r[key] for r in runs if r[key] is not None)
            for key in runs[0]
            if any(r[key] is not None for r in runs)
        }
        for load, runs in results.items()
    }
    print(json.dumps({"runs": results, "median": summary}, indent=2))


if __name__ == "__main__":
    main()
