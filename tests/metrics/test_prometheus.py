"""A real Prometheus (Debian's ``prometheus``, on loopback) scrapes the Jupyter server's
``jupyter-air/metrics`` and an ``air exporter``, each with the metrics token, while two
users' jobs hold fake GPUs; every query of the Grafana dashboard then answers with the
series of those jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import env_for
from tests.hub import _free_port
from tests.metrics.conftest import TwoUsers
from tests.metrics.dashboard import as_run, load, panel_queries
from tests.waits import until_async

PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="Debian's prometheus is not installed (scripts/install-system-deps.sh)",
    ),
]

Series = dict[tuple[str, ...], float]


@pytest.fixture
def jp_base_url() -> str:
    return "/"  # Prometheus's metrics_path takes no percent-escapes


@pytest.fixture
def sampler_interval() -> float:
    return 0.5  # samples between two scrapes


@pytest.fixture
def exporter(
    jp_server_config: Any, fake_nvml_dir: Path, token_file: Path, tmp_path: Path
) -> Iterator[str]:
    """``air exporter`` on a port of its choosing, on the same fake GPUs: its address."""
    env = {**os.environ, **env_for(fake_nvml_dir, Path(os.environ["FAKE_NVML_SCENARIO"]))}
    argv = ["-m", "jupyter_air.cli", "exporter", "--listen", "127.0.0.1:0", "--interval", "0.5"]
    proc = subprocess.Popen(
        [sys.executable, *argv, "--token-file", str(token_file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "exporter.log", "wb"),  # noqa: SIM115 (the process holds it)
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("air exporter: serving http://"), line
        yield line.split("http://", 1)[1].split("/", 1)[0]
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def prometheus(
    http_server: Any, jp_http_port: int, exporter: str, token_file: Path, tmp_path: Path
) -> Iterator[str]:
    """Prometheus scraping both every 2 s (``http_server``: the Jupyter server listens):
    its address."""
    config = tmp_path / "prometheus.yml"
    scrape = {"scrape_interval": "2s", "authorization": {"credentials_file": str(token_file)}}
    config.write_text(
        json.dumps(  # YAML reads JSON
            {
                "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
                "scrape_configs": [
                    {
                        **scrape,
                        "job_name": "jupyter",
                        "metrics_path": "/jupyter-air/metrics",
                        "static_configs": [{"targets": [f"127.0.0.1:{jp_http_port}"]}],
                    },
                    {
                        **scrape,
                        "job_name": "exporter",
                        "static_configs": [{"targets": [exporter]}],
                    },
                ],
            }
        )
    )
    address = f"127.0.0.1:{_free_port()}"
    assert PROMETHEUS is not None
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={address}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "wb"),  # noqa: SIM115 (the process holds it)
    )
    try:
        yield address
    finally:
        proc.terminate()
        proc.wait(30)


def targets(address: str) -> list[tuple[str, str]]:
    """Each target's health and last error, as Prometheus says them."""
    with urllib.request.urlopen(f"http://{address}/api/v1/targets", timeout=10) as answer:
        doc = json.load(answer)
    return [(t["scrapeUrl"], t["lastError"]) for t in doc["data"]["activeTargets"]]


def query(address: str, promql: str) -> Series:
    """An instant query's series by their label values (sorted by label name)."""
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            doc = json.load(answer)
    except OSError:
        return {}  # not up yet
    return {
        tuple(value for _, value in sorted(r["metric"].items())): float(r["value"][1])
        for r in doc["data"]["result"]
    }


async def test_prometheus_scrapes_both_and_the_dashboard_answers_for_two_users(
    prometheus: str, two_users: TwoUsers, tmp_path: Path
) -> None:
    def log() -> str:
        return (tmp_path / "prometheus.log").read_text()[-3000:]

    await until_async(
        lambda: query(prometheus, "sum by (job) (up)") == {("exporter",): 1.0, ("jupyter",): 1.0},
        "both targets scraped with the token",
        seen=lambda: (targets(prometheus), log()),
    )
    for job in ("jupyter", "exporter"):
        alice = f'DCGM_FI_DEV_GPU_UTIL{{job="{job}", user="alice"}}'

        def busy(q: str = alice) -> bool:
            return list(query(prometheus, q).values()) == [80.0]

        await until_async(busy, alice)

    panels = {title: as_run(expr, "20s", "1h") for title, expr in panel_queries(load()).items()}

    def answered() -> dict[str, Series]:
        return {title: query(prometheus, promql) for title, promql in panels.items()}

    def ready() -> dict[str, Series] | None:
        found = answered()
        held = found["GPUs held, by user"]
        return found if len(held) == 2 and all(v > 0 for v in held.values()) else None

    found = await until_async(ready, "rates over two scrapes of growing counters", seen=answered)
    idle = found["Idle GPU-hours by user (time range)"]
    assert idle[("alice",)] == 0
    assert idle[("bob",)] > 0
    assert set(found["GPU-hours by user and job (time range)"]) == {
        (two_users.alice_job, "alice"),
        (two_users.bob_job, "bob"),
    }
    share = found["Idle share of held GPU time, by user"]
    assert share[("alice",)] == 0
    assert share[("bob",)] == pytest.approx(1.0)
    utilization = found["GPU utilization, by user and job"]
    assert utilization == {(two_users.alice_job, "alice"): 80.0, (two_users.bob_job, "bob"): 0.0}
    assert (
        found["GPU memory used, by user and job"][(two_users.alice_job, "alice")] == 2 * 30 * 1024
    )
    assert found["Jobs by state"] == {("PENDING",): 4.0}  # two jobs, seen by both targets
    assert set(found["GPU power, by user"]) == {("alice",), ("bob",)}
    energy = found["GPU energy by user, kWh (time range)"]  # bob's GPU has no counter
    assert set(energy) == {("alice",)}
    assert energy[("alice",)] > 0
