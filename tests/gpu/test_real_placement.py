"""A job's placement on a real driver (scripts/gpu-check; skipped where none answers): what
the fake driver plays for MIG placement, checked against NVIDIA's. A GPU in MIG mode
offers its slices, each by a ``MIG-`` UUID and a profile read from its name; any other
GPU offers itself, placed as before (tests/gpu/test_placement.py has the rules)."""

from __future__ import annotations

import pytest

from jupyter_air.gpu.nvml import Nvml
from jupyter_air.gpu.placement import PROFILE
from jupyter_air.jobs.capacity import check_here, units_here

pytestmark = pytest.mark.gpu


def test_each_gpu_offers_itself_or_its_slices_by_mig_uuid_and_profile(
    nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = units_here({})
    inventory = nvml.inventory()
    for info in inventory:
        mine = [unit for unit in found if unit.gpu == info.index]
        if not info.mig_mode:
            assert [unit.device for unit in mine] == [str(info.index)]
            continue
        assert len(mine) == len(nvml.mig_devices(info.index)), "every slice has a UUID"
        for unit in mine:
            assert unit.device.startswith("MIG-"), unit
            assert unit.profile is not None, unit
            assert PROFILE.fullmatch(unit.profile), unit
    if any(info.mig_mode for info in inventory):
        chosen = check_here(1, "--oversubscribe", mig="any", oversubscribe=True)
        assert chosen is not None
        assert chosen[0].mig
    else:
        assert check_here(1, "--oversubscribe") is None, "no GPU in MIG mode: placed as before"
