"""``%air_gpu`` in a real kernel with no Jupyter server to read: it samples the fake
driver's GPUs in the kernel, and its threads end when the view is closed or idle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.kernel.conftest import Kernel

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def kernel_env(
    kernel_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """No Jupyter server's runtime file where the kernel looks (whatever runs elsewhere)."""
    runtime: Path = tmp_path_factory.mktemp("runtime")
    return {**kernel_env, "JUPYTER_RUNTIME_DIR": str(runtime), "JPY_PARENT_PID": "1"}


def value(kernel: Kernel, expression: str) -> object:
    return ast.literal_eval(kernel.run(expression).value())


def view_threads(kernel: Kernel) -> list[str]:
    names = value(
        kernel,
        "sorted(t.name for t in __import__('threading').enumerate()"
        " if t.name.startswith('jupyter-air-gpu'))",
    )
    assert isinstance(names, list)
    return names


def test_load_ext_imports_none_of_widgets_plotly_nvml_or_optuna(kernel: Kernel) -> None:
    loaded = value(
        kernel,
        "[m for m in ('ipywidgets', 'plotly', 'pynvml', 'optuna')"
        " if m in __import__('sys').modules]",
    )
    assert loaded == []


def test_without_a_server_the_view_samples_the_gpus_in_the_kernel(kernel: Kernel) -> None:
    assigned = kernel.run("view = %air_gpu --interval 1")
    assert assigned.error is None, assigned.traceback
    assert assigned.displays == []
    assert view_threads(kernel) == []  # not shown: not polling
    shown = kernel.run("view")
    assert shown.error is None, shown.traceback
    [bundle] = shown.displays
    assert WIDGET in bundle
    # Without widgets (nbconvert, a plain terminal), the first poll as text.
    assert "GPU 0 NVIDIA H100 80GB HBM3: 20 %, 0.0 / 80.0 GiB, 45 °C" in bundle["text/plain"]
    assert "no Jupyter server found" in bundle["text/plain"]
    kernel.run("import time\nwhile not view.poller.history.t: time.sleep(0.1)")
    assert "no Jupyter server found" in str(value(kernel, "view.poller.source.description"))
    cards = str(value(kernel, "view.cards.value"))
    assert cards.count("NVIDIA H100 80GB HBM3") == 1  # kernel_env scripts one GPU
    assert 'data-metric="util">20 %' in cards  # the first value of its sequence
    assert 'data-metric="temp">45 °C' in cards
    traces = value(kernel, "[(t.name, list(t.y)) for t in view.figure.data]")
    assert isinstance(traces, list)
    assert ("GPU 0 utilization", [20]) in traces
    assert view_threads(kernel) == ["jupyter-air-gpu-sampler", "jupyter-air-gpu-view"]
    kernel.run("view.close()")
    assert view_threads(kernel) == []
    open_comms = "[w for w in (view.box, view.figure, view.refresh, view.cards) if w.comm]"
    assert value(kernel, open_comms) == []


def test_an_idle_view_stops_its_threads_and_an_interaction_resumes_it(kernel: Kernel) -> None:
    kernel.run("view = %air_gpu --interval 1 --idle-timeout 5\nview")
    kernel.run("while view.poller.running or not view.poller.paused: time.sleep(0.2)")
    assert view_threads(kernel) == []
    assert "Paused after 5 s without interaction" in str(value(kernel, "view.status.value"))
    samples = value(kernel, "len(view.poller.history.t)")
    assert isinstance(samples, int)
    kernel.run("view.range.value = '1h'")  # a click on a range button
    kernel.run(f"while len(view.poller.history.t) <= {samples}: time.sleep(0.1)")
    assert view_threads(kernel) == ["jupyter-air-gpu-sampler", "jupyter-air-gpu-view"]
    kernel.run("view.close()")
    assert view_threads(kernel) == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--range 3h", "--range must be one of 15m, 1h, 2h"),
        ("--interval 0", "--interval must be at least 1 second"),
        ("--idle-timeout 1", "--idle-timeout must be at least 5 seconds"),
        ("--source gpu", "--source must be auto, server or kernel"),
        ("--source server", "--source server: no Jupyter server found"),
        ("--interval soon", "invalid float value"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(
    kernel: Kernel, line: str, message: str
) -> None:
    refused = kernel.run(f"%air_gpu {line}")
    assert refused.stderr.startswith("UsageError: ")  # IPython prints it, with the usage
    assert message in refused.stderr
    assert refused.displays == []
    assert view_threads(kernel) == []
