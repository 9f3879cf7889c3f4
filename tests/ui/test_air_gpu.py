"""``%air_gpu`` as a user sees it, in JupyterLab and in Jupyter Notebook 7: the widget
shows the fake driver's GPUs, read from the Jupyter server's sampler, with plotly charts,
and its Refresh button samples at once; on a machine without a GPU it says why in one
line and draws only the host's chart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_cell, run_cell_until_drawn
from tests.ui.test_gpu_panel import two_gpus

VIEW = ".jp-air-GpuView"
CHART_TRACE = f"{VIEW} .js-plotly-plot .scatterlayer .trace"
CELL = "%load_ext jupyter_air\nview = %air_gpu --interval 2\nview"
IDLE_CELL = "idle = %air_gpu --interval 1 --idle-timeout 5\nidle"


def metric(index: int, name: str) -> str:
    return f'{VIEW} .jp-air-GpuView-gpu[data-gpu-index="{index}"] [data-metric="{name}"]'


@pytest.fixture(scope="module", params=["jupyterlab", "notebook"])
def app(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(start_lab: Callable[..., Lab], app: str) -> Lab:
    """The server samples only when asked, so only Refresh changes the values."""
    lab = start_lab(
        two_gpus(),
        server_args=["--GpuSampler.interval=3600", "--GpuSampler.idle_timeout=3600"],
        app=app,
    )
    put_notebook(lab, "gpu.ipynb", [CELL, IDLE_CELL])
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab, app: str) -> Iterator[Any]:
    page = open_notebook(browser, server, "gpu.ipynb", app)
    run_cell_until_drawn(page, server, "gpu.ipynb", 0, CHART_TRACE)
    page.wait_for_selector(metric(1, "util"), timeout=60_000)
    yield page
    page.close()


def test_the_view_shows_the_scripted_gpus_from_the_servers_sampler(
    page: Any, app: str, artifacts: Path
) -> None:
    names = page.eval_on_selector_all(
        f'{VIEW} [data-metric="name"]', "nodes => nodes.map(n => n.textContent)"
    )
    assert names[:2] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
    assert page.text_content(metric(0, "util")) == "35 %"
    assert page.text_content(metric(0, "mem")) == "20.0 / 80.0 GiB"
    assert page.text_content(metric(0, "temp")) == "51 °C"
    assert page.text_content(metric(0, "power")) == "312 / 700 W"
    assert page.text_content(metric(1, "temp")) == "n/a"
    status = page.text_content(f"{VIEW} .jp-air-GpuView-status")
    assert "the Jupyter server's sampler" in status
    assert "Updated every 2 s" in status
    traces = page.eval_on_selector_all(CHART_TRACE, "nodes => nodes.length")
    assert traces == 2 * 3 + 2  # utilization, memory, temperature per GPU; host CPU, memory
    page.screenshot(path=str(artifacts / f"air-gpu-{app}.png"), full_page=True)


def test_refresh_samples_now_and_shows_the_new_values(page: Any, server: Lab) -> None:
    server.write(two_gpus(util=80))
    page.click(f'{VIEW} button:has-text("Refresh")')
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent === '80 %'",
        arg=metric(0, "util"),
        timeout=30_000,
    )


def test_a_range_button_changes_the_charts_range(page: Any) -> None:
    span = """s => {
        const r = document.querySelector(s)._fullLayout.xaxis.range;
        return new Date(r[1]) - new Date(r[0]);
    }"""
    plot = f"{VIEW} .js-plotly-plot"
    assert page.evaluate(span.replace("s =>", "(s) =>"), plot) == pytest.approx(900_000, abs=5)
    page.click(f'{VIEW} button:has-text("2h")')
    page.wait_for_function(f"s => Math.abs(({span})(s) - 7_200_000) < 5", arg=plot)


def test_an_idle_view_pauses_and_hovering_its_chart_resumes_it(page: Any) -> None:
    run_cell(page, 1)
    idle = f"{VIEW} >> nth=1"
    status = f"{idle} >> .jp-air-GpuView-status"
    page.wait_for_selector(f"{status} >> text=Paused after 5 s without interaction", timeout=60_000)
    assert page.is_visible(f'{idle} >> button:has-text("Resume")')
    chart = page.locator(f"{idle} >> .js-plotly-plot .nsewdrag >> nth=0")
    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    # The pointer over the latest samples, at the right end of the 15 min, as a user's
    # moves: the mouse's own events (a locator's hover waits for a chart that stands
    # still, and a resumed one redraws every second).
    for dx in (4, 2):
        page.mouse.move(box["x"] + box["width"] - dx, box["y"] + box["height"] / 2)
    page.wait_for_selector(f"{status} >> text=Updated every 1 s", timeout=30_000)
    assert not page.is_visible(f'{idle} >> button:has-text("Resume")')


def test_without_a_gpu_the_view_says_why_and_draws_only_the_host(
    start_lab: Callable[..., Lab], browser: Any, app: str, artifacts: Path
) -> None:
    """The driver is not loaded (nvmlInit fails), as on a machine without a GPU."""
    lab = start_lab(Scenario(init_error="DRIVER_NOT_LOADED"), app=app)
    put_notebook(lab, "nogpu.ipynb", [CELL])
    page = open_notebook(browser, lab, "nogpu.ipynb", app)
    try:
        run_cell_until_drawn(page, lab, "nogpu.ipynb", 0, CHART_TRACE)
        line = page.text_content(f"{VIEW} .jp-air-GpuView-nogpu")
        assert line.startswith("No GPU here: ")
        assert line.endswith("Host CPU and memory below.")
        titles = page.eval_on_selector_all(
            f"{VIEW} .js-plotly-plot .annotation-text", "nodes => nodes.map(n => n.textContent)"
        )
        assert titles == ["Host (%)"], "no empty GPU charts"
        assert page.locator(f"{VIEW} .jp-air-GpuView-gpu").count() == 0
        # The header's buttons share one line's middle.
        middles = page.eval_on_selector_all(
            f"{VIEW} .widget-hbox >> nth=0 >> button",
            "nodes => nodes.filter(n => n.offsetParent)"
            ".map(n => { const r = n.getBoundingClientRect(); return r.top + r.height / 2; })",
        )
        assert max(middles) - min(middles) < 3, middles
        page.screenshot(path=str(artifacts / f"air-gpu-nogpu-{app}.png"), full_page=True)
    finally:
        page.close()
