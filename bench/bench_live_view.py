"""The cell's live view: what it costs the job, the kernel and the browser (see
docs/benchmarks.md, "Live view").

1. A 2-rank gloo DDP cell that logs a loss every step, through a real kernel, with the
   live view (``c.LiveView.mode = "widget"``: the kernel reads new points every 2 s and
   sends them as widget messages) and without (``"static"``: one read at the end),
   alternately, ``--runs`` times each: the ratio of median walls.
2. The kernel's CPU for the view over a 10,000-step run (rank 0 logs 10,000 steps of 2
   metrics over about 30 s, plus system metrics every second): the kernel process's
   CPU time with the view minus without, per second of the cell, as % of one core.
3. One chart update in Chromium, 8 GPUs x 720 points (16 traces, plus a metric):
   ``Plotly.extendTraces`` with one new point per trace (what the view sends) against
   ``Plotly.react`` with the whole data (what a figure widget's full resend redraws),
   median of 30 each, in the same page: from the call to plotly's promise (the SVG
   redrawn; the browser's paint after it is not counted).

Run: ``.venv/bin/python bench/bench_live_view.py [--runs 3]``.
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
MODE = "from jupyter_air.kernel.live_view import live_view_config\nlive_view_config().mode = {!r}"


def cell(kernel: Kernel, mode: str, code: str) -> tuple[float, float]:
    """(wall seconds, kernel CPU seconds) of one cell with the view in ``mode``."""
    assert kernel.run(MODE.format(mode)).error is None
    process = psutil.Process(kernel.manager.provisioner.pid)  # type: ignore[attr-defined]
    cpu = process.cpu_times()
    execution = kernel.run(code, timeout=600)
    assert execution.error is None, execution.traceback
    after = process.cpu_times()
    psutil.wait_procs(process.children(recursive=True), timeout=60)  # supervisor's MLflow
    return execution.seconds, (after.user - cpu.user) + (after.system - cpu.system)


def chromium_update() -> dict[str, float]:
    import plotly
    from playwright.sync_api import sync_playwright

    from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    script = """async () => {
      const el = document.createElement('div');
      el.style.width = '1200px';
      document.body.append(el);
      const t0 = Date.now() - 720 * 10000;
      const traces = [];
      for (let g = 0; g < 8; g++) for (const what of ['util', 'memory']) {
        traces.push({x: Array.from({length: 720}, (_, i) => t0 + i * 10000),
                     y: Array.from({length: 720}, () => Math.random() * 100),
                     name: `GPU ${g} ${what} %`, xaxis: 'x2', yaxis: 'y2'});
      }
      traces.push({x: Array.from({length: 720}, (_, i) => i), y: Array.from({length: 720},
                   (_, i) => 1 / (i + 1)), name: 'train_loss'});
      const layout = {height: 460, yaxis: {domain: [0.5, 1]}, xaxis2: {type: 'date',
                      anchor: 'y2'}, yaxis2: {domain: [0, 0.28], range: [0, 105]}};
      await Plotly.newPlot(el, traces, layout);
      const frame = () => new Promise(r => requestAnimationFrame(() => r()));
      const time = async (update) => {
        const out = [];
        for (let k = 0; k < 30; k++) {
          await frame();  // start from an idle page
          const start = performance.now();
          await update(k);  // plotly's whole update: data, axes, the SVG redrawn
          out.push(performance.now() - start);
        }
        out.sort((a, b) => a - b);
        return out[15];
      };
      const indices = traces.map((_, i) => i);
      const extend = await time(k => Plotly.extendTraces(el, {
        x: indices.map(i => [i < 16 ? t0 + (720 + k) * 10000 : 720 + k]),
        y: indices.map(() => [Math.random() * 100])}, indices));
      const react = await time(k => {
        for (const t of el.data) { t.x = t.x.slice(); t.y = t.y.slice(); }
        return Plotly.react(el, el.data.map(t => ({...t})), el.layout);
      });
      return {extend, react};
    }"""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_content("<html><body></body></html>")
        page.add_script_tag(path=str(plotly_js))
        result: dict[str, float] = page.evaluate(script)
        browser.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chromium-only", action="store_true", help="only part 3")
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
    finally:
        kernel.shutdown()
    update = chromium_update()
    results["chromium_update_ms_8gpus_x_720"] = {k: round(v, 1) for k, v in update.items()}
    results["chromium_ratio_extend_vs_react"] = round(update["extend"] / update["react"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
