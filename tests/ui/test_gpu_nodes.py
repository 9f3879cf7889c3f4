"""The GPU resources panel showing the nodes of a running multi-node job, in chromium.

The job is fabricated in the store as its supervisor leaves it: a running 2-node
attempt, its ``nodes.json``, and each node's sampler snapshot (made by hand here, with
GPU names and values that tell the nodes and this server apart).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs.store import JobStore
from tests.factories import job_spec
from tests.fake_nvml import FakeGpu, Scenario
from tests.ui.conftest import Lab
from tests.ui.test_gpu_panel import PANEL, PANEL_TAB, card, open_lab, value

NODE_SELECT = f"{PANEL} .jp-air-GpuPanel-node"
HEADING = f"{PANEL} .jp-air-GpuPanel-source"
STATUS = f"{PANEL} .jp-air-GpuPanel-status"
NODES = [
    {"node": 0, "node_id": "a0" * 28, "ip": "10.0.0.5", "hostname": "gpu-a"},
    {"node": 1, "node_id": "b1" * 28, "ip": "10.0.0.6", "hostname": "gpu-b"},
]
#: When the nodes' first samples were taken: a minute ago, every 10 s since.
FIRST_SAMPLE = round(time.time() - 60)


def node_snapshot(hostname: str, names: list[str], util: list[list[int]]) -> dict[str, Any]:
    """A node sampler's document (docs/api.md) with a sample every 10 s from
    ``FIRST_SAMPLE``; ``util[i]`` is GPU i's utilization series."""
    n = len(util[0])
    t = [FIRST_SAMPLE + 10.0 * k for k in range(n)]
    return {
        "now": t[-1],
        "interval": 10.0,
        "history": 7200.0,
        "paused": False,
        "reset": False,
        "nvml": {
            "available": True,
            "reason": None,
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
        },
        "host": {"hostname": hostname, "cpu_count": 96, "mem_total_mib": 1_031_000},
        "inventory": f"{sum(map(ord, hostname)):08x}",
        "gpus": [
            {
                "index": i,
                "name": name,
                "uuid": f"GPU-{hostname}-{i}",
                "mem_total_mib": 81_559,
                "power_limit_w": 700.0,
            }
            for i, name in enumerate(names)
        ],
        "samples": {
            "t": t,
            "cpu": [40.0] * n,
            "mem": [300_000] * n,
            "gpu": [
                {"util": series, "mem": [40_960] * n, "temp": [60 + i] * n, "power": [400.0] * n}
                for i, series in enumerate(util)
            ],
        },
        "state": [
            {
                "status": "ok",
                "message": None,
                "processes": [
                    {"pid": 4242 + i, "name": "python", "mem_mib": 40_000, "owner": None}
                ],
            }
            for i in range(len(names))
        ],
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> JobStore:
    return JobStore(tmp_path_factory.mktemp("air"))


@pytest.fixture(scope="module")
def job(store: JobStore) -> str:
    """A running 2-node job: node 0 has one A100, node 1 two busy H100s."""
    job = store.create(job_spec("command", command=["python", "train.py"], nnodes=2))
    store.update(job.id, status="RUNNING")
    store.start_attempt(job.id, 1, None)
    attempt_dir = store.attempt_dir(job.id, 1)
    AttemptDir(attempt_dir).write_nodes(NODES)
    AttemptDir(attempt_dir).write_gpu(
        0, node_snapshot("gpu-a", ["NVIDIA A100-SXM4-80GB"], [[42, 42, 42]])
    )
    AttemptDir(attempt_dir).write_gpu(
        1,
        node_snapshot("gpu-b", ["NVIDIA H100 80GB HBM3"] * 2, [[88, 90, 91], [15, 16, 17]]),
    )
    return job.id


@pytest.fixture(scope="module")
def nodes_lab(start_lab: Callable[..., Lab], store: JobStore) -> Lab:
    """This server has one L4; the browser polls every second."""
    return start_lab(
        Scenario(gpus=[FakeGpu(name="NVIDIA L4", util=5, mem_total=24 * 1024**3)]),
        settings={"jupyter-air:gpu": {"pollInterval": 1, "idleTimeout": 10}},
        env={"AIR_HOME": str(store.home)},
    )


@pytest.fixture(scope="module")
def page(browser: Any, nodes_lab: Lab, job: str) -> Iterator[Any]:
    page = open_lab(browser, nodes_lab)
    page.click(PANEL_TAB)
    page.wait_for_selector(f"{PANEL} {card(0)}")
    yield page
    page.close()


def requests_to(page: Any, fragment: str) -> list[str]:
    """URLs of the requests the page makes from now on that contain ``fragment``."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if fragment in r.url else None)
    return seen


def wait_text(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([s, t]) => document.querySelector(s)?.textContent === t", arg=[selector, text]
    )


def test_the_node_selector_lists_this_server_and_every_node_of_the_job(page: Any, job: str) -> None:
    page.wait_for_selector(NODE_SELECT, state="visible")
    assert page.text_content(f"{PANEL} .jp-air-GpuPanel-nodeLabel") == "Node"
    options = page.eval_on_selector_all(f"{NODE_SELECT} option", "os => os.map(o => o.text)")
    assert options == [
        f"This server ({socket.gethostname()})",
        f"job {job} · node 0 (gpu-a)",
        f"job {job} · node 1 (gpu-b)",
    ]
    assert "NVIDIA L4" in page.text_content(f"{card(0)} .jp-air-GpuCard-name")


def test_selecting_a_node_shows_its_gpus_under_its_name(
    page: Any, job: str, artifacts: Path
) -> None:
    requests = requests_to(page, f"/jupyter-air/jobs/{job}/gpu?")
    page.select_option(NODE_SELECT, f"{job}/1/1")
    wait_text(page, HEADING, f"Node 1 (gpu-b) of job {job}")
    page.wait_for_selector(f"{PANEL} {card(1)}")
    assert page.text_content(f"{card(0)} .jp-air-GpuCard-name") == "GPU 0: NVIDIA H100 80GB HBM3"
    wait_text(page, value(0, "util"), "91 %")
    assert page.text_content(value(1, "util")) == "17 %"
    assert page.text_content(value(1, "temp")) == "61 °C"
    assert page.text_content(f"{PANEL} .jp-air-HostCard-name") == "Host: gpu-b · 96 CPUs"
    assert requests
    assert all("node=1" in url and "attempt=1" in url for url in requests)
    page.screenshot(path=str(artifacts / "gpu-panel-job-node.png"))


def test_new_samples_of_the_node_arrive_as_increments(page: Any, store: JobStore, job: str) -> None:
    requests = requests_to(page, f"/jupyter-air/jobs/{job}/gpu?")
    AttemptDir(store.attempt_dir(job, 1)).write_gpu(
        1,
        node_snapshot("gpu-b", ["NVIDIA H100 80GB HBM3"] * 2, [[88, 90, 91, 55], [15, 16, 17, 18]]),
    )
    wait_text(page, value(0, "util"), "55 %")
    assert requests
    assert all("since=" in url and "inventory=" in url for url in requests)


def test_polling_a_node_pauses_when_idle_and_resumes(page: Any, job: str) -> None:
    page.wait_for_selector(f"{PANEL} .jp-air-GpuPanel-paused", state="visible", timeout=30_000)
    requests = requests_to(page, "/jupyter-air/")
    page.wait_for_timeout(3000)
    assert requests == [], "a paused panel makes no requests"
    with page.expect_request(lambda r: f"/jobs/{job}/gpu" in r.url):
        page.click(f"{PANEL} .jp-air-GpuPanel-resume")
    page.wait_for_selector(f"{PANEL} .jp-air-GpuPanel-paused", state="hidden")


def test_when_the_job_ends_the_panel_falls_back_to_this_server(
    page: Any, store: JobStore, job: str, artifacts: Path
) -> None:
    store.end_attempt(job, 1, "SUCCEEDED", [0, 0])
    store.update(job, status="SUCCEEDED", ended=time.time())
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent.includes('NVIDIA L4')",
        arg=f"{card(0)} .jp-air-GpuCard-name",
    )
    status = page.text_content(STATUS)
    assert status.startswith(f"Job ended: showing this server (job {job}) · Updated ")
    assert page.query_selector(card(1)) is None
    assert page.is_hidden(NODE_SELECT)
    page.screenshot(path=str(artifacts / "gpu-panel-job-node-ended.png"))
