"""A retry that resumed from a checkpoint, in the cell's live chart (issue 26): the
retry's curve goes on from the step it resumed at, and a dashed line marks the restart.
A real lab, a real 2-rank job (gloo) whose rank 1 dies by SIGKILL after step 5."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import open_notebook, put_notebook, run_cells_in_one_kernel

SETUP = """%load_ext jupyter_air
from jupyter_air.kernel.live_view import live_view_config as c
c().mode = "widget"; c().interval = 0.5"""

RESUMING = """%%air_distributed -n 2 --max-retries 1
import os, signal, time
import torch, torch.distributed as dist
from jupyter_air import checkpoint, log_metrics

dist.init_process_group("gloo")
state, done = checkpoint.load() or ({"loss": 2.0}, 0)
loss = state["loss"]
for step in range(done, 40):
    loss *= 0.93
    dist.all_reduce(torch.zeros(1))
    log_metrics({"train_loss": loss}, step=step + 1)
    checkpoint.save({"loss": loss}, step + 1)
    dist.barrier()
    if os.environ["AIR_ATTEMPT"] == "1" and step + 1 == 5 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.4)
"""

#: The train_loss panel of the live chart, found by its title.
LOSS = """[...document.querySelectorAll('.jp-air-LiveChart-panel')].find(
    p => p.querySelector('.jp-air-LiveChart-title').textContent === 'train_loss')"""
#: Pixels of gray (the mark's, not the light grid's) around step 5, per pixel of height.
MARKED = f"""() => {{
    const u = {LOSS}.uplot;
    const x = Math.round(u.valToPos(5, "x", true));
    const {{ top, height }} = u.bbox;
    const band = u.ctx.getImageData(x - 1, top, 3, height).data;  // 3 pixels wide
    let gray = 0;
    for (let i = 0; i < band.length; i += 4) {{
        const [r, g, b] = [band[i], band[i + 1], band[i + 2]];
        if (r === g && g === b && r < 200) gray++;
    }}
    return gray / height;
}}"""


@pytest.fixture(scope="module")
def lab(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    return start_lab(
        Scenario(gpus=[]),
        env={"AIR_HOME": str(air_home), "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db"},
    )


@pytest.fixture
def page(browser: Any, lab: Lab) -> Iterator[Any]:
    put_notebook(lab, "resume.ipynb", [SETUP, RESUMING])
    page = open_notebook(browser, lab, "resume.ipynb", "jupyterlab")
    yield page
    page.close()


def test_the_retry_goes_on_from_its_checkpoint_with_the_restart_marked(
    page: Any, lab: Lab, artifacts: Path
) -> None:
    run_cells_in_one_kernel(page, lab, "resume.ipynb", [0, 1])
    page.wait_for_function(
        f"""() => {{ const p = {LOSS};
            return p && p.uplot.series.some(x => x.label === 'train_loss (attempt 2)')
                && p.uplot.data[0].some(x => x >= 9); }}""",
        timeout=180_000,
    )
    labels = page.evaluate(f"() => {LOSS}.uplot.series.slice(1).map(s => s.label)")
    assert labels == ["train_loss", "train_loss (attempt 2)"]
    first_x = page.evaluate(
        f"() => {{ const u = {LOSS}.uplot; "
        "return u.data[0].find((x, i) => u.data[2][i] != null); }"
    )
    assert first_x == 6, "the retry's curve starts after the step it resumed at"
    assert page.evaluate(MARKED) > 0.3, "a dashed line at step 5"
    page.screenshot(path=str(artifacts / "live-chart-resumed.png"))
