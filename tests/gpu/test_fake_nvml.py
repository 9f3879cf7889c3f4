"""The fake NVML driver, checked through the real pynvml.

Most tests load the fake into this process once (``load_in_process``) and point
``FAKE_NVML_SCENARIO`` at a scenario per test; the library re-reads the variable and
the file on every call. Two tests start a fresh interpreter to check the
``LD_LIBRARY_PATH`` route and the cross-process call log.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from tests.fake_nvml import (
    OLD_DRIVER_LACKS,
    FakeGpu,
    Scenario,
    build_library,
    call_count,
    count_calls,
    default_uuid,
    env_for,
    load_in_process,
    read_call_log,
    write_scenario_text,
)

GiB = 1024**3


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return build_library()


class Driver:
    """The fake as this process sees it: set the scenario, init NVML (undone at teardown)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = tmp_path / "scenario.txt"
        self._monkeypatch = monkeypatch
        self._inits = 0

    def use(self, scenario: Scenario | str) -> Path:
        if isinstance(scenario, str):
            write_scenario_text(self.path, textwrap.dedent(scenario))
        else:
            scenario.write(self.path)
        self._monkeypatch.setenv("FAKE_NVML_SCENARIO", str(self.path))
        return self.path

    def init(self, scenario: Scenario | str | None = None) -> None:
        if scenario is not None:
            self.use(scenario)
        pynvml.nvmlInit()
        self._inits += 1

    def shutdown(self) -> None:
        pynvml.nvmlShutdown()
        self._inits -= 1

    def shutdown_all(self) -> None:
        while self._inits > 0:
            self.shutdown()


@pytest.fixture
def driver(lib_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Driver]:
    load_in_process(lib_dir)
    monkeypatch.delenv("FAKE_NVML_SCENARIO", raising=False)
    monkeypatch.delenv("FAKE_NVML_CALL_LOG", raising=False)
    d = Driver(tmp_path, monkeypatch)
    yield d
    d.shutdown_all()


def handle(index: int = 0) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def readings(getter: Callable[[], object], n: int) -> list[object]:
    """n successive results of getter; an NVML error shows as its exception class."""
    out: list[object] = []
    for _ in range(n):
        try:
            out.append(getter())
        except pynvml.NVMLError as e:
            out.append(type(e))
    return out


# --- initialisation ---------------------------------------------------------------


def test_without_scenario_the_driver_is_not_loaded(driver: Driver) -> None:
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_scenario_path_naming_no_file_means_driver_not_loaded(
    driver: Driver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(tmp_path / "absent.txt"))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


@pytest.mark.parametrize(
    ("init_error", "exception"),
    [
        ("DRIVER_NOT_LOADED", pynvml.NVMLError_DriverNotLoaded),
        (18, pynvml.NVMLError_LibRmVersionMismatch),
        ("NO_PERMISSION", pynvml.NVMLError_NoPermission),
    ],
)
def test_init_error_makes_nvml_init_fail(
    driver: Driver, init_error: int | str, exception: type[Exception]
) -> None:
    driver.use(Scenario(gpus=[FakeGpu()], init_error=init_error))
    with pytest.raises(exception):
        pynvml.nvmlInit()


def test_calls_before_init_are_uninitialized(driver: Driver) -> None:
    driver.use(Scenario(gpus=[FakeGpu()]))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_shutdown_balances_init(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu()]))
    driver.init()
    driver.shutdown()
    assert pynvml.nvmlDeviceGetCount() == 1  # one init still outstanding
    driver.shutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_malformed_scenario_fails_every_call_with_unknown(driver: Driver) -> None:
    driver.use("gpu\nutil ten\n")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()


# --- system and enumeration ---------------------------------------------------------


def test_system_versions_come_from_the_scenario(driver: Driver) -> None:
    driver.init(Scenario(driver_version="535.104.05", cuda_driver_version=12020))
    assert pynvml.nvmlSystemGetDriverVersion() == "535.104.05"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12020
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12020
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.535.104.05"


@pytest.mark.parametrize("n", [0, 1, 2, 8])
def test_device_count_names_uuids_and_indices(driver: Driver, n: int) -> None:
    gpus = [FakeGpu(name=f"NVIDIA A100-SXM4-40GB #{i}") for i in range(n)]
    driver.init(Scenario(gpus=gpus))
    assert pynvml.nvmlDeviceGetCount() == n
    for i in range(n):
        h = handle(i)
        assert pynvml.nvmlDeviceGetIndex(h) == i
        assert pynvml.nvmlDeviceGetName(h) == f"NVIDIA A100-SXM4-40GB #{i}"
        assert pynvml.nvmlDeviceGetUUID(h) == default_uuid(i)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        handle(n)


def test_explicit_uuid_finds_the_device(driver: Driver) -> None:
    uuid = "GPU-12345678-abcd-ef01-2345-6789abcdef01"
    driver.init(Scenario(gpus=[FakeGpu(), FakeGpu(uuid=uuid)]))
    assert pynvml.nvmlDeviceGetUUID(handle(1)) == uuid
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == 1


# --- values -------------------------------------------------------------------------


def test_memory_info_v1_reports_total_used_and_free(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(mem_total=80 * GiB, mem_used=30 * GiB)]))
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle())
    assert (mem.total, mem.used, mem.free) == (80 * GiB, 30 * GiB, 50 * GiB)


def test_memory_info_v2_splits_reserved_out_of_used(driver: Driver) -> None:
    gpu = FakeGpu(mem_total=80 * GiB, mem_used=30 * GiB, mem_reserved=GiB // 2)
    driver.init(Scenario(gpus=[gpu]))
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle(), version=pynvml.nvmlMemory_v2)
    assert mem.total == 80 * GiB
    assert mem.reserved == GiB // 2
    assert mem.used == 30 * GiB - GiB // 2
    assert mem.free == 50 * GiB
    assert mem.total == mem.reserved + mem.used + mem.free


def test_memory_info_v2_on_an_old_driver_is_function_not_found(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(mem_used=GiB, memory_v2=False)]))
    h = handle()
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert pynvml.nvmlDeviceGetMemoryInfo(h).used == GiB


def test_utilization_temperature_and_power(driver: Driver) -> None:
    gpu = FakeGpu(util=87, mem_util=42, temp=66, power=412_345, power_limit=650_000)
    driver.init(Scenario(gpus=[gpu]))
    h = handle()
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (87, 42)
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 66
    assert pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU) == 66
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 412_345
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 650_000
    assert pynvml.nvmlDeviceGetPowerManagementLimit(h) == 650_000  # defaults to the limit


def test_optional_fields_are_not_supported_until_given(driver: Driver) -> None:
    given = FakeGpu(
        fan=35, energy=123_456_789, clocks={"sm": 1410}, max_clocks={"sm": 1980, "mem": 1593}
    )
    driver.init(Scenario(gpus=[FakeGpu(), given]))
    bare, full = handle(0), handle(1)
    getters: list[Callable[[object], object]] = [
        pynvml.nvmlDeviceGetFanSpeed,
        pynvml.nvmlDeviceGetTotalEnergyConsumption,
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
    ]
    for getter in getters:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            getter(bare)
    assert pynvml.nvmlDeviceGetFanSpeed(full) == 35
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(full) == 123_456_789
    assert pynvml.nvmlDeviceGetClockInfo(full, pynvml.NVML_CLOCK_SM) == 1410
    assert pynvml.nvmlDeviceGetMaxClockInfo(full, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetMaxClockInfo(full, pynvml.NVML_CLOCK_MEM) == 1593
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetClockInfo(full, pynvml.NVML_CLOCK_GRAPHICS)


def test_running_processes(driver: Driver) -> None:
    gpu = FakeGpu(processes=[(4242, 3 * GiB), (4343, 512 * 1024**2)])
    driver.init(Scenario(gpus=[gpu, FakeGpu()]))
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 3 * GiB), (4343, 512 * 1024**2)]
    assert {(p.gpuInstanceId, p.computeInstanceId) for p in procs} == {(0xFFFFFFFF, 0xFFFFFFFF)}
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle(1)) == []
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle(0)) == []
    assert pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle(0)) == []


def test_running_processes_follow_nvmls_size_protocol(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(processes=[(1, 10), (2, 20), (3, 30)])]))
    fn = ctypes.CDLL("libnvidia-ml.so.1").nvmlDeviceGetComputeRunningProcesses_v3
    count = ctypes.c_uint(0)
    assert fn(handle(), ctypes.byref(count), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3
    too_small = (pynvml.c_nvmlProcessInfo_v3_t * 2)()
    count.value = 2
    assert fn(handle(), ctypes.byref(count), too_small) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3
    roomy = (pynvml.c_nvmlProcessInfo_v3_t * 8)()
    count.value = 8
    assert fn(handle(), ctypes.byref(count), roomy) == pynvml.NVML_SUCCESS
    assert count.value == 3
    assert [(roomy[i].pid, roomy[i].usedGpuMemory) for i in range(3)] == [
        (1, 10), (2, 20), (3, 30)
    ]  # fmt: skip


def test_graphics_processes_and_process_query_errors(driver: Driver) -> None:
    gpu = FakeGpu(processes="NO_PERMISSION", graphics_processes=[(77, 1024)])
    driver.init(Scenario(gpus=[gpu]))
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle())
    [proc] = pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle())
    assert (proc.pid, proc.usedGpuMemory) == (77, 1024)


# --- sequences and injected errors ---------------------------------------------------


def test_sequences_advance_per_call_and_hold_the_last_value(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=[10, 20, 30], power=[1000, 2000])]))
    h = handle()
    assert [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for _ in range(5)] == [10, 20, 30, 30, 30]
    assert [pynvml.nvmlDeviceGetPowerUsage(h) for _ in range(3)] == [1000, 2000, 2000]


def test_sequences_are_per_gpu(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(temp=[50, 60]), FakeGpu(temp=[70, 80])]))
    h0, h1 = handle(0), handle(1)
    read = pynvml.nvmlDeviceGetTemperature
    assert [read(h0, 0), read(h1, 0), read(h0, 0), read(h1, 0)] == [50, 70, 60, 80]


def test_an_error_in_a_sequence_fails_that_call_only(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=[10, "TIMEOUT", 30, "UNKNOWN"])]))
    h = handle()
    assert readings(lambda: pynvml.nvmlDeviceGetUtilizationRates(h).gpu, 5) == [
        10,
        pynvml.NVMLError_Timeout,
        30,
        pynvml.NVMLError_Unknown,
        pynvml.NVMLError_Unknown,
    ]


def test_not_supported_temperature_leaves_other_fields_working(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(temp="NOT_SUPPORTED", util=55, power=90_000)]))
    h = handle()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 55
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 90_000
    assert pynvml.nvmlDeviceGetMemoryInfo(h).total == 80 * GiB


def test_memory_errors_can_be_injected(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(mem_used=[GiB, "GPU_IS_LOST", 2 * GiB])]))
    h = handle()
    assert readings(lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used, 3) == [
        GiB,
        pynvml.NVMLError_GpuIsLost,
        2 * GiB,
    ]


def test_a_lost_gpu_fails_every_call_while_others_work(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=10), FakeGpu(lost=True), FakeGpu(util=30)]))
    assert pynvml.nvmlDeviceGetCount() == 3  # a lost GPU is still enumerated
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        handle(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(0)).gpu == 10
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(2)).gpu == 30


def test_a_gpu_lost_after_its_handle_was_taken(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(), FakeGpu()]))
    h0, h1 = handle(0), handle(1)
    driver.use(Scenario(gpus=[FakeGpu(util=5), FakeGpu(lost=True)]))
    per_device_calls: list[Callable[[object], object]] = [
        pynvml.nvmlDeviceGetIndex,
        pynvml.nvmlDeviceGetName,
        pynvml.nvmlDeviceGetUUID,
        pynvml.nvmlDeviceGetMemoryInfo,
        pynvml.nvmlDeviceGetUtilizationRates,
        lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        pynvml.nvmlDeviceGetPowerUsage,
        pynvml.nvmlDeviceGetEnforcedPowerLimit,
        pynvml.nvmlDeviceGetComputeRunningProcesses,
    ]
    for call in per_device_calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call(h1)
    assert pynvml.nvmlDeviceGetUtilizationRates(h0).gpu == 5


# --- rewriting the scenario ---------------------------------------------------------


def test_rewriting_the_scenario_changes_values_and_restarts_sequences(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=[1, 2, 3])]))
    h = handle()
    assert [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for _ in range(2)] == [1, 2]
    driver.use(Scenario(gpus=[FakeGpu(util=[7, 8]), FakeGpu()]))
    assert pynvml.nvmlDeviceGetCount() == 2
    assert [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for _ in range(3)] == [7, 8, 8]


def test_every_rewrite_is_seen_even_when_size_and_time_match(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=1)]))
    h = handle()
    for value in [2, 3, 4, 5, 6, 7, 8, 9] * 3:  # same length each time, back to back
        driver.use(Scenario(gpus=[FakeGpu(util=value)]))
        assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == value


def test_removing_the_scenario_unloads_the_driver(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu()]))
    driver.path.unlink()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlDeviceGetCount()


def test_sampling_thread_survives_concurrent_rewrites(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(util=11)]))
    h = handle()
    seen: set[int] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            while not stop.is_set():
                seen.add(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=sample)
    thread.start()
    try:
        for i in range(200):
            driver.use(Scenario(gpus=[FakeGpu(util=22 if i % 2 else 11)]))
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert seen == {11, 22}


# --- error strings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported"),
        (pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
        (pynvml.NVML_ERROR_UNKNOWN, "Unknown Error"),
        (12345, "Unknown Error"),
    ],
)
def test_error_strings_match_nvml(driver: Driver, code: int, text: str) -> None:
    assert pynvml.nvmlErrorString(code) == text


# --- MIG and virtualization -------------------------------------------------------


def test_a_mig_enabled_gpu_refuses_utilization_and_the_parents_processes(
    driver: Driver,
) -> None:
    driver.init(Scenario(gpus=[FakeGpu(mig=True, mem_used=GiB, processes=[(7, 8)]), FakeGpu()]))
    mig, plain = handle(0), handle(1)
    assert pynvml.nvmlDeviceGetMigMode(mig) == [1, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(mig)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetComputeRunningProcesses(mig)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2(mig)
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).used == GiB
    assert pynvml.nvmlDeviceGetTemperature(mig, pynvml.NVML_TEMPERATURE_GPU) == 40
    with pytest.raises(pynvml.NVMLError_NotSupported):  # not MIG-capable
        pynvml.nvmlDeviceGetMigMode(plain)
    assert pynvml.nvmlDeviceGetUtilizationRates(plain).gpu == 0


def test_mig_capable_but_disabled(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(mig=False, util=5)]))
    assert pynvml.nvmlDeviceGetMigMode(handle()) == [0, 0]
    assert pynvml.nvmlDeviceGetUtilizationRates(handle()).gpu == 5


def test_virtualization_mode(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(), FakeGpu(virtualization="vgpu")]))
    assert pynvml.nvmlDeviceGetVirtualizationMode(handle(0)) == 0
    assert (
        pynvml.nvmlDeviceGetVirtualizationMode(handle(1))
        == pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU
    )


# --- driver branches without a function ---------------------------------------------


def test_a_build_without_functions_does_not_export_them(tmp_path: Path) -> None:
    """What pynvml raises on a driver without the ``_v3`` process queries."""
    scenario = Scenario(without=OLD_DRIVER_LACKS, gpus=[FakeGpu(processes=[(7, 8)])])
    child = run_child(
        """
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        raised = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3",
                     "nvmlDeviceGetComputeRunningProcesses"):
            try:
                getattr(pynvml, name)(h)
            except Exception as err:
                raised[name] = type(err).__name__
        print(json.dumps({
            "raised": raised,
            "v2": [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h)],
            "exports_v3": hasattr(pynvml.nvmlLib, "nvmlDeviceGetComputeRunningProcesses_v3"),
            "exports_v2": hasattr(pynvml.nvmlLib, "nvmlDeviceGetComputeRunningProcesses_v2"),
        }))
        """,
        env_for(build_library(without=OLD_DRIVER_LACKS), scenario.write(tmp_path / "s.txt")),
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {
        "raised": {
            "nvmlDeviceGetComputeRunningProcesses_v3": "NVMLError_FunctionNotFound",
            # pynvml's unversioned wrapper: not an NVMLError at all
            "nvmlDeviceGetComputeRunningProcesses": "NVMLLibraryMismatchError",
        },
        "v2": [7],
        "exports_v3": False,
        "exports_v2": True,
    }


def test_a_scenario_without_a_function_is_refused_by_a_build_that_exports_it(
    driver: Driver, capfd: pytest.CaptureFixture[str]
) -> None:
    driver.use(Scenario(without=["nvmlDeviceGetMemoryInfo_v2"], gpus=[FakeGpu()]))
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()
    assert "this build exports (see build_library(without=)): nvmlDeviceGetMemoryInfo_v2" in (
        capfd.readouterr().err
    )


def test_without_names_must_be_nvml_functions(driver: Driver) -> None:
    with pytest.raises(ValueError, match="not an NVML function name: 'rm -rf'"):
        build_library(without=["rm -rf"])
    driver.use("without nvmlDeviceGetNoSuchThing\n")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()


# --- the documented text format --------------------------------------------------------


def test_hand_written_scenario_in_the_documented_format(driver: Driver) -> None:
    driver.init(
        """\
        # two GPUs, the second one idle
        driver_version 560.35.03
        cuda_driver_version 12060
        gpu
        name NVIDIA GeForce RTX 4090
        util 10 NVML_ERROR_TIMEOUT 90
        mem_util 3
        mem_total 25757220864
        mem_used 1073741824
        process 99 1073741824
        gpu
        uuid GPU-deadbeef-0000-0000-0000-000000000000
        """
    )
    h0, h1 = handle(0), handle(1)
    assert pynvml.nvmlSystemGetDriverVersion() == "560.35.03"
    assert pynvml.nvmlDeviceGetName(h0) == "NVIDIA GeForce RTX 4090"
    assert readings(lambda: pynvml.nvmlDeviceGetUtilizationRates(h0).gpu, 3) == [
        10,
        pynvml.NVMLError_Timeout,
        90,
    ]
    assert pynvml.nvmlDeviceGetMemoryInfo(h0).free == 25757220864 - 1073741824
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h0)] == [99]
    assert pynvml.nvmlDeviceGetUUID(h1) == "GPU-deadbeef-0000-0000-0000-000000000000"
    with pytest.raises(pynvml.NVMLError_NotSupported):  # numeric fields not given
        pynvml.nvmlDeviceGetUtilizationRates(h1)


@pytest.mark.parametrize(
    ("gpu", "complaint"),
    [
        (FakeGpu(temp="NOT_SUPORTED"), "unknown NVML error name 'NOT_SUPORTED'"),
        (FakeGpu(util=[]), "gpu 0 util: a sequence needs at least one item"),
        (FakeGpu(name="two\nlines"), "gpu 0 name: need 1..95 bytes on one line"),
        (FakeGpu(clocks={"shader": 1}), "gpu 0: unknown clock 'shader'"),
        (FakeGpu(virtualization="vm"), "gpu 0: unknown virtualization mode 'vm'"),
    ],
)
def test_scenario_rejects_what_the_library_could_not_read(gpu: FakeGpu, complaint: str) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        Scenario(gpus=[gpu]).render()


# --- call accounting ------------------------------------------------------------------


def test_calls_are_counted_in_process(driver: Driver) -> None:
    driver.init(Scenario(gpus=[FakeGpu(), FakeGpu()]))
    before = call_count("nvmlDeviceGetUtilizationRates")
    for i in (0, 1, 1):
        pynvml.nvmlDeviceGetUtilizationRates(handle(i))
    assert call_count("nvmlDeviceGetUtilizationRates") - before == 3
    assert call_count("noSuchFunction") == 0


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_subprocess_finds_the_fake_through_ld_library_path(lib_dir: Path, tmp_path: Path) -> None:
    scenario = Scenario(
        gpus=[FakeGpu(name="NVIDIA L4", util=[33, 44], processes=[(7, 8)]), FakeGpu(lost=True)]
    ).write(tmp_path / "scenario.txt")
    child = run_child(
        """
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            pynvml.nvmlDeviceGetHandleByIndex(1)
            lost = False
        except pynvml.NVMLError_GpuIsLost:
            lost = True
        print(json.dumps({
            "count": pynvml.nvmlDeviceGetCount(),
            "name": pynvml.nvmlDeviceGetName(h),
            "util": [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for _ in range(3)],
            "pids": [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)],
            "lost": lost,
        }))
        """,
        env_for(lib_dir, scenario),
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {
        "count": 2,
        "name": "NVIDIA L4",
        "util": [33, 44, 44],
        "pids": [7],
        "lost": True,
    }


def test_the_call_log_shows_another_process_sampling(lib_dir: Path, tmp_path: Path) -> None:
    scenario = Scenario(gpus=[FakeGpu(), FakeGpu()]).write(tmp_path / "scenario.txt")
    log = tmp_path / "calls.log"
    started = time.time()
    child = run_child(
        """
        import os, pynvml
        pynvml.nvmlInit()
        for _ in range(3):
            for i in range(pynvml.nvmlDeviceGetCount()):
                pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i))
        print(os.getpid())
        """,
        env_for(lib_dir, scenario, call_log=log),
    )
    assert child.returncode == 0, child.stderr
    pid = int(child.stdout)
    entries = read_call_log(log, pid=pid)
    util_calls = [
        (t, index) for t, name, index in entries if name == "nvmlDeviceGetUtilizationRates"
    ]
    assert [index for _, index in util_calls] == [0, 1, 0, 1, 0, 1]
    assert all(started - 1 <= when <= time.time() + 1 for when, _ in util_calls)
    assert ("nvmlInitWithFlags", -1) in [(name, index) for _, name, index in entries]
    assert count_calls(log, "nvmlDeviceGetUtilizationRates", since=started) == 6
    assert count_calls(log, "nvmlDeviceGetUtilizationRates", pid=pid + 1) == 0
