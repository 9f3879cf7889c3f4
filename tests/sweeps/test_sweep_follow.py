"""A cell following a sweep whose driver exits: started again and said, up to a point."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.service import Conflict
from jupyter_air.kernel import sweep_launch
from jupyter_air.kernel.sweep_launch import DRIVER_RESTARTS, SweepFailed
from jupyter_air.sweeps import store


@dataclass
class Drivers:
    """A sweep service whose drivers exit as they start, logging why (``resume``)."""

    home: Path
    ended: bool = False
    started: list[str] = field(default_factory=list)

    @property
    def jobs(self) -> Any:
        return self

    def resume(self, sweep_id: str) -> None:
        if self.ended:
            raise Conflict(f"sweep {sweep_id} already ended (completed)")
        self.started.append(sweep_id)
        log = self.home / store.DIR / f"{sweep_id}.log"
        with log.open("a") as out:
            out.write(f"Traceback ...\nOperationalError: disk I/O error ({len(self.started)})\n")


def test_a_driver_that_keeps_exiting_is_started_again_then_fails_the_cell_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / store.DIR).mkdir()
    drivers = Drivers(tmp_path)
    restarts = 0
    for _ in range(DRIVER_RESTARTS):
        restarts = sweep_launch._restart(drivers, "sw-1", restarts)  # type: ignore[arg-type]
    said = capsys.readouterr().out.splitlines()
    assert len(said) == DRIVER_RESTARTS == len(drivers.started)
    assert said[0].startswith("Sweep sw-1's driver exited, started again: it logged nothing")
    assert said[-1].endswith(
        f"disk I/O error ({DRIVER_RESTARTS - 1}) (log: {tmp_path}/sweeps/sw-1.log)"
    )
    with pytest.raises(SweepFailed) as failed:
        sweep_launch._restart(drivers, "sw-1", restarts)  # type: ignore[arg-type]
    assert f"driver exited {DRIVER_RESTARTS + 1} times: OperationalError" in str(failed.value)
    assert "air sweep resume sw-1" in str(failed.value)
    assert len(drivers.started) == DRIVER_RESTARTS, "no driver started after the last"


def test_a_driver_that_exited_as_its_sweep_ended_is_not_started_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / store.DIR).mkdir()
    drivers = Drivers(tmp_path, ended=True)
    assert sweep_launch._restart(drivers, "sw-1", 0) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
