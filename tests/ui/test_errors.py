"""What a user sees in JupyterLab when a distributed cell fails or is stopped: the failing
rank's traceback once, starting at the user's cell; an interrupted cell's one line.

One lab, one notebook: the first ``%%air_distributed`` cell raises on rank 1, the
second sleeps until the Stop button (the kernel's interrupt) ends it. Screenshots of
both cells under test-artifacts/.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeGpu, Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import kernel_of, open_notebook, put_notebook, run_cell

FAILING = """%%air_distributed -n 2
import os
def check(rank):
    if rank == "1":
        raise ValueError("boom on rank 1")
check(os.environ["RANK"])
"""
SLEEPING = """%%air_distributed -n 2
import time
print("started", flush=True)
time.sleep(300)
"""


def cell(index: int) -> str:
    return f".jp-Notebook .jp-Cell >> nth={index}"


@pytest.fixture(scope="module")
def server(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    lab = start_lab(
        Scenario(gpus=[FakeGpu(util=[30]), FakeGpu(util=[40])]),
        env={
            "AIR_HOME": str(air_home),
            "MLFLOW_TRACKING_URI": f"sqlite:///{air_home}/mlflow.db",
            "CUDA_VISIBLE_DEVICES": "0,1",
        },
    )
    put_notebook(lab, "errors.ipynb", ["%load_ext jupyter_air", FAILING, SLEEPING])
    return lab


@pytest.fixture(scope="module")
def page(browser: Any, server: Lab) -> Iterator[Any]:
    page = open_notebook(browser, server, "errors.ipynb", "jupyterlab")
    for _ in range(3):  # a frontend that changes its kernel meanwhile drops the run
        before = kernel_of(server, "errors.ipynb")
        run_cell(page, 0)
        with contextlib.suppress(Exception):  # playwright's TimeoutError: run it again
            # Done, whatever its number: a frontend still connecting may take it twice.
            page.wait_for_function(
                "() => /\\[\\d+\\]/.test(document.querySelector("
                "'.jp-Notebook .jp-Cell .jp-InputPrompt')?.textContent ?? '')",
                timeout=90_000,
            )
            if before is not None and kernel_of(server, "errors.ipynb") == before:
                break
    else:
        raise AssertionError("the extension never loaded in the notebook's kernel")
    yield page
    page.close()


def test_a_failing_rank_shows_its_traceback_once_led_by_the_users_cell(
    page: Any, artifacts: Path
) -> None:
    run_cell(page, 1)
    error = page.wait_for_selector(
        f"{cell(1)} >> .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        " >> text=JobFailed",
        timeout=180_000,
    )
    error.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "error-failing-rank.png"))
    output = page.inner_text(f"{cell(1)} >> .jp-Cell-outputWrapper")
    assert output.count("ValueError: boom on rank 1") == 1, output
    assert output.count("Traceback (most recent call last)") == 1, output
    frames = re.findall(r'File "([^"]+)", line (\d+)', output)
    assert frames[0] == ("<air_distributed cell>", "6"), frames  # the editor's line
    assert "jupyter_air" not in output.split("Traceback (most recent call last)")[1]
    assert "its traceback is above" in output


def test_an_interrupted_cell_ends_in_one_line(page: Any, artifacts: Path) -> None:
    run_cell(page, 2)
    page.wait_for_selector(f"{cell(2)} >> text=[rank 1] started", timeout=180_000)
    page.click(".jp-NotebookPanel-toolbar [data-jp-item-name='interrupt']")  # Stop
    error = page.wait_for_selector(
        f"{cell(2)} >> text=KeyboardInterrupt: interrupted", timeout=120_000
    )
    error.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "error-interrupted.png"))
    errors = page.query_selector_all(
        f"{cell(2)} >> .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    )
    shown = errors[-1].inner_text().strip()
    assert re.fullmatch(
        r"KeyboardInterrupt: interrupted; job \S+ cancelled, every rank stopped", shown
    ), shown
    assert "magics.py" not in page.inner_text(f"{cell(2)} >> .jp-Cell-outputWrapper")
