"""GPU panel update in Chromium: this front end against the one before the restructure
into models and views (issue 12), side by side (see docs/benchmarks.md).

Each build is served in turn by a fresh ``jupyter lab`` on the fake NVML driver (8 GPUs,
sampled every 20 ms over a 14.4 s window: 720 points per series, as 2 h at 10 s) and
measured with the panel's own Performance API measure of one whole update (merge, DOM,
every visible chart) while it polls every second; the rounds alternate the builds.

The earlier build comes from a git worktree of ``--base`` (default: the commit before
``labextension/src/common/model.ts`` was added), built with ``npm run build:prod`` and put
first on ``JUPYTER_PATH`` so that its server loads it instead of the installed one.

Run: ``.venv/bin/python bench/bench_panel_update.py [--rounds N] [--base REV]``.
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

from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PANEL_TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-gpu"]'
MEASURE = "jupyter-air:gpu-update"
UPDATES = 8  # the first, then 7 polls


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def default_base() -> str:
    added = git("log", "--diff-filter=A", "--format=%H", "--", "labextension/src/common/model.ts")
    return git("rev-parse", f"{added.splitlines()[-1]}^")


def build_old(base: str, work: Path) -> Path:
    """The labextension of ``base``, built in a worktree; returns a JUPYTER_PATH dir."""
    tree = work / "old"
    git("worktree", "add", "--detach", str(tree), base)
    (tree / "node_modules").symlink_to(ROOT / "node_modules")
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    subprocess.run(["npm", "run", "build:prod"], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    data = work / "jupyter-path"
    (data / "labextensions").mkdir(parents=True)
    (data / "labextensions" / "jupyter-air").symlink_to(tree / "jupyter_air" / "labextension")
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(
    browser: Any, label: str, work: Path, fake_nvml: Path, env: dict[str, str]
) -> dict[str, Any]:
    """One lab, one page: the update measures of the panel over ``UPDATES`` polls."""
    run = Path(tempfile.mkdtemp(dir=work, prefix=label))
    scenario = Scenario(gpus=[FakeGpu(util=[i % 100 for i in range(0, 700, 7)]) for _ in range(8)])
    settings = run / "settings"
    quiet = {"fetchNews": "false", "checkForUpdates": False}  # no news toast over the page
    for plugin, values in {
        "@jupyterlab/apputils-extension/notification": quiet,
        "jupyter-air/gpu": {"defaultRange": "2h", "pollInterval": 1},
    }.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(values))
    (run / "root").mkdir()
    port, token = free_port(), secrets.token_hex(16)
    lab_env = {
        **os.environ,
        **env_for(fake_nvml, scenario.write(run / "scenario.txt")),
        "JUPYTER_CONFIG_DIR": str(run / "config"),
        "JUPYTER_RUNTIME_DIR": str(run / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(run / "workspaces"),
        **env,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={run / 'root'}",
         "--GpuSampler.interval=0.02", "--GpuSampler.history=14.4"],
        env=lab_env, stdout=(run / "lab.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(
                    url + "jupyter-air/gpu", headers={"Authorization": f"token {token}"}
                )
                with urllib.request.urlopen(request, timeout=10):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((run / "lab.log").read_text()) from None
                time.sleep(0.3)
        time.sleep(15)  # fill the 14.4 s window
        with urllib.request.urlopen(request, timeout=10) as response:
            points = len(json.load(response)["samples"]["t"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{url}lab?token={token}")
        page.wait_for_selector(PANEL_TAB, timeout=60_000)
        page.click(PANEL_TAB)
        page.wait_for_selector('.jp-air-GpuCard[data-gpu-index="7"]')
        page.wait_for_function(
            f"() => performance.getEntriesByName('{MEASURE}').length >= {UPDATES}",
            timeout=60_000,
        )
        durations = page.evaluate(
            f"() => performance.getEntriesByName('{MEASURE}').map(e => e.duration)"
        )[:UPDATES]
        restructured = page.query_selector(".jp-air-GpuPanel-chrome") is not None
        page.close()
    finally:
        process.terminate()
        process.wait(15)
    return {"points": points, "durations": durations, "restructured": restructured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", default=None, help="the commit of the earlier front end")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    base = args.base or default_base()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            old_path = build_old(base, work)
            fake_nvml = build_library()
            results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
                )
                for _ in range(args.rounds):
                    results["before"].append(
                        measure(browser, "before", work, fake_nvml, {"JUPYTER_PATH": str(old_path)})
                    )
                    results["after"].append(measure(browser, "after", work, fake_nvml, {}))
                browser.close()
        finally:
            git("worktree", "remove", "--force", str(work / "old"))
    assert not any(r["restructured"] for r in results["before"]), "the old build was not loaded"
    assert all(r["restructured"] for r in results["after"]), "the new build was not loaded"
    report: dict[str, Any] = {"base": base}
    for name, runs in results.items():
        later = [d for r in runs for d in r["durations"][1:]]
        report[name] = {
            "points_per_series": [r["points"] for r in runs],
            "first_update_ms": [round(r["durations"][0], 1) for r in runs],
            "later_updates_median_ms": round(statistics.median(later), 1),
            "later_updates_ms": [round(d, 1) for d in later],
        }
    report["after_over_before"] = round(
        report["after"]["later_updates_median_ms"] / report["before"]["later_updates_median_ms"], 2
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
