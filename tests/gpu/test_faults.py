"""Hardware named (issue 39, item 3): throttle reasons, ECC counts, retired pages,
remapped rows and XID events, read through the real pynvml from the fake NVML driver on
each driver family (today's, an old branch, one without the old throttle name, MIG,
vGPU), as the GPU panel, the job's hints and a rank's death say them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.gpu.faults import XidWatch, clock_time
from jupyter_air.gpu.nvml import GpuHealth, Nvml, XidEvent
from jupyter_air.gpu.sampler import GpuSampler
from jupyter_air.jobs.node.death import MemoryWatch, explain
from jupyter_air.jobs.node.hints import GpuSample, HintWatch, Thresholds
from tests.conftest import WriteScenario
from tests.fake_nvml import (
    NEW_DRIVER_LACKS,
    OLD_DRIVER_LACKS,
    FakeGpu,
    Scenario,
    build_library,
    env_for,
)
from tests.waits import until

#: An H100 held to 31 % of its SM clock by a hardware thermal slowdown.
HOT = FakeGpu(clock_reasons=["hw_thermal"], clocks={"sm": 620}, max_clocks={"sm": 1980})


@pytest.fixture
def sampler() -> Iterator[GpuSampler]:
    made = GpuSampler()
    yield made
    made.stop()


def health_of(sampler: GpuSampler, index: int = 0) -> dict[str, Any]:
    sampler.sample_now()
    state: dict[str, Any] = sampler.snapshot()["state"][index]["health"]
    return state


def texts(health: dict[str, Any]) -> list[str]:
    return [p["text"] for p in health["problems"]]


# --- throttling ----------------------------------------------------------------------


def test_a_thermal_slowdown_is_dated_from_the_first_sample_that_showed_it(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[HOT, FakeGpu(clock_reasons=["idle"])]))
    first = health_of(sampler)
    time.sleep(0.01)
    (thermal,) = health_of(sampler)["problems"]

    assert thermal["kind"] == "thermal"
    assert thermal["text"] == "thermal slowdown"
    assert thermal["severity"] == "warn"
    assert thermal["clock_percent"] == 31
    assert thermal["since"] == first["problems"][0]["since"]
    assert health_of(sampler, 1)["problems"] == [], "an idle clock is no fault"

    scenario(Scenario(gpus=[FakeGpu(clock_reasons=0), FakeGpu()]))
    assert health_of(sampler)["problems"] == [], "the slowdown ended"


def test_power_capping_and_a_hardware_slowdown_are_named_each(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[FakeGpu(clock_reasons=["sw_power_cap", "hw_slowdown"])]))
    assert texts(health_of(sampler)) == ["power capping", "hardware slowdown"]


DRIVER_FAMILY = """
import json
from jupyter_air.gpu.nvml import Nvml
nvml = Nvml()
(reading,) = nvml.read_all()
health = reading.health
print(json.dumps([health.clock_reasons, health.ecc.uncorrected_aggregate, health.unavailable]))
"""


@pytest.mark.parametrize(
    "lacks",
    [OLD_DRIVER_LACKS, NEW_DRIVER_LACKS],
    ids=["470 branch: no ClocksEventReasons", "no ClocksThrottleReasons"],
)
def test_throttle_reasons_are_read_on_a_driver_with_either_name(
    lacks: tuple[str, ...], tmp_path: Path
) -> None:
    gpu = FakeGpu(clock_reasons=["sw_thermal"], ecc={"uncorrected_aggregate": 1})
    scenario = Scenario(without=lacks, gpus=[gpu])
    path = scenario.write(tmp_path / "scenario.txt")
    child = subprocess.run(
        [sys.executable, "-c", DRIVER_FAMILY],
        env={**os.environ, **env_for(build_library(without=lacks), path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    reasons, uncorrected, unavailable = json.loads(child.stdout.splitlines()[-1])
    assert reasons == 0x20
    assert uncorrected == 1
    assert set(unavailable) == {"sm_clock_mhz", "retired_pages", "remapped_rows"}


# --- memory errors -------------------------------------------------------------------


def test_ecc_counts_are_read_and_uncorrected_ones_are_a_fault(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    ecc = {
        "corrected_volatile": 5,
        "uncorrected_volatile": 2,
        "corrected_aggregate": 17,
        "uncorrected_aggregate": 3,
    }
    scenario(Scenario(gpus=[FakeGpu(ecc=ecc)]))
    health = health_of(sampler)
    assert health["ecc"] == ecc
    (problem,) = health["problems"]
    assert problem["text"] == "2 uncorrected ECC errors since the driver loaded"
    assert problem["severity"] == "error"


@pytest.mark.parametrize(
    "gpu",
    [FakeGpu(name="NVIDIA GeForce RTX 4090"), FakeGpu(name="GRID A100-20C", virtualization="vgpu")],
    ids=["consumer GPU", "vGPU guest"],
)
def test_a_gpu_without_ecc_says_so_instead_of_zero(
    gpu: FakeGpu, scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[gpu]))
    health = health_of(sampler)
    assert health["ecc"] is None
    assert health["retired_pages"] is None
    assert health["remapped_rows"] is None
    assert health["unavailable"]["ecc"] == "Not Supported"
    assert health["problems"] == []


def test_retired_pages_waiting_for_a_reset_are_a_fault(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[FakeGpu(name="Tesla V100-SXM2-32GB", retired_pages=(3, 1, True))]))
    health = health_of(sampler)
    assert health["retired_pages"] == {"single_bit": 3, "double_bit": 1, "pending": True}
    assert texts(health) == ["a page retirement waits for a reset"]

    scenario(Scenario(gpus=[FakeGpu(retired_pages=(3, 2, False))]))
    assert texts(health_of(sampler)) == ["2 pages retired for double-bit errors"]


def test_remapped_rows_a_failure_and_a_pending_remap_are_faults(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[FakeGpu(remapped_rows=(4, 1, False, True))]))
    health = health_of(sampler)
    assert health["remapped_rows"] == {
        "corrected": 4,
        "uncorrected": 1,
        "pending": False,
        "failed": True,
    }
    assert texts(health) == ["a row remapping failed"]
    scenario(Scenario(gpus=[FakeGpu(remapped_rows=(4, 1, True, False))]))
    assert texts(health_of(sampler)) == ["a row remapping waits for a reset"]


# --- XID events ----------------------------------------------------------------------


@pytest.fixture
def watch(scenario: WriteScenario) -> Iterator[Callable[..., XidWatch]]:
    made: list[XidWatch] = []

    def make(**options: Any) -> XidWatch:
        made.append(XidWatch(Nvml(retry_interval=0), wait_ms=100, **options).start())
        return made[-1]

    yield make
    for one in made:
        one.stop()


def test_an_xid_is_delivered_once_from_the_time_it_happens(
    scenario: WriteScenario, watch: Callable[..., XidWatch]
) -> None:
    before = time.time() - 60  # before the watch began: never delivered, as with NVML
    scenario(Scenario(gpus=[FakeGpu(), FakeGpu(xids=[(31, before)])]))
    xids = watch()
    until(lambda: xids.watching, "the watch waits for events", 30)
    assert xids.caught_up(time.time(), timeout=30)
    assert xids.events() == []

    happened = time.time()
    gpus = [FakeGpu(), FakeGpu(xids=[(31, before), (79, happened)])]
    scenario(Scenario(gpus=gpus))
    (event,) = until(xids.events, "XID 79 received", 30)
    assert (event.index, event.xid) == (1, 79)
    assert happened - 1 <= event.t <= time.time()

    scenario(Scenario(gpus=[*gpus, FakeGpu()]))  # a rewrite delivers nothing twice
    assert xids.caught_up(time.time(), timeout=30)
    assert xids.events() == [event]


def test_a_watch_stopped_and_started_again_watches_again(
    scenario: WriteScenario, watch: Callable[..., XidWatch]
) -> None:
    scenario(Scenario(gpus=[FakeGpu()]))
    xids = watch()
    until(lambda: xids.watching, "the watch waits for events", 30)
    xids.stop()
    assert not xids.watching
    xids.start()
    until(lambda: xids.watching, "the watch waits for events again", 30)
    at = time.time()
    scenario(Scenario(gpus=[FakeGpu(xids=[(48, at)])]))
    (event,) = until(xids.events, "XID 48 received", 30)
    assert event.xid == 48


def test_the_panel_shows_an_xid_with_its_time(scenario: WriteScenario, sampler: GpuSampler) -> None:
    at = time.time() + 2  # after the first sample has started the watch
    scenario(Scenario(gpus=[FakeGpu(xids=[(79, at)])]))
    sampler.sample_now()

    def xid_problems() -> list[dict[str, Any]]:
        return [p for p in health_of(sampler)["problems"] if p["kind"] == "xid"]

    (problem,) = until(xid_problems, "the XID in the panel's state", 30)
    assert problem["text"].startswith("XID 79 (fallen off the bus) at ")
    assert problem["severity"] == "error"


def test_an_event_set_is_freed_even_once_its_driver_is_gone(scenario: WriteScenario) -> None:
    """A watch stopped after the driver went (a test's next scenario, a driver unloaded)
    gives its set back: the fake driver holds 128, as a process of many servers' samplers
    would run out of."""
    nvml = Nvml(retry_interval=0)
    try:
        for _ in range(200):
            path = scenario(Scenario(gpus=[FakeGpu()]))
            made, refused = nvml.xid_events()
            assert refused == {}
            path.unlink()  # the driver is gone before the watch frees its set
            nvml.free_events(made)
    finally:
        nvml.shutdown()


@pytest.mark.parametrize(
    "gpu",
    [FakeGpu(mig=True), FakeGpu(virtualization="vgpu")],
    ids=["MIG", "vGPU guest"],
)
def test_a_gpu_without_events_says_xids_are_not_watched(
    gpu: FakeGpu, scenario: WriteScenario, watch: Callable[..., XidWatch]
) -> None:
    scenario(Scenario(gpus=[gpu, FakeGpu()]))
    xids = watch()
    until(lambda: xids.watching, "the watch waits for events", 30)
    assert xids.support(0) == "Not Supported"
    assert xids.support(1) is None


def test_waiting_for_xids_never_stalls_a_sample(
    scenario: WriteScenario, watch: Callable[..., XidWatch], sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[FakeGpu(util=55)]))
    # A wait that only an XID ends (or 10 minutes): a sample held up by it never comes.
    slow = XidWatch(Nvml(retry_interval=0), wait_ms=600_000).start()
    try:
        until(lambda: slow.watching, "the watch waits for events", 30)
        sampling = ThreadPoolExecutor(1).submit(sampler.sample_now)
        until(sampling.done, "a sample taken while the watch waits", 120)
        sampling.result()
        assert not slow.events(), "the watch's wait ended before the sample did"
        assert sampler.snapshot()["samples"]["gpu"][0]["util"] == [55]
    finally:  # told to stop, then an XID ends its wait: it shuts its NVML down as it ends
        slow.stop(timeout=0)
        scenario(Scenario(gpus=[FakeGpu(util=55, xids=[(79, time.time())])]))
        until(lambda: not slow.watching, "the watch ended, NVML shut down", 60)


# --- in the job's hints and a rank's death ----------------------------------------------


def test_the_hint_names_the_rank_of_a_throttled_gpu() -> None:
    watch = HintWatch(Thresholds(), {0: 2, 3: 3}, started=0.0)
    hot = GpuHealth(clock_reasons=0x40, sm_clock_mhz=620)
    since = time.time()
    watch.add(since, {3: GpuSample(80.0, 1.0, 80.0, hot, 1980), 2: GpuSample(80.0, 1.0, 80.0)})
    watch.add(since + 10, {3: GpuSample(80.0, 1.0, 80.0, hot, 1980)})

    (hint,) = watch.hints(since + 10, {})
    assert hint.kind == "gpu_throttle"
    assert hint.text == (
        f"GPU 3 (rank 3): thermal slowdown since {clock_time(since, seconds=False)}, "
        "31 % of its clock"
    )
    assert hint.value == 31


def test_a_death_with_an_xid_of_the_ranks_gpu_names_it() -> None:
    at = time.time()
    said = explain(3, -6, [], MemoryWatch(), [XidEvent(3, 79, at)])
    assert said == (
        f"rank 3 exited -6 (SIGABRT); GPU 3 reported XID 79 (fallen off the bus) at "
        f"{clock_time(at)}"
    )
    assert explain(3, -6, [], MemoryWatch()).startswith("rank 3 crashed: SIGABRT")


def test_an_answer_carries_the_figures_only_when_they_changed_after_its_since(
    scenario: WriteScenario, sampler: GpuSampler
) -> None:
    scenario(Scenario(gpus=[FakeGpu(ecc={"corrected_volatile": 1})]))
    sampler.sample_now()
    full = sampler.snapshot()
    assert full["state"][0]["health"]["ecc"]["corrected_volatile"] == 1
    held = full["samples"]["t"][-1]

    sampler.sample_now()
    increment = sampler.snapshot(since=held, inventory=full["inventory"])
    assert increment["state"][0]["health"] == {"problems": []}, "unchanged: the client has them"

    held = increment["samples"]["t"][-1]
    scenario(Scenario(gpus=[FakeGpu(ecc={"corrected_volatile": 2})]))
    sampler.sample_now()
    increment = sampler.snapshot(since=held, inventory=full["inventory"])
    assert increment["state"][0]["health"]["ecc"]["corrected_volatile"] == 2
