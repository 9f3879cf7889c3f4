"""The GPU resources panel as a user sees it, in headless chromium against a real lab."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, Scenario, h100_mig_slices
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import on_a_redrawn, run_from_palette
from tests.waits import until

GIB = 1024**3
PANEL_TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-gpu"]'
PANEL = ".jp-air-GpuPanel"


def card(index: int) -> str:
    return f'.jp-air-GpuCard[data-gpu-index="{index}"]'


def value(index: int, metric: str) -> str:
    return f'{card(index)} [data-metric="{metric}"] .jp-air-value'


def two_gpus(util: int = 35) -> Scenario:
    return Scenario(
        gpus=[
            FakeGpu(
                name="NVIDIA H100 80GB HBM3",
                util=util,
                mem_total=80 * GIB,
                mem_used=20 * GIB,
                temp=51,
                power=312_000,
                power_limit=700_000,
                max_clocks={"sm": 1980},
            ),
            FakeGpu(name="NVIDIA H100 80GB HBM3", util=3, temp="NOT_SUPPORTED"),
        ]
    )


def open_lab(browser: Any, lab: Lab) -> Any:
    # A locale whose own clock is 12-hour: the panel must still write 24-hour times.
    page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.on("requestfailed", lambda r: page.console_lines.append(f"request failed: {r.url}"))
    page.goto(f"{lab.url}lab?token={lab.token}")
    page.wait_for_selector(PANEL_TAB, timeout=60_000)
    return page


def api_requests(page: Any) -> list[Any]:
    """Requests the page makes to the GPU API from now on."""
    seen: list[Any] = []
    page.on("request", lambda r: seen.append(r) if "/jupyter-air/gpu" in r.url else None)
    return seen


@pytest.fixture(scope="module")
def gpu_lab(start_lab: Callable[..., Lab]) -> Lab:
    """Two GPUs; the browser polls every second and pauses after 6 idle seconds; the
    server samples only when asked (so only the refresh button changes values)."""
    return start_lab(
        two_gpus(),
        settings={"jupyter-air:gpu": {"pollInterval": 1, "idleTimeout": 6}},
        server_args=["--GpuSampler.interval=3600", "--GpuSampler.idle_timeout=2"],
    )


@pytest.fixture(scope="module")
def page(browser: Any, gpu_lab: Lab) -> Iterator[Any]:
    page = open_lab(browser, gpu_lab)
    yield page
    page.close()


def test_the_chip_icon_opens_the_panel_with_the_values_of_the_driver(
    page: Any, artifacts: Path
) -> None:
    page.click(PANEL_TAB)
    page.wait_for_selector(f"{PANEL} {card(1)}")
    assert page.text_content(f"{PANEL} h2, {PANEL} .jp-air-GpuPanel-title") == "GPU resources"
    assert "NVIDIA H100 80GB HBM3" in page.text_content(f"{card(0)} .jp-air-GpuCard-name")
    assert page.text_content(value(0, "util")) == "35 %"
    assert page.text_content(value(0, "mem")) == "20.0 / 80.0 GiB"
    assert page.text_content(value(0, "temp")) == "51 °C"
    assert page.text_content(value(0, "power")) == "312 / 700 W"
    assert page.text_content(value(1, "temp")) == "n/a"
    assert page.text_content(value(1, "util")) == "3 %"
    cpu = page.text_content('.jp-air-HostCard [data-metric="cpu"] .jp-air-value')
    assert cpu.endswith("%")
    assert "GiB" in page.text_content('.jp-air-HostCard [data-metric="mem"] .jp-air-value')
    page.screenshot(path=str(artifacts / "gpu-panel.png"))
    # The usage view asks jupyter-air/gpu/usage once opened (no job here: none held a GPU)
    page.click(".jp-air-GpuUsage-summary")
    status = ".jp-air-GpuUsage-status"
    page.wait_for_selector(f"{status}:has-text('No job held a GPU in this window.')")
    page.click(".jp-air-GpuUsage-summary")  # folded again: it asks nothing more


def test_every_time_in_the_panel_is_24_hour_in_an_en_us_browser(page: Any) -> None:
    """The status line and the charts' time axis write one clock, as the cells' charts
    and the logs do ("Updated 19:00:20", never "07:00:20 PM")."""
    status = page.text_content(f"{PANEL} .jp-air-GpuPanel-status") or ""
    assert re.fullmatch(r"Updated \d\d:\d\d:\d\d", status), status
    assert page.evaluate("() => new Date(2026, 0, 1, 19).toLocaleTimeString()").endswith("PM")
    page.wait_for_selector(f"{card(0)} .xtick text")
    ticks = page.eval_on_selector_all(
        f"{card(0)} .xtick text", "ticks => ticks.map(t => t.textContent)"
    )
    assert ticks
    assert all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks


def test_refresh_samples_now_and_shows_the_new_values(page: Any, gpu_lab: Lab) -> None:
    """And what the hardware says (issue 39): GPU 0 slowed down by heat, then an XID."""
    hot, cool = two_gpus(util=80).gpus
    hot = replace(hot, clock_reasons=["hw_thermal"], clocks={"sm": 620}, xids=[(79, time.time())])
    gpu_lab.write(Scenario(gpus=[hot, cool]))
    with page.expect_request(lambda r: r.method == "POST" and "/jupyter-air/gpu/sample" in r.url):
        page.click(".jp-air-GpuPanel-refresh")
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent === '80 %'", arg=value(0, "util")
    )
    page.wait_for_selector(f'{card(0)} .jp-air-GpuCard-problem[data-kind="xid"]')
    badges = page.eval_on_selector_all(
        f"{card(0)} .jp-air-GpuCard-problem", "badges => badges.map(b => b.textContent)"
    )
    assert len(badges) == 2, badges
    assert re.fullmatch(r"XID 79 \(fallen off the bus\) at \d\d:\d\d:\d\d", badges[0])
    assert re.fullmatch(r"Thermal slowdown since \d\d:\d\d · 31 % of its clock", badges[1])
    assert page.query_selector(f"{card(1)} .jp-air-GpuCard-problem") is None


def test_a_lost_gpu_shows_as_lost_while_the_other_keeps_reporting(page: Any, gpu_lab: Lab) -> None:
    gpu_lab.write(Scenario(gpus=[two_gpus(util=64).gpus[0], FakeGpu(lost=True)]))
    page.click(".jp-air-GpuPanel-refresh")
    page.wait_for_selector(f"{card(1)} .jp-air-GpuCard-lost")
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent === '64 %'", arg=value(0, "util")
    )
    gpu_lab.write(two_gpus(util=64))


def test_a_mig_gpu_shows_its_slices_with_profile_memory_and_process(
    page: Any, gpu_lab: Lab, artifacts: Path
) -> None:
    """Issue 41: an H100 in MIG mode with three slices comes in beside the two GPUs."""
    mig = FakeGpu(mig=True, mig_devices=h100_mig_slices(os.getpid()), mem_used=12 * GIB)
    gpu_lab.write(Scenario(gpus=[*two_gpus(util=64).gpus, mig]))
    page.click(".jp-air-GpuPanel-refresh")
    slices = f"{card(2)} .jp-air-GpuCard-migSlice"
    page.wait_for_function("s => document.querySelectorAll(s).length === 3", arg=slices)
    rows = page.eval_on_selector_all(
        slices, "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert rows == [
        ["3g.40gb (GI 1)", "12.0 / 40.0 GiB", f"pid {os.getpid()} · — (12.0 GiB)"],
        ["2g.20gb (GI 5)", "0.0 / 20.0 GiB", "free"],
        ["1g.10gb (GI 13)", "0.0 / 10.0 GiB", "free"],
    ]
    assert page.text_content(value(2, "util")) == "n/a"  # NVML has none for a MIG GPU
    on_a_redrawn(
        lambda: page.locator(card(2)).screenshot(path=str(artifacts / "gpu-panel-mig.png"))
    )
    assert page.query_selector(f"{card(0)} .jp-air-GpuCard-migSlice") is None
    gpu_lab.write(two_gpus(util=64))
    page.click(".jp-air-GpuPanel-refresh")
    page.wait_for_selector(card(2), state="detached")


def test_polling_pauses_when_idle_and_resumes_when_the_panel_is_reopened(
    page: Any, gpu_lab: Lab, artifacts: Path
) -> None:
    page.wait_for_selector(".jp-air-GpuPanel-paused", state="visible", timeout=20_000)
    assert "Resume" in page.text_content(".jp-air-GpuPanel-resume")
    page.screenshot(path=str(artifacts / "gpu-panel-paused.png"))

    requests = api_requests(page)
    calls_before = gpu_lab.server_calls("nvmlDeviceGetUtilizationRates")
    # Four poll intervals of the browser, two idle timeouts of the server. (Playwright
    # delivers request events only while it runs: wait with it, not with time.sleep.)
    page.wait_for_timeout(4000)
    assert requests == [], "a paused panel makes no requests"
    assert gpu_lab.server_calls("nvmlDeviceGetUtilizationRates") == calls_before

    page.click(PANEL_TAB)  # close
    page.wait_for_selector(PANEL, state="hidden")
    with page.expect_request(lambda r: "/jupyter-air/gpu" in r.url):
        page.click(PANEL_TAB)  # reopen: an immediate fetch
    page.wait_for_selector(".jp-air-GpuPanel-paused", state="hidden")
    page.wait_for_timeout(2500)
    assert len(requests) >= 3, "polling every second again"


def test_the_resume_button_resumes_with_an_immediate_fetch(page: Any) -> None:
    page.wait_for_selector(".jp-air-GpuPanel-paused", state="visible", timeout=20_000)
    with page.expect_request(lambda r: "/jupyter-air/gpu" in r.url):
        page.click(".jp-air-GpuPanel-resume")
    page.wait_for_selector(".jp-air-GpuPanel-paused", state="hidden")


def test_the_command_palette_opens_the_panel(page: Any) -> None:
    page.click(PANEL_TAB)  # close it first
    page.wait_for_selector(PANEL, state="hidden")
    run_from_palette(page, "Open GPU resources", "jupyter-air:open-gpu-resources")
    page.wait_for_selector(PANEL, state="visible")


def test_a_machine_without_gpu_says_so_and_still_shows_the_host(
    browser: Any, start_lab: Callable[..., Lab], artifacts: Path
) -> None:
    lab = start_lab(
        Scenario(init_error="DRIVER_NOT_LOADED"),
        settings={"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}},
    )
    page = open_lab(browser, lab)
    page.click(PANEL_TAB)
    notice = page.wait_for_selector(".jp-air-GpuPanel-noGpu")
    assert "No NVIDIA GPU detected" in notice.text_content()
    assert "Driver Not Loaded" in notice.text_content()
    assert page.text_content('.jp-air-HostCard [data-metric="cpu"] .jp-air-value').endswith("%")
    assert page.query_selector(".jp-air-GpuCard") is None
    page.screenshot(path=str(artifacts / "gpu-panel-no-gpu-dark.png"))
    page.close()


def test_one_update_of_eight_gpus_with_two_hours_of_points_is_measured(
    browser: Any, start_lab: Callable[..., Lab], artifacts: Path
) -> None:
    """Report, not assert: the figure goes to test-artifacts and docs/benchmarks.md."""
    lab = start_lab(
        Scenario(gpus=[FakeGpu(util=[i % 100 for i in range(0, 700, 7)]) for _ in range(8)]),
        settings={"jupyter-air:gpu": {"defaultRange": "2h", "pollInterval": 1}},
        # 2 h at 10 s is 720 points: a sampler asked for 100 samples/s keeps 60-70 here
        # (600-850 in 12 s), fewer under load; at least 600 are waited for.
        server_args=["--GpuSampler.interval=0.01", "--GpuSampler.history=12"],
    )
    points = until(
        lambda: (n := len(lab.api("jupyter-air/gpu")["samples"]["t"])) >= 600 and n,
        "600 samples of each GPU in the server's history",
        timeout=120,
        step=1,
    )
    page = open_lab(browser, lab)
    page.click(PANEL_TAB)
    page.wait_for_selector(card(7))
    page.wait_for_function(
        "() => performance.getEntriesByName('jupyter-air:gpu-update').length >= 6",
        timeout=30_000,
    )
    durations = page.evaluate(
        "() => performance.getEntriesByName('jupyter-air:gpu-update').map(e => e.duration)"
    )
    page.screenshot(path=str(artifacts / "gpu-panel-8-gpus.png"), full_page=True)
    page.close()
    report = {
        "gpus": 8,
        "points_per_series": points,
        "first_update_ms": durations[0],
        "later_updates_ms": durations[1:],
        "median_later_update_ms": sorted(durations[1:])[len(durations[1:]) // 2],
    }
    (artifacts / "gpu-panel-perf.json").write_text(json.dumps(report, indent=2))
    print("GPU panel update timings:", json.dumps(report))
    assert points >= 600
    assert all(d > 0 for d in durations)
