"""A sweep of one parameter in a real store, its trials told by hand (no job, no
driver): for the tests of what a sweep shows and says."""

from __future__ import annotations

from pathlib import Path

from jupyter_air.notify.targets import Target
from jupyter_air.sweeps import space
from jupyter_air.sweeps.store import Sweep, SweepStore
from jupyter_air.sweeps.sweep_file import SweepFile


def lr_sweep(
    home: Path, values: list[tuple[float, float | None]], notify: tuple[Target, ...] = ()
) -> tuple[SweepStore, Sweep]:
    """A sweep of ``lr`` minimizing val_loss, owned by alice, with a trial for each
    (lr, loss): completed with that loss, or running where the loss is None."""
    spec = SweepFile.model_validate(
        {
            "experiment_name": "toy",
            "command": "python train.py",
            "space": {"lr": {"type": "float", "low": 1e-4, "high": 1, "log": True}},
            "objective": {"minimize": "val_loss"},
            "trials": max(len(values), 1),
        }
    )
    store = SweepStore(home)
    sweep = store.create(
        spec,
        owner="alice",
        working_dir=home,
        tracking_uri="sqlite:///x.db",
        user="alice",
        notify=notify,
    )
    study = store.study(sweep)
    for lr, loss in values:
        study.enqueue_trial({"lr": lr})
        trial = study.ask(space.distributions(spec))
        if loss is not None:
            study.tell(trial, loss)
    return store, sweep
