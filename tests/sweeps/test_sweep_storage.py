"""A sweep's study at a URL its file gives (``storage:``): its trials live there, its
record in AIR_HOME says where; a URL's password is never shown; a URL that cannot hold
the study is refused in one line naming the field, with nothing made. (A real sweep at
such a URL runs in ``tests/schedules/test_schedule_sweep.py``.)"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import optuna
import pytest

from jupyter_air.identity import Identity
from jupyter_air.jobs.service import Refused
from jupyter_air.jobs.store import JobStore
from jupyter_air.sweeps import space, storage
from jupyter_air.sweeps.service import SweepService
from jupyter_air.sweeps.store import DATABASE, JOB_ID, SweepStore
from jupyter_air.sweeps.sweep_file import SweepFile

SECRET = "s3cret-pw"


def spec(url: str | None) -> SweepFile:
    doc: dict[str, Any] = {
        "experiment_name": "toy",
        "command": "python train.py",
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 1, "log": True}},
        "objective": {"minimize": "val_loss"},
        "trials": 2,
    }
    if url is not None:
        doc["storage"] = url
    return SweepFile.model_validate(doc)


def test_a_sweeps_trials_live_at_its_storage_and_its_record_in_air_home(tmp_path: Path) -> None:
    elsewhere = tmp_path / "team"
    elsewhere.mkdir()
    url = f"sqlite:///{elsewhere}/studies.db"
    store = SweepStore(tmp_path / "air")
    sweep = store.create(
        spec(url), owner="alice", working_dir=tmp_path, tracking_uri="sqlite:///x.db", user="a"
    )
    assert stat.S_IMODE((elsewhere / "studies.db").stat().st_mode) == 0o600
    study = store.study(sweep)
    trial = study.ask(space.distributions(sweep.spec))
    store.set_trial_attrs(sweep.id, trial.number, {JOB_ID: "j-1"})
    study.tell(trial, 0.5)

    # The study is Optuna's own at that URL, readable by Optuna's tools ...
    theirs = optuna.load_study(study_name=sweep.id, storage=url)
    assert [t.value for t in theirs.trials] == [0.5]
    assert theirs.trials[0].user_attrs[JOB_ID] == "j-1"
    # ... and a fresh store (another command) finds it from the record in AIR_HOME.
    again = SweepStore(tmp_path / "air")
    assert again.get(sweep.id).spec.storage == url
    assert [(t.value, t.job_id) for t in again.trials(sweep.id)] == [(0.5, "j-1")]
    assert again.trial_attrs(sweep.id, 0) == {JOB_ID: "j-1"}
    home = optuna.load_study(study_name=sweep.id, storage=f"sqlite:///{again.dir / DATABASE}")
    assert home.trials == []  # AIR_HOME holds the record, not the trials


def test_a_storage_url_is_shown_without_its_password_and_a_sqlite_path_made_absolute(
    tmp_path: Path,
) -> None:
    url = f"postgresql://bob:{SECRET}@db.example:5432/studies"
    assert storage.shown(url) == "postgresql://bob:***@db.example:5432/studies"
    assert storage.shown("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert storage.absolute("sqlite:///studies.db", tmp_path) == f"sqlite:///{tmp_path}/studies.db"
    assert storage.absolute("sqlite:////abs/s.db", tmp_path) == "sqlite:////abs/s.db"
    assert storage.absolute(url, tmp_path) == url


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("not a url", "not a database URL"),
        ("redis://localhost/0", "'redis' is not a database Optuna keeps studies in"),
        ("sqlite://", "a SQLite storage is a file"),
        ("sqlite:///:memory:", "a SQLite storage is a file"),
    ],
)
def test_a_bad_storage_url_is_refused_naming_the_field(url: str, said: str) -> None:
    from jupyter_air.jobs.workload_file import WorkloadError
    from jupyter_air.sweeps.sweep_file import from_dict

    with pytest.raises(WorkloadError) as err:
        from_dict({**spec(None).model_dump(mode="json"), "storage": url})
    assert str(err.value).startswith("storage: ")
    assert said in str(err.value)


def test_a_storage_that_cannot_hold_the_study_is_refused_with_nothing_made(
    tmp_path: Path,
) -> None:
    jobs = JobStore(tmp_path / "air")
    service = SweepService(jobs, Identity("alice"))

    def refused(url: str) -> str:
        with pytest.raises(Refused) as err:
            service.create(spec(url), tmp_path, "sqlite:///x.db", "alice")
        assert err.value.field == "storage"
        assert "\n" not in str(err.value)
        return str(err.value)

    # A server that does not answer (or whose driver is missing): its password unsaid.
    said = refused(f"postgresql://bob:{SECRET}@127.0.0.1:9/studies")
    assert SECRET not in said
    assert "postgresql://bob:***@127.0.0.1:9/studies" in said
    assert "is not a directory" in refused(f"sqlite:///{tmp_path}/missing/studies.db")
    own = f"sqlite:///{service.store.dir / DATABASE}"
    assert "AIR_HOME's own store" in refused(own)
    assert service.sweeps() == []


def test_the_magics_storage_flag_and_sweeps_argument_give_the_sweep_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air import sweep
    from jupyter_air.jobs.workload_file import WorkloadError
    from jupyter_air.kernel.options import Options
    from jupyter_air.kernel.sweep_launch import sweep_spec
    from jupyter_air.kernel.sweep_magic import flag_of, parsed

    def magic(url: str) -> SweepFile:
        line = f"--trials 2 --minimize loss --space 'x: int(0, 3)' --storage {url}"
        return sweep_spec(
            parsed(line)[1],
            Options().validate(),
            experiment="toy",
            run_name="toy",
            label="%%air_sweep",
            name=flag_of,
        )

    assert magic("sqlite:///studies.db").storage == "sqlite:///studies.db"
    with pytest.raises(WorkloadError, match=r"^--storage: 'redis' is not a database"):
        magic("redis://cache/0")

    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(ValueError, match=r"^storage=: a SQLite storage is a file"):
        sweep(lambda: None, {"x": "int(0, 3)"}, objective="loss", trials=2, storage="sqlite://")
    assert SweepStore(tmp_path / "air").sweeps() == []


def test_a_sweep_whose_study_cannot_be_read_now_is_still_shown_saying_why(tmp_path: Path) -> None:
    """Its record is in AIR_HOME: ``air sweep list/get`` show it, and a schedule's task
    waits for its trials rather than failing (a database server down for a while)."""
    from jupyter_air.schedules import sweep_task
    from jupyter_air.sweeps.store import SweepStatus

    elsewhere = tmp_path / "team"
    elsewhere.mkdir()
    home = tmp_path / "air"
    store = SweepStore(home)
    sweep = store.create(
        spec(f"sqlite:///{elsewhere}/studies.db"),
        owner="alice",
        working_dir=tmp_path,
        tracking_uri="sqlite:///x.db",
        user="alice",
    )
    store.end(sweep.id, SweepStatus.COMPLETED)
    (elsewhere / "studies.db").unlink()
    elsewhere.rmdir()
    service = SweepService(JobStore(home), Identity("alice"))
    doc = service.document(service.get(sweep.id), with_trials=True)
    assert doc["status"] == "COMPLETED"
    assert doc["trials"] == []
    assert f"{elsewhere} is not a directory" in doc["storage_error"]
    assert sweep_task.outcome(home, sweep.id) is None
