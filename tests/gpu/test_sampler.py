"""The GPU sampler, through the real pynvml against the fake NVML driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import psutil
import pytest

from jupyter_air.gpu.sampler import GpuSampler
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario
from tests.waits import until

GIB_IN_MIB = 1024


@pytest.fixture
def make_sampler() -> Iterator[Callable[..., GpuSampler]]:
    made: list[GpuSampler] = []

    def make(**traits: Any) -> GpuSampler:
        sampler = GpuSampler(**traits)
        made.append(sampler)
        return sampler

    yield make
    for sampler in made:
        sampler.stop()


def test_values_flow_from_the_driver_to_the_snapshot(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler()
    sampler.sample_now()
    doc = sampler.snapshot()

    assert doc["nvml"]["available"] is True
    assert doc["nvml"]["driver_version"] == "550.54.15"
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert doc["gpus"][0]["mem_total_mib"] == 80 * GIB_IN_MIB
    assert doc["gpus"][0]["power_limit_w"] == 700.0
    gpu0 = doc["samples"]["gpu"][0]
    assert gpu0["util"][-1] == 35
    assert gpu0["mem"][-1] == 20 * GIB_IN_MIB
    assert gpu0["temp"][-1] == 51
    assert gpu0["power"][-1] == 312.4
    assert doc["samples"]["gpu"][1]["mem"][-1] == 512
    assert doc["state"][0]["status"] == "ok"
    assert doc["state"][0]["processes"] == [
        {
            "pid": os.getpid(),
            "name": psutil.Process().name(),
            "mem_mib": 19 * GIB_IN_MIB,
            "owner": None,
        }
    ]
    assert doc["state"][1]["processes"] == []
    assert doc["samples"]["cpu"][-1] is not None
    assert doc["host"]["mem_total_mib"] > 0


def test_successive_samples_follow_the_driver(
    scenario: WriteScenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(Scenario(gpus=[FakeGpu(util=[10, 20, 30], temp=[40, 41, 42])]))
    sampler = make_sampler()
    for _ in range(3):
        sampler.sample_now()
    gpu = sampler.snapshot()["samples"]["gpu"][0]
    assert gpu["util"][-3:] == [10, 20, 30]
    assert gpu["temp"][-3:] == [40, 41, 42]


def test_an_unsupported_temperature_is_null_and_the_rest_still_reports(
    scenario: WriteScenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(Scenario(gpus=[FakeGpu(util=77, temp="NOT_SUPPORTED")]))
    sampler = make_sampler()
    sampler.sample_now()
    doc = sampler.snapshot()
    assert doc["samples"]["gpu"][0]["temp"] == [None]
    assert doc["samples"]["gpu"][0]["util"] == [77]
    state = doc["state"][0]
    assert state.pop("health")["problems"] == []
    assert state == {
        "status": "ok",
        "message": None,
        "unavailable": {"temp": "Not Supported"},
        "processes": [],
    }


def test_a_gpu_lost_mid_run_shows_as_lost_while_the_others_keep_reporting(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler()
    sampler.sample_now()
    lost = Scenario(gpus=[two_gpus.gpus[0], FakeGpu(lost=True)])
    scenario(lost)
    sampler.sample_now()
    doc = sampler.snapshot()
    assert doc["state"][1]["status"] == "lost"
    assert doc["state"][1]["message"] == "GPU is lost"
    assert doc["state"][0]["status"] == "ok"
    assert doc["samples"]["gpu"][1]["util"] == [0, None]
    assert doc["samples"]["gpu"][0]["util"] == [35, 35]


def test_other_field_errors_are_reported_in_the_gpu_state(
    scenario: WriteScenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(Scenario(gpus=[FakeGpu(util=5, power="UNKNOWN")]))
    sampler = make_sampler()
    sampler.sample_now()
    state = sampler.snapshot()["state"][0]
    assert state["status"] == "error"
    assert state["message"] == "power: Unknown Error"


def test_memory_info_v1_is_used_where_the_driver_has_no_v2(
    scenario: WriteScenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(Scenario(gpus=[FakeGpu(memory_v2=False, mem_total=16 * 1024**3, mem_used=1024**3)]))
    sampler = make_sampler()
    sampler.sample_now()
    doc = sampler.snapshot()
    assert doc["gpus"][0]["mem_total_mib"] == 16 * GIB_IN_MIB
    assert doc["samples"]["gpu"][0]["mem"] == [GIB_IN_MIB]


def test_eight_gpus(scenario: WriteScenario, make_sampler: Callable[..., GpuSampler]) -> None:
    scenario(Scenario(gpus=[FakeGpu(util=i * 10) for i in range(8)]))
    sampler = make_sampler()
    sampler.sample_now()
    doc = sampler.snapshot()
    assert [g["index"] for g in doc["gpus"]] == list(range(8))
    assert [g["util"][-1] for g in doc["samples"]["gpu"]] == [i * 10 for i in range(8)]


def test_driver_not_loaded_is_the_quiet_no_gpu_state(
    scenario: WriteScenario,
    make_sampler: Callable[..., GpuSampler],
    caplog: pytest.LogCaptureFixture,
) -> None:
    scenario(Scenario(init_error="DRIVER_NOT_LOADED"))
    sampler = make_sampler()
    sampler.sample_now()
    doc = sampler.snapshot()
    assert doc["nvml"]["available"] is False
    assert doc["nvml"]["reason"] == "Driver Not Loaded"
    assert doc["gpus"] == []
    assert doc["samples"]["gpu"] == []
    assert len(doc["samples"]["cpu"]) == 1
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_no_nvml_library_at_all_is_the_quiet_no_gpu_state() -> None:
    """A fresh interpreter without the fake driver: this machine has no libnvidia-ml."""
    code = (
        "import json; from jupyter_air.gpu.sampler import GpuSampler\n"
        "s = GpuSampler(); s.sample_now(); d = s.snapshot()\n"
        "print(json.dumps([d['nvml'], d['gpus'], len(d['samples']['cpu'])]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    nvml, gpus, n_host_samples = json.loads(out.stdout)
    assert nvml["available"] is False
    assert nvml["reason"] == "NVML Shared Library Not Found"
    assert gpus == []
    assert n_host_samples == 1
    assert out.stderr == ""


def test_the_ring_keeps_exactly_two_hours(
    scenario: WriteScenario,
    make_sampler: Callable[..., GpuSampler],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario(Scenario(gpus=[FakeGpu()] * 8))
    clock = [1_000_000.0]
    monkeypatch.setattr("jupyter_air.gpu.sampler.time.time", lambda: clock[0])
    sampler = make_sampler(interval=10.0, history=7200.0)
    for _ in range(1000):
        sampler.sample_now()
        clock[0] += 10.0
    clock[0] -= 10.0
    t = sampler.snapshot()["samples"]["t"]
    assert t[-1] == clock[0]
    assert t[0] == clock[0] - 7200.0
    assert len(t) == 721


def test_increments_carry_only_new_samples_and_no_inventory(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler()
    sampler.sample_now()
    first = sampler.snapshot()
    sampler.sample_now()
    second = sampler.snapshot(since=first["samples"]["t"][-1], inventory=first["inventory"])
    assert len(second["samples"]["t"]) == 1
    assert not {"gpus", "nvml", "host"} & set(second)  # unchanged, covered by the id
    assert second["reset"] is False


def test_a_stale_inventory_id_gets_a_reset_with_the_whole_history(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler()
    sampler.sample_now()
    sampler.sample_now()
    doc = sampler.snapshot(since=time.time(), inventory="0123abcd")
    assert doc["reset"] is True
    assert len(doc["gpus"]) == 2
    assert len(doc["samples"]["t"]) == 2


def test_the_thread_samples_every_interval(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler(interval=0.05, idle_timeout=60.0)
    sampler.start()
    until(lambda: sampler.samples_taken >= 5, "five samples", 10, step=0.01)
    t = sampler.snapshot()["samples"]["t"]
    gaps = [b - a for a, b in pairwise(t)]
    assert min(gaps) >= 0.04


def test_idle_pause_stops_sampling_and_a_request_resumes_it_at_once(
    scenario: WriteScenario, two_gpus: Scenario, make_sampler: Callable[..., GpuSampler]
) -> None:
    scenario(two_gpus)
    sampler = make_sampler(interval=0.05, idle_timeout=0.3)
    sampler.start()
    until(lambda: sampler.paused, "the idle sampler paused", 10, step=0.01)
    taken = sampler.samples_taken
    time.sleep(0.4)  # several intervals while paused
    assert sampler.samples_taken == taken

    doc = sampler.snapshot(since=time.time() - 0.01)
    assert doc["paused"] is True
    assert sampler.samples_taken == taken + 1
    assert len(doc["samples"]["t"]) == 1  # the immediate sample
    until(lambda: sampler.samples_taken >= taken + 3, "sampling resumed", 10, step=0.01)
    assert not sampler.paused


@pytest.mark.parametrize(
    ("trait", "value"), [("interval", 0), ("idle_timeout", -1), ("history", 0)]
)
def test_non_positive_settings_are_refused(trait: str, value: float) -> None:
    from traitlets import TraitError

    with pytest.raises(TraitError, match=trait):
        GpuSampler(**{trait: value})
