"""Runs panel benchmarks (issue 12; see docs/benchmarks.md, "Runs").

One MLflow sqlite store with an experiment of 1,000 runs, each with 20 metrics (one
value each) and 5 params, registered as a job's store would be; a job of notebook
``bench.ipynb`` names that experiment.

1. The route: ``GET jupyter-air/runs?max_results=1000`` of a real Jupyter server vs
   ``MlflowClient.search_runs`` of the same page in this process, alternating, medians.
   The route does what ``search_runs`` does, plus the visibility filter, nesting, links
   and JSON over HTTP: the ratio is their cost.
2. The panel's first render of that page in Chromium (JupyterLab with the built
   extension): from the end of the ``runs`` response (Resource Timing) to the 1,000th
   row in the DOM (a MutationObserver's clock), and from the click on the panel's tab
   to the rows shown (everything: the notebook route, the experiments, the page).

Run: ``.venv/bin/python bench/bench_runs.py [--rounds 7] [--no-browser]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS, METRICS, PARAMS = 1000, 20, 5


def make_store(work: Path) -> tuple[str, str]:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    uri = f"sqlite:///{work}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("/Users/bench/bench")
    now = int(time.time() * 1000)
    for i in range(RUNS):
        run = client.create_run(
            experiment,
            start_time=now + i,
            run_name=f"run-{i}",
            tags={"air.job_id": "20261130-000000-abcdef", "air.attempt": "1"},
        )
        metrics = [Metric(f"m{k}", float(i * k), now, 0) for k in range(METRICS)]
        params = [Param(f"p{k}", str(i % (k + 2))) for k in range(PARAMS)]
        client.log_batch(run.info.run_id, metrics=metrics, params=params)
        client.set_terminated(run.info.run_id, "FINISHED", end_time=now + i + 1000)
    return uri, str(experiment)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(work: Path, app: str) -> tuple[subprocess.Popen[bytes], str, str]:
    port, token = free_port(), secrets.token_hex(8)
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
    }
    server = subprocess.Popen(
        [
            sys.executable, "-m", app, "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work / 'root'}",
            "--ServerApp.jpserver_extensions=jupyter_air=True", "--GpuSampler.interval=3600",
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    settings = work / "settings" / "jupyter-air" / "runs.jupyterlab-settings"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"pageSize": RUNS}))  # the whole page at once
    news = (
        work
        / "settings"
        / "@jupyterlab"
        / "apputils-extension"
        / "notification.jupyterlab-settings"
    )
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            get(url + "api/status", token)
            return server, url, token
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"{app} did not start") from None
            time.sleep(0.3)


def get(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body: bytes = response.read()
    return body


def bench_route(url: str, token: str, uri: str, experiment: str, rounds: int) -> dict[str, float]:
    from mlflow import MlflowClient

    from jupyter_air.tracking.stores import store_key

    route = f"{url}jupyter-air/runs?store={store_key(uri)}&experiment={experiment}&max_results=1000"
    client = MlflowClient(uri)
    page = json.loads(get(route, token))  # warm both: MLflow's engine, the server's imports
    assert len(page["runs"]) == RUNS
    assert len(page["metrics"]) == METRICS
    assert len(client.search_runs([experiment], max_results=1000)) == RUNS
    route_s, search_s = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        body = get(route, token)
        route_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.search_runs([experiment], max_results=1000, order_by=["attributes.start_time DESC"])
        search_s.append(time.perf_counter() - start)
    route_ms = statistics.median(route_s) * 1e3
    search_ms = statistics.median(search_s) * 1e3
    return {
        "route_ms": route_ms,
        "search_runs_ms": search_ms,
        "ratio": route_ms / search_ms,
        "route_bytes": len(body),
    }


# In the page: when the runs response ended, and when the 1,000th row appeared.
WATCH = (
    """() => {
  window.__rowsAt = null;
  new MutationObserver((_, observer) => {
    if (document.querySelectorAll('.jp-air-RunsPanel-run').length >= RUNS) {
      window.__rowsAt = performance.now();
      observer.disconnect();
    }
  }).observe(document.body, { childList: true, subtree: true });
}"""
).replace("RUNS", str(RUNS))
TIMES = """() => {
  const runs = performance.getEntriesByType('resource')
    .filter(e => /jupyter-air\\/runs\\?/.test(e.name));
  return { responseEnd: runs[runs.length - 1].responseEnd, rowsAt: window.__rowsAt };
}"""


def bench_panel(url: str, token: str, rounds: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

    tab = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-runs"]'
    render, total = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for _ in range(rounds):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}lab/tree/bench.ipynb?token={token}&reset")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.wait_for_selector(tab, timeout=60_000)
            page.evaluate(WATCH)
            clicked = page.evaluate("() => performance.now()")
            page.click(tab)
            page.wait_for_function("() => window.__rowsAt !== null", timeout=60_000)
            times = page.evaluate(TIMES)
            render.append(times["rowsAt"] - times["responseEnd"])
            total.append(times["rowsAt"] - clicked)
            page.close()
        browser.close()
    return {
        "first_render_ms": statistics.median(render),
        "first_render_max_ms": max(render),
        "click_to_rows_ms": statistics.median(total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="air-bench-runs-"))
    (work / "root").mkdir()
    os.environ["AIR_HOME"] = str(work / "air")
    from jupyter_air.jobs.spec import JobKind, job_spec
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.tracking.stores import register_store

    started = time.perf_counter()
    uri, experiment = make_store(work)
    print(f"store of {RUNS} runs made in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    register_store(uri)
    notebook = work / "root" / "bench.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    JobStore().create(
        job_spec(JobKind.PYTHON, tags={"air.notebook": str(notebook)}).with_tracking(
            tracking_uri=uri, experiment_id=experiment
        ),
        "20261130-000000-abcdef",
    )
    results: dict[str, Any] = {}
    server, url, token = start_server(work, "jupyterlab")
    try:
        results["route"] = bench_route(url, token, uri, experiment, args.rounds)
        print(json.dumps(results["route"]), file=sys.stderr)
        if not args.no_browser:
            results["panel"] = bench_panel(url, token, args.rounds)
    finally:
        server.terminate()
        server.wait(15)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
