"""The cell's live view: what it costs the job, the kernel and the browser (see
docs/benchmarks.md, "Live view").

1. A 2-rank gloo DDP cell that logs a loss every step, through a real kernel, with the
   live view (``c.LiveView.mode = "widget"``: the kernel reads new points every 2 s and
   sends them as widget messages) and without (``"static"``: one read at the end),
   alternately, ``--runs`` times each: the ratio of median walls.
2. The kernel's CPU for the view over a 10,000-step run (rank 0 logs 10,000 steps of 2
   metrics over about 30 s, plus system metrics every second): the kernel process's
   CPU time with the view minus without, per second of the cell, as % of one core.
3. One chart update in Chromium, 8 GPUs x 720 points (utilization and memory, the host's
   CPU and a metric of 720 steps): the view before issue 18 (every point of 17 traces on
   two rows, ``Plotly.extendTraces`` with one new point each) against live_chart.js
   itself (its ``extend`` message: the points kept, each trace cut to one point per
   pixel of its panel, each panel's uPlot chart given its data and drawn on its canvas),
   alternated in one page, median of 30 each, from the call to plotly's promise and to
   the end of uPlot's (synchronous) draw (the browser's paint after either is not
   counted); and Chromium's CPU time per update of each, paint included, which a loaded
   machine does not inflate.
4. The quickstart's training cell: seconds from its first ``log_metrics`` call to the
   kernel's message that brings that point to the page, ``--runs`` times.

Run: ``.venv/bin/python bench/bench_live_view.py [--runs 3]`` (``--chromium-only``: part
3, ``--first-point-only``: part 4).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for  # noqa: E402
from tests.kernel.conftest import Kernel  # noqa: E402

DDP = """%%air_distributed -n 2
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from jupyter_air import log_metrics
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 16)
for step in range(200):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    log_metrics({"train_loss": loss.item()}, step=step)
dist.destroy_process_group()
"""
STEPS = """%%air_distributed -n 1
import os, time
from mlflow import MlflowClient
from mlflow.entities import Metric
client, run = MlflowClient(), os.environ["MLFLOW_RUN_ID"]
start = time.time()
for first in range(0, 10_000, 100):  # 100 steps every 0.3 s: 10,000 steps in about 30 s
    now = int(time.time() * 1000)
    batch = [Metric(k, 1.0 / (s + 1), now, s) for s in range(first, first + 100)
             for k in ("train_loss", "lr")]
    client.log_batch(run, metrics=batch)
    time.sleep(max(0.0, start + 0.3 * (first // 100 + 1) - time.time()))
"""
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
MODE = "from jupyter_air.kernel.live_view import live_view_config\nlive_view_config().mode = {!r}"


def cell(kernel: Kernel, mode: str, code: str) -> tuple[float, float]:
    """(wall seconds, kernel CPU seconds) of one cell with the view in ``mode``."""
    assert kernel.run(MODE.format(mode)).error is None
    process = psutil.Process(kernel.manager.provisioner.pid)  # type: ignore[union-attr]
    cpu = process.cpu_times()
    execution = kernel.run(code, timeout=600)
    assert execution.error is None, execution.traceback
    after = process.cpu_times()
    psutil.wait_procs(process.children(recursive=True), timeout=60)  # supervisor's MLflow
    return execution.seconds, (after.user - cpu.user) + (after.system - cpu.system)


#: One chart update as the view did it before issue 18, the baseline: every point of
#: every trace on one GPU row 1200 px wide, ``Plotly.extendTraces`` with one new point.
OLD_UPDATE = """async ([traces, layout, n]) => {
  const el = document.createElement('div');
  el.style.width = '1200px';
  document.body.append(el);
  await Plotly.newPlot(el, traces, layout);
  const indices = traces.map((_, i) => i);
  return async (k) => {
    const start = performance.now();
    await Plotly.extendTraces(el, {
      x: indices.map(i => [traces[i].xaxis === 'x2' ? traces[i].x[n - 1] + (k + 1) * 1e4 : n + k]),
      y: indices.map(() => [Math.random() * 100])}, indices);
    return performance.now() - start;
  };
}"""
#: The same update through live_chart.js itself: its module with a stand-in for the
#: widget model (and the package's uPlot as its library model), the kernel's ``add``
#: message of the whole history, then ``extend`` messages of one point a trace; timed
#: from the message to the end of the draw.
NEW_UPDATE = """async ([esm, lib, add, layout, n]) => {
  const url = URL.createObjectURL(new Blob([esm], {type: 'text/javascript'}));
  const widget = (await import(url)).default;
  const handlers = {};
  const state = {chart_id: 'bench', chart_layout: layout, library: 'IPY_MODEL_lib'};
  const library = {get: (k) => ({version: 'bench', ...lib})[k]};
  const model = {get: (k) => state[k], on: (e, f) => { handlers[e] = f; }, send: () => {},
                 widget_manager: {get_model: async () => library}};
  widget.initialize({model});
  const el = document.createElement('div');
  el.style.width = '1200px';
  document.body.append(el);
  await widget.render({model, el});
  await handlers['msg:custom']({...add, revision: 1});
  const indices = add.traces.map((_, i) => i);
  let revision = 1;
  return async (k) => {
    const start = performance.now();
    await handlers['msg:custom']({type: 'extend', indices, revision: ++revision,
      x: add.traces.map(t => [t.x[n - 1] + (k + 1) * (t.meta.metric ? 1 : 10000)]),
      y: indices.map(() => [Math.random() * 100])});
    return performance.now() - start;
  };
}"""
TIME_BOTH = """async () => {
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const times = {old: [], new: []};
  for (let k = 0; k < 30; k++) {
    // Each from an idle page (two frames: the last update painted), in turn first.
    for (const which of k % 2 ? ['old', 'new'] : ['new', 'old']) {
      await frame();
      await frame();
      times[which].push(await window.updates[which](k));
    }
  }
  const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
  return {old: median(times.old), new: median(times.new)};
}"""


#: ``n`` updates of one kind, each from an idle page, as in TIME_BOTH.
TIME_ONE = """async ([which, n, from]) => {
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  for (let k = from; k < from + n; k++) {
    await frame();
    await frame();
    await window.updates[which](k);
  }
}"""


def chromium_cpu() -> float:
    """CPU seconds (user + system) of every Chromium process this script started."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            if "chrom" in child.name():
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def cpu_per_update(page: Any, n: int = 30, blocks: int = 2) -> dict[str, float]:
    """Chromium's CPU milliseconds per update (all its processes: script, layout and
    paint, less two idle frames), each kind in blocks of ``n`` alternated: unlike a wall
    time, it does not grow with other processes waiting for the same cores, so it stands
    for an idle machine's time (above the timed call: paint is counted too)."""
    page.evaluate("() => { window.updates.idle = async () => 0; }")
    cpu: dict[str, float] = {"old": 0.0, "new": 0.0, "idle": 0.0}
    for block in range(blocks):
        for which in ("old", "new", "idle") if block % 2 else ("idle", "new", "old"):
            before = chromium_cpu()
            page.evaluate(TIME_ONE, [which, n, 1000 + block * n])
            cpu[which] += chromium_cpu() - before
    per_update = {k: v * 1000 / (n * blocks) for k, v in cpu.items()}
    # Less what two idle frames cost: the update's own script, layout and paint.
    return {f"{k}_cpu_ms": round(per_update[k] - per_update["idle"], 1) for k in ("old", "new")}


def history(gpus: int = 8, samples: int = 720) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kernel's ``add`` message and layout for ``gpus`` GPUs' utilization and memory,
    ``samples`` samples 10 s apart, the host's CPU and a metric of as many steps."""
    import random

    from jupyter_air.kernel.live_view import RunChart
    from jupyter_air.tracking.metric_feed import Point

    start = 1_700_000_000_000
    points = [Point("train_loss", i, 1 / (i + 1), start + i * 10_000) for i in range(samples)]
    for i in range(samples):
        points.append(Point("system/cpu_utilization_percentage", i, 50.0, start + i * 10_000))
        for gpu in range(gpus):
            for what in ("utilization", "memory_usage"):
                key = f"system/gpu_{gpu}_{what}_percentage"
                points.append(Point(key, i, random.uniform(0, 100), start + i * 10_000))
    chart = RunChart()
    update = chart.add(1, points, None)
    return {"type": "add", "traces": [t.plotly() for t in update.added]}, chart.live_layout()


def old_figure(add: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The same traces in the layout the view had before: metrics by step above, every
    system trace on one row below."""
    traces = [
        {**t, "xaxis": "x" if t["meta"]["metric"] else "x2",
         "yaxis": "y" if t["meta"]["metric"] else "y2", "mode": "lines"}
        for t in add["traces"]
    ]  # fmt: skip
    layout = {
        "height": 460, "yaxis": {"domain": [0.5, 1]},
        "xaxis2": {"type": "date", "anchor": "y2"},
        "yaxis2": {"domain": [0, 0.28], "range": [0, 105]},
    }  # fmt: skip
    return traces, layout


def chromium_update(samples: int = 720) -> dict[str, float]:
    import plotly
    from playwright.sync_api import sync_playwright

    from jupyter_air.kernel.live_view import _chart_library
    from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    esm = (ROOT / "jupyter_air" / "kernel" / "live_chart.js").read_text()
    uplot = _chart_library()
    lib = {"source": uplot.source, "css": uplot.css}
    add, layout = history(samples=samples)
    traces, old_layout = old_figure(add)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_content("<html><body></body></html>")
        page.add_script_tag(path=str(plotly_js))
        page.evaluate(
            f"async (a) => {{ window.updates = {{old: await ({OLD_UPDATE})(a[0]),"
            f" new: await ({NEW_UPDATE})(a[1])}}; }}",
            [[traces, old_layout, samples], [esm, lib, add, layout, samples]],
        )
        result: dict[str, float] = page.evaluate(TIME_BOTH)
        result.update(cpu_per_update(page))
        drawn = page.evaluate(
            "() => Math.max(...[...document.querySelectorAll('.jp-air-LiveChart-panel')]"
            ".flatMap(p => p.uplot.data.slice(1).map(y => y.filter(v => v != null).length)))"
        )
        browser.close()
    return {**result, "new_points_per_trace_drawn": drawn}


def first_point(kernel: Kernel, air_home: Path, runs: int) -> list[float]:
    """Seconds from the quickstart's first ``log_metrics`` call (the MLflow timestamp of
    ``train_loss`` at step 0) to the kernel's message that brings that point to the page
    (its header's date), with the live view on, ``runs`` times."""
    import nbformat
    from dateutil.parser import isoparse
    from mlflow import MlflowClient

    from jupyter_air.jobs.store import JobStore

    cells = [c.source for c in nbformat.read(QUICKSTART, as_version=4).cells]
    assert kernel.run(MODE.format("widget")).error is None
    assert kernel.run(cells[3]).error is None  # the model and the data
    out = []
    for _ in range(runs):
        msg_id = kernel.start(cells[5])
        sent = None
        while True:
            msg = kernel.client.get_iopub_msg(timeout=600)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            data = msg["content"].get("data", {})
            custom = data.get("content", {}) if data.get("method") == "custom" else {}
            names = [t["name"] for t in custom.get("traces", [])]
            if sent is None and "train_loss" in names:
                sent = isoparse(str(msg["header"]["date"])).timestamp()
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        assert sent is not None, "no train_loss point reached the page"
        store = JobStore(air_home)
        job = max(store.jobs(), key=lambda j: j.id)
        run_id = store.attempts(job.id)[0].run_id or ""
        history = MlflowClient(job.workload.tracking_uri).get_metric_history(run_id, "train_loss")
        (step0,) = [m for m in history if m.step == 0]
        out.append(round(sent - step0.timestamp / 1000, 2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chromium-only", action="store_true", help="only part 3")
    parser.add_argument("--first-point-only", action="store_true", help="only part 4")
    args = parser.parse_args()
    if args.chromium_only:
        print(json.dumps(chromium_update(), indent=2))
        return
    work = Path(tempfile.mkdtemp(prefix="air-bench-live-"))
    scenario = Scenario(gpus=[FakeGpu(util=[30, 60, 90]), FakeGpu(util=[20, 50])])
    env = {
        **os.environ,
        **env_for(build_library(), scenario.write(work / "scenario.txt")),
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "AIR_SYSTEM_METRICS_INTERVAL": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    kernel = Kernel(env, cwd=work)
    results: dict[str, Any] = {}
    try:
        assert kernel.run("%load_ext jupyter_air\nimport mlflow").error is None
        if args.first_point_only:
            first = first_point(kernel, work / "air", args.runs)
            print(json.dumps({"first_point_s": first}, indent=2))
            return
        cell(kernel, "static", "%%air_distributed -n 1\n1")  # the store and experiment
        walls: dict[str, list[float]] = {"widget": [], "static": []}
        for _ in range(args.runs):
            for mode in ("widget", "static"):
                walls[mode].append(cell(kernel, mode, DDP)[0])
        med = {k: statistics.median(v) for k, v in walls.items()}
        results["ddp_wall_s"] = {k: [round(x, 2) for x in v] for k, v in walls.items()}
        results["ddp_ratio_live_vs_static"] = round(med["widget"] / med["static"], 3)
        (live_wall, live_cpu), (static_wall, static_cpu) = (
            cell(kernel, "widget", STEPS),
            cell(kernel, "static", STEPS),
        )
        results["steps_10k"] = {
            "wall_s": {"widget": round(live_wall, 1), "static": round(static_wall, 1)},
            "kernel_cpu_s": {"widget": round(live_cpu, 2), "static": round(static_cpu, 2)},
            "view_cpu_percent_of_one_core": round((live_cpu - static_cpu) / live_wall * 100, 2),
        }
        results["first_point_s"] = first_point(kernel, work / "air", args.runs)
    finally:
        kernel.shutdown()
    update = chromium_update()
    results["chromium_update_ms_8gpus_x_720"] = {k: round(v, 1) for k, v in update.items()}
    results["chromium_ratio_new_vs_old"] = round(update["new"] / update["old"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
