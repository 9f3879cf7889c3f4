"""The real-GPU check kit (scripts/gpu-check), run end to end on this machine: the fake
NVML driver plays one H200 with the job's rank on it, a fake nvidia-smi reads the same
scenario on its own, and torch is the CPU build, so what needs CUDA is skipped by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from scripts.gpu_check import wheelhouse
from scripts.gpu_check.compare import agreement
from scripts.gpu_check.tolerances import GPU_FIELDS, PROCESS_MEMORY
from tests.fake_nvml import FakeGpu, Scenario, default_uuid, env_for
from tests.leftovers import end_processes_in

ROOT = Path(__file__).resolve().parents[2]
#: The kit starts a kernel, a job, a Jupyter server and pytest: on a loaded shared
#: machine that takes minutes (about 50 s on an idle one).
pytestmark = pytest.mark.timeout(600)
MiB, GiB = 1024**2, 1024**3
RANK_MEMORY = 4 * GiB + 12_345  # what the fake driver says the job's rank holds


def h200(processes: list[tuple[int, int]]) -> Scenario:
    return Scenario(
        driver_version="580.159.04",
        cuda_driver_version=13000,
        gpus=[
            FakeGpu(
                name="NVIDIA H200",
                mem_total=143_771 * MiB,
                mem_used=5 * GiB,
                util=87,
                temp=52,
                power=480_500,
                power_limit=700_000,
                processes=processes,
            )
        ],
    )


class Driver(threading.Thread):
    """The fake driver's view of the machine: once the job's rank says it is up (the
    kit's ready file), its process is listed as a compute process holding memory,
    as a real driver lists a process once it has a CUDA context."""

    def __init__(self, scenario: Path, ready: Path) -> None:
        super().__init__(daemon=True)
        self.scenario, self.ready, self.stop = scenario, ready, threading.Event()
        self.pid: int | None = None

    def run(self) -> None:
        while not self.stop.wait(0.1):
            if self.ready.is_file():
                self.pid = int(json.loads(self.ready.read_text())["pid"])
                h200([(self.pid, RANK_MEMORY)]).write(self.scenario)
                return


@pytest.fixture(scope="module")
def kit(fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the kit; its report, its output and the rank's pid."""
    tmp = tmp_path_factory.mktemp("gpu-check")
    scenario = h200([]).write(tmp / "scenario.txt")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{ROOT}/tests/gpu/fake_nvidia_smi.py" "$@"\n'
    )
    smi.chmod(0o755)
    home = tmp / "home"
    driver = Driver(scenario, home / "run" / "ready.json")
    driver.start()
    env = {
        **os.environ,
        **env_for(fake_nvml_dir, scenario),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "AIR_GPU_CHECK_HOME": str(home),
        "CUDA_VISIBLE_DEVICES": "0",  # the fake GPU; the CPU torch finds no CUDA anyway
    }
    env.pop("OUT", None)
    small = ["--rounds", "2", "--timing-rounds", "2", "--timing-samples", "20"]
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check"), "--no-install",
         "--report-dir", str(tmp / "report"), *small, "--hold-mib", "64", "--side", "64"],
        env=env, capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    driver.stop.set()
    end_processes_in(tmp)  # the kit's runs' tail process, idle: not past this fixture
    report_json = tmp / "report" / "gpu-check.json"
    assert report_json.is_file(), proc.stdout + proc.stderr
    return {
        "proc": proc,
        "report": json.loads(report_json.read_text()),
        "markdown": (tmp / "report" / "gpu-check.md").read_text(),
        "pid": driver.pid,
    }


def checks(kit: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in kit["report"]["checks"]}


def outcome(kit: dict[str, Any], name: str) -> str:
    found = checks(kit)
    assert name in found, f"no check {name!r} in {sorted(found)}"
    return str(found[name]["outcome"])


@pytest.mark.heavy
def test_the_kit_passes_on_the_fake_driver_and_says_it_was_the_fake(kit: dict[str, Any]) -> None:
    failed = [c for c in kit["report"]["checks"] if c["outcome"] == "failed"]
    assert failed == [], kit["proc"].stdout + kit["proc"].stderr
    assert kit["proc"].returncode == 0
    machine = kit["report"]["machine"]
    assert machine["nvml_library"].startswith("FAKE")
    assert machine["driver_version"] == "580.159.04"
    assert machine["cuda_driver_version"] == "13.0"
    assert machine["gpu 0"].startswith("NVIDIA H200, 143771 MiB, power limit 700.0 W")
    assert "torch" in machine
    assert machine["rank_backend"] == "gloo"


@pytest.mark.heavy
def test_every_value_compared_is_what_the_scenario_says_on_both_sides(
    kit: dict[str, Any],
) -> None:
    expected = {
        "name": "NVIDIA H200",
        "uuid": default_uuid(0),
        "mem_total_mib": 143_771,
        "power_limit_w": 700.0,
        "mem_used_mib": 5 * 1024,
        "util": 87,
        "temp_c": 52,
        "power_w": 480.5,
        "driver_version": "580.159.04",
        f"process {kit['pid']} used_mib": 4096,
    }
    compared = kit["report"]["compared"]
    assert {v["round"] for v in compared} == {0, 1}
    for row in compared:
        assert row["agrees"], row
        assert row["smi"] == expected[row["field"]], row
        assert all(v == expected[row["field"]] for v in row["ours"]), row
    assert {row["field"] for row in compared} == set(expected)


@pytest.mark.parametrize(
    "name",
    [
        "nvml_vs_smi:name", "nvml_vs_smi:util", "nvml_vs_smi:power_w", "nvml_vs_smi:processes",
        "job_process_seen_by_nvml", "job_process_listed_by_nvidia_smi",
        "too_many_ranks_refused", "one_rank_cell", "job_succeeded",
        "gpu_api_lists_job_process", "gpu_api_payload", "mlflow_system_gpu_metrics",
        "sampler_timing", "hardware_queries:0", "clock_reasons_names:0", "xid_event_set",
    ],
)  # fmt: skip
@pytest.mark.heavy
def test_each_claim_is_a_passed_check(kit: dict[str, Any], name: str) -> None:
    assert outcome(kit, name) == "passed", checks(kit)[name]


@pytest.mark.heavy
def test_what_needs_cuda_or_a_real_driver_is_skipped_by_name_with_the_reason(
    kit: dict[str, Any],
) -> None:
    for name in ("nccl_all_reduce", "cuda_memory_held"):
        assert outcome(kit, name) == "skipped"
        assert "has no CUDA" in checks(kit)[name]["detail"]
    assert outcome(kit, "install_from_wheelhouse") == "skipped"
    gpu_tests = [c for c in kit["report"]["checks"] if c["name"].startswith("pytest:")]
    assert len(gpu_tests) >= 3
    for check in gpu_tests:
        assert check["outcome"] == "skipped", check
        assert "no real NVIDIA driver" in check["detail"], check


@pytest.mark.heavy
def test_the_report_has_the_figures_and_a_markdown_twin(kit: dict[str, Any]) -> None:
    timings = kit["report"]["timings"]
    assert timings["sampler_us_per_sample"] > 0
    assert timings["bare_pynvml_us_per_sample"] > 0
    assert timings["api_full_rows"] >= 2
    assert 0 < timings["api_increment_bytes_one_sample"] < timings["api_full_bytes"]
    assert len(kit["report"]["tolerances"]) == len(GPU_FIELDS) + 2
    markdown = kit["markdown"]
    for check in kit["report"]["checks"]:
        assert f"| {check['name']} | {check['outcome']} |" in markdown
    assert "## Tolerances" in markdown
    assert "FAKE" in markdown


# -- the comparison itself: what it accepts, what it refuses ----------------------------

TOL = {t.field: t for t in GPU_FIELDS}


@pytest.mark.parametrize(
    ("field", "ours", "smi", "agrees"),
    [
        ("util", [80.0, 95.0], 90.0, True),  # moved between our two reads: in the span
        ("util", [80.0, 82.0], 99.0, False),  # 17 points past the span
        ("power_w", [480.0, 480.0], 520.0, True),  # within 10 % of 520 W
        ("power_w", [480.0, 480.0], 480_000.0, False),  # mW for W
        ("mem_used_mib", [5120.0, 5120.0], 5121.0, True),
        ("mem_used_mib", [5120.0, 5120.0], 5120.0 * 1.048576, False),  # MB for MiB
        ("mem_total_mib", [143_771], 143_770.0, True),
        ("name", ["NVIDIA H200"], "NVIDIA H100 80GB HBM3", False),
        ("temp_c", [None, None], None, True),  # neither reports it
        ("temp_c", [None, None], 40.0, False),  # only nvidia-smi reports it
        ("power_w", [300.0, 300.0], None, False),  # only ours reports it
    ],
)
def test_agreement_within_each_fields_tolerance(
    field: str, ours: list[Any], smi: Any, agrees: bool
) -> None:
    assert agreement(TOL[field], ours, smi)[0] is agrees


def test_a_value_that_does_not_move_may_not_differ_between_our_reads() -> None:
    ok, note = agreement(PROCESS_MEMORY, [100, 300], 100.0)
    assert not ok
    assert note == "our own readings differ"


# -- the wheelhouse and the install step -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "never"),
    [
        ("torch", True), ("triton", True), ("nvidia-cudnn-cu13", True), ("nvidia-nccl-cu13", True),
        ("nvidia-ml-py", False),  # pynvml: jupyter_air's own requirement
        ("torchmetrics", False), ("mlflow", False),
    ],
)  # fmt: skip
def test_the_wheelhouse_never_takes_torch_or_the_cuda_libraries(name: str, never: bool) -> None:
    assert bool(wheelhouse.NEVER.match(wheelhouse.normalize(name))) is never


def test_the_machines_packages_are_read_by_their_normalized_names() -> None:
    held = wheelhouse.device_packages()
    assert {"torch", "numpy", "pyarrow", "typing-extensions", "nvidia-ml-py"} <= held
    assert not any(name.startswith("#") for name in held)


def test_without_a_wheelhouse_gpu_check_says_how_to_make_one(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check"), "--report-dir", str(tmp_path / "r")],
        env={**os.environ, "AIR_GPU_CHECK_HOME": str(tmp_path / "home")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "run scripts/gpu-wheelhouse" in proc.stderr
    assert not (tmp_path / "home" / "venv").exists()
