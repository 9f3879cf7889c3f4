"""A job's ranks on MIG slices (issue 41, item 4): on a GPU in MIG mode the slices are
what ranks are placed on, one each, only free ones; too few free is refused in one line
saying which are free; a machine without a GPU in MIG mode is placed as before.

The rules on plain objects first, then the jobs service's ``place`` against the fake
driver's H100 in MIG mode (three slices, the first held by a process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.gpu.nvml import GpuInfo, GpuProcess, MigDevice
from jupyter_air.gpu.placement import NoRoom, Unit, choose, default_count, units
from jupyter_air.identity import Identity
from jupyter_air.job_dir import JobDir
from jupyter_air.jobs.capacity import held_by
from jupyter_air.jobs.node.launch import NodeLaunch, node_specs
from jupyter_air.jobs.request import Program
from jupyter_air.jobs.service import JobService, Refused
from jupyter_air.jobs.spec import JobKind
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.workload_file import Submission
from jupyter_air.kernel.options import OptionError, Options
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario, h100_mig_slices

OVERRIDE = "--oversubscribe"
GIB = 1024


def mig_uuid(gpu: int, slot: int) -> str:
    """The UUID the fake driver gives slice ``slot`` of GPU ``gpu``."""
    return f"MIG-fa4e{gpu:04x}-0000-4000-8000-{slot:012x}"


def h100(index: int, mig: bool | None) -> GpuInfo:
    return GpuInfo(index, "NVIDIA H100 80GB HBM3", f"GPU-{index}", 80 * GIB, 700.0, mig)


def slice_of(gpu: int, slot: int, profile: str, pid: int | None = None) -> MigDevice:
    processes = (GpuProcess(pid, 1024),) if pid is not None else ()
    return MigDevice(slot, mig_uuid(gpu, slot), slot + 1, 0, profile, 10 * GIB, 0.0, processes)


#: GPU 0 whole; GPU 1 in MIG mode: 3g.40gb held by a process, 2g.20gb and 1g.10gb free.
INVENTORY = [h100(0, False), h100(1, True)]
SLICES = {
    1: [slice_of(1, 0, "3g.40gb", pid=4242), slice_of(1, 1, "2g.20gb"), slice_of(1, 2, "1g.10gb")]
}


def on_mig_gpu(held: dict[str, str] | None = None) -> list[Unit]:
    """The places of a job that may use GPU 1 only (CUDA_VISIBLE_DEVICES=1)."""
    return units(["1"], INVENTORY, SLICES, held or {})


def test_a_gpu_in_mig_mode_offers_its_slices_and_a_whole_gpu_itself() -> None:
    found = units(["0", "1"], INVENTORY, SLICES, {mig_uuid(1, 1): "job 42"})
    assert [(str(u), u.device, u.busy) for u in found] == [
        ("GPU 0", "0", None),
        ("GPU 1 slice 0 (3g.40gb)", mig_uuid(1, 0), "a process"),
        ("GPU 1 slice 1 (2g.20gb)", mig_uuid(1, 1), "job 42"),
        ("GPU 1 slice 2 (1g.10gb)", mig_uuid(1, 2), None),
    ]
    by_uuid = units(["GPU-1"], INVENTORY, SLICES, {})
    assert [u.device for u in by_uuid] == [mig_uuid(1, n) for n in range(3)]
    assert units([mig_uuid(1, 2)], INVENTORY, SLICES, {}) == [found[3]], "one slice given: it"


def test_without_a_gpu_in_mig_mode_and_no_slice_asked_nothing_is_placed_here() -> None:
    whole = units(["0"], INVENTORY, SLICES, {})
    assert choose(whole, 4, None, oversubscribe=False, override=OVERRIDE) is None
    assert choose([], 4, None, oversubscribe=False, override=OVERRIDE) is None


def test_each_rank_gets_its_own_free_slice_in_order() -> None:
    chosen = choose(on_mig_gpu(), 2, None, oversubscribe=False, override=OVERRIDE)
    assert chosen is not None
    assert [u.device for u in chosen] == [mig_uuid(1, 1), mig_uuid(1, 2)]
    profile = choose(on_mig_gpu(), 1, "1g.10gb", oversubscribe=False, override=OVERRIDE)
    assert profile is not None
    assert [str(u) for u in profile] == ["GPU 1 slice 2 (1g.10gb)"]


def test_too_few_free_slices_are_refused_in_one_line_naming_the_free_and_the_busy() -> None:
    with pytest.raises(NoRoom) as raised:
        choose(on_mig_gpu(), 3, None, oversubscribe=False, override=OVERRIDE)
    assert str(raised.value) == (
        "3 ranks need 3 of the MIG slices (one each), and 2 are free: "
        "GPU 1 slice 1 (2g.20gb), GPU 1 slice 2 (1g.10gb); busy: GPU 1 slice 0 "
        "(3g.40gb, a process). Ask for at most 2, or pass --oversubscribe to share them"
    )


def test_a_profile_asked_for_counts_its_own_slices_and_names_the_other_free_ones() -> None:
    held = on_mig_gpu({mig_uuid(1, 2): "job 20261206-101010-abcdef"})
    with pytest.raises(NoRoom) as raised:
        choose(held, 1, "1g.10gb", oversubscribe=False, override=OVERRIDE)
    assert str(raised.value) == (
        "1 rank needs 1 of the MIG slices 1g.10gb (one each), and none is free; "
        "other free slices: GPU 1 slice 1 (2g.20gb); busy: GPU 1 slice 2 (1g.10gb, "
        "job 20261206-101010-abcdef). Wait for one to be freed, or pass --oversubscribe "
        "to share them"
    )
    assert "\n" not in str(raised.value)


def test_any_takes_slices_only_and_a_mixed_machine_places_whole_gpus_too() -> None:
    both = units(["0", "1"], INVENTORY, SLICES, {})
    mixed = choose(both, 2, None, oversubscribe=False, override=OVERRIDE)
    assert mixed is not None
    assert [u.device for u in mixed] == ["0", mig_uuid(1, 1)]
    slices = choose(both, 2, "any", oversubscribe=False, override=OVERRIDE)
    assert slices is not None
    assert [u.device for u in slices] == [mig_uuid(1, 1), mig_uuid(1, 2)]
    with pytest.raises(NoRoom, match=r"need 4 of the GPUs or MIG slices .* and 3 are free"):
        choose(both, 4, None, oversubscribe=False, override=OVERRIDE)


def test_oversubscribe_shares_the_free_slices_or_the_busy_ones_when_none_is() -> None:
    shared = choose(on_mig_gpu(), 3, None, oversubscribe=True, override=OVERRIDE)
    assert shared is not None
    assert [u.device for u in shared] == [mig_uuid(1, 1), mig_uuid(1, 2), mig_uuid(1, 1)]
    busy = choose(on_mig_gpu(), 2, "3g.40gb", oversubscribe=True, override=OVERRIDE)
    assert busy is not None
    assert [u.device for u in busy] == [mig_uuid(1, 0)] * 2


def test_slices_that_do_not_exist_are_refused_even_to_oversubscribe() -> None:
    with pytest.raises(NoRoom) as raised:
        choose(on_mig_gpu(), 1, "7g.80gb", oversubscribe=True, override=OVERRIDE)
    assert str(raised.value) == (
        "no MIG slice 7g.80gb on the GPUs this job may use: their slices are "
        "1g.10gb, 2g.20gb, 3g.40gb"
    )
    whole = units(["0"], INVENTORY, SLICES, {})
    with pytest.raises(NoRoom, match="no GPU this job may use is in MIG mode"):
        choose(whole, 1, "any", oversubscribe=True, override=OVERRIDE)


def test_the_default_is_one_rank_per_free_slice() -> None:
    assert default_count(on_mig_gpu(), None) == 2
    assert default_count(on_mig_gpu(), "1g.10gb") == 1
    assert default_count(on_mig_gpu({mig_uuid(1, 1): "x", mig_uuid(1, 2): "y"}), None) == 1


def test_a_mig_option_that_is_no_profile_or_on_a_cluster_is_refused_before_anything() -> None:
    with pytest.raises(ValueError, match=r"'2g' is no MIG profile: write one as 1g\.10gb, or any"):
        Submission.model_validate({"compute": {"mig": "2g"}})
    with pytest.raises(ValueError, match=r"compute\.mig is for 'backend: local'"):
        Submission.model_validate({"compute": {"mig": "any"}, "backend": "ray"})
    for profile in ("1g.10gb", "1c.3g.40gb", "1g.10gb+me", "any"):
        assert Submission.model_validate({"compute": {"mig": profile}}).compute.mig == profile
    with pytest.raises(OptionError, match=r"^--mig: '3gb' is no MIG profile"):
        Options(mig="3gb").validate()
    with pytest.raises(OptionError, match=r"^--mig is for the local backend"):
        Options(mig="any", backend="ray").validate()


def test_each_rank_of_a_node_gets_the_device_it_was_placed_on(tmp_path: Path) -> None:
    launch = NodeLaunch("job", 1, 0, 1, 2, "127.0.0.1", 29500, 0, {}, command=["true"])
    launch.gpus = [mig_uuid(0, 1), mig_uuid(0, 2)]
    specs = node_specs(launch, JobDir(tmp_path), cwd=None)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == launch.gpus


# -- the jobs service, against the fake driver -------------------------------------------


@pytest.fixture
def mig_h100(scenario: WriteScenario, monkeypatch: pytest.MonkeyPatch) -> None:
    """An H100 in MIG mode, its 3g.40gb slice held by a process, beside no other GPU."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    scenario(Scenario(gpus=[FakeGpu(mig=True, mig_devices=h100_mig_slices(4242))]))


def test_a_job_placed_on_slices_keeps_them_and_the_next_is_refused_saying_what_is_free(
    mig_h100: None, tmp_path: Path
) -> None:
    service = JobService(JobStore(tmp_path / "air"), Identity("alice"))
    placed = service.place(Submission.model_validate({}))
    assert placed.nproc_per_node == 2, "the default: one rank per free slice"
    spec = placed.spec(program_of("true"))
    assert dict(spec.backend.settings) == {
        "devices": [mig_uuid(0, 1), mig_uuid(0, 2)],
        "slices": ["GPU 0 slice 1 (2g.20gb)", "GPU 0 slice 2 (1g.10gb)"],
    }
    assert spec.tracking.tags == {
        "air.cuda_visible_devices": f"{mig_uuid(0, 1)},{mig_uuid(0, 2)}",
        "air.mig_slices": "GPU 0 slice 1 (2g.20gb), GPU 0 slice 2 (1g.10gb)",
    }

    first = service.store.create(spec, owner="alice")  # live: its slices are held
    with pytest.raises(Refused) as raised:
        service.place(Submission.model_validate({"compute": {"mig": "1g.10gb"}}))
    assert raised.value.field == "compute.mig"
    assert str(raised.value) == (
        "1 rank needs 1 of the MIG slices 1g.10gb (one each), and none is free; busy: "
        f"GPU 0 slice 2 (1g.10gb, job {first.id}). Wait for one to be freed, or pass "
        "--oversubscribe to share them"
    )
    bob = held_by([service.store.get(first.id)], "bob")
    assert set(bob.values()) == {"another user's job"}, "another's job is not named"

    service.store.update(first.id, status="SUCCEEDED")
    again = service.place(Submission.model_validate({"compute": {"mig": "1g.10gb"}}))
    assert again.settings["devices"] == [mig_uuid(0, 2)], "an ended job holds nothing"


def test_a_machine_without_a_gpu_in_mig_mode_is_placed_as_before(
    scenario: WriteScenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    scenario(Scenario(gpus=[FakeGpu(), FakeGpu(mig=False, mig_devices=h100_mig_slices(1))]))
    service = JobService(JobStore(tmp_path / "air"), Identity("alice"))
    placed = service.place(Submission.model_validate({}))
    assert (placed.nproc_per_node, dict(placed.settings)) == (2, {})
    assert placed.spec(program_of("true")).tracking.tags == {}
    with pytest.raises(Refused, match="3 ranks need 3 GPUs"):
        service.place(Submission.model_validate({}), nproc_per_node=3)
    with pytest.raises(Refused, match="no GPU this job may use is in MIG mode"):
        service.place(Submission.model_validate({"compute": {"mig": "any"}}))


def program_of(command: str) -> Program:
    return Program(JobKind.COMMAND, command=[command])
