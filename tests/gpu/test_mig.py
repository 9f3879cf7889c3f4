"""MIG (issue 41, item 4): an H100 in MIG mode with three slices, as the fake driver plays
it, read through jupyter_air's NVML module: each slice's profile, memory and process."""

from __future__ import annotations

from jupyter_air.gpu.nvml import MIB, GpuProcess, MigDevice, Nvml
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, MigSlice, Scenario, h100_mig_slices

GIB = 1024**3


def test_a_mig_gpu_lists_its_slices_with_profile_memory_and_process(
    scenario: WriteScenario,
) -> None:
    scenario(Scenario(gpus=[FakeGpu(mig=True, mig_devices=h100_mig_slices(4242)), FakeGpu()]))
    nvml = Nvml(retry_interval=0)
    try:
        mig, plain = nvml.read_all()
        assert nvml.inventory()[0].mig_mode is True
    finally:
        nvml.shutdown()
    assert mig.util is None  # NVML reports none for a MIG parent
    assert "util" in mig.unavailable
    assert mig.processes == ()  # the parent's list needs root: its slices say who holds it
    assert mig.mig_devices == (
        MigDevice(
            0,
            "MIG-fa4e0000-0000-4000-8000-000000000000",
            1,
            0,
            "3g.40gb",
            40 * 1024,
            12 * GIB / MIB,
            (GpuProcess(4242, 12 * 1024),),
        ),
        MigDevice(1, "MIG-fa4e0000-0000-4000-8000-000000000001", 5, 0, "2g.20gb", 20 * 1024, 0.0),
        MigDevice(2, "MIG-fa4e0000-0000-4000-8000-000000000002", 13, 0, "1g.10gb", 10 * 1024, 0.0),
    )
    assert plain.mig_devices == ()


def test_a_mig_capable_gpu_with_mig_off_has_no_slices(scenario: WriteScenario) -> None:
    slices = (MigSlice(1, 0, "7g.80gb", 80 * GIB),)
    scenario(Scenario(gpus=[FakeGpu(mig=False, mig_devices=slices, util=40)]))
    nvml = Nvml(retry_interval=0)
    try:
        (reading,) = nvml.read_all()
    finally:
        nvml.shutdown()
    assert (reading.util, reading.mig_devices) == (40.0, ())
