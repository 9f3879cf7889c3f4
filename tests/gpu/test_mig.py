"""MIG (issue 41, item 4): an H100 in MIG mode with three slices, as the fake driver plays
it, read through jupyter_air's NVML module: each slice's profile, memory and process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from jupyter_air.gpu.nvml import MIB, GpuProcess, MigDevice, Nvml
from jupyter_air.gpu.sampler import GpuSampler
from jupyter_air.identity import Identity
from jupyter_air.jobs.service import JobService
from jupyter_air.jobs.store import JobStore
from jupyter_air.server.gpu_handlers import hide_others
from tests.conftest import WriteScenario
from tests.factories import job_spec
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


def test_the_panels_state_lists_each_slice_and_hides_another_users_process_on_it(
    scenario: WriteScenario, tmp_path: Path
) -> None:
    """A slice names its processes by their place in the GPU's list, so that a process of
    a job the caller may not view, hidden there, is hidden on its slice too."""
    store = JobStore(tmp_path / "air")
    job = store.create(job_spec("command", command=["true"]), owner="alice")
    scenario(Scenario(gpus=[FakeGpu(mig=True, mig_devices=h100_mig_slices(4242))]))
    sampler = GpuSampler(interval=3600.0)
    try:
        doc = sampler.snapshot()
    finally:
        sampler.stop()
    (state,) = doc["state"]
    assert [(s["profile"], s["mem_total_mib"], s["processes"]) for s in state["mig"]] == [
        ("3g.40gb", 40 * 1024, [0]),
        ("2g.20gb", 20 * 1024, []),
        ("1g.10gb", 10 * 1024, []),
    ]
    assert [(p["pid"], p["mem_mib"]) for p in state["processes"]] == [(4242, 12 * 1024)]

    state["processes"][0]["owner"] = {"kind": "job", "id": job.id, "name": "secret"}
    asyncio.run(hide_others(JobService(store, Identity("bob")), doc))
    assert state["processes"] == [
        {"pid": None, "name": None, "mem_mib": 12 * 1024, "owner": {"kind": "other"}}
    ]
    assert state["mig"][0]["processes"] == [0]  # a place, not a pid
    assert "4242" not in json.dumps(doc["state"])
