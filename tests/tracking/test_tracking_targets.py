"""Where a job's runs go, said without MLflow: the user's one store unless a URI is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_air.tracking.targets import (
    absolute_tracking_uri,
    default_artifact_location,
    default_tracking_uri,
)

#: In a fresh process with ``AIR_HOME`` set, for each case (working directory, the
#: environment's URI, a URI the notebook set): our URI before MLflow is imported, and
#: MLflow's own answer (made absolute) once the kernel adopted the default store.
COMPARE = """
import json, os, sys
from jupyter_air.tracking.targets import (
    absolute_tracking_uri, adopt_default_store, current_tracking_uri
)
out = []
for cwd, env, notebook_set in json.loads(sys.argv[1]):
    os.chdir(cwd)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if env is not None:
        os.environ["MLFLOW_TRACKING_URI"] = env
    ours = current_tracking_uri()
    imported = "mlflow" in sys.modules
    import mlflow
    mlflow.set_tracking_uri(notebook_set)
    adopt_default_store()
    out.append([ours, absolute_tracking_uri(mlflow.get_tracking_uri()), imported])
print(json.dumps(out))
"""


@pytest.mark.heavy
def test_without_a_tracking_uri_every_directory_uses_the_users_one_store(
    tmp_path: Path,
) -> None:
    home = tmp_path / "air home"
    plain, spaced, old_store = tmp_path / "plain", tmp_path / "a dir", tmp_path / "old"
    for directory in (plain, spaced, old_store / "mlruns" / "0"):
        directory.mkdir(parents=True)
    (old_store / "mlruns" / "0" / "meta.yaml").write_text("name: Default\n")
    (old_store / "mlflow.db").write_text("")
    default = f"sqlite:///{home}/mlflow.db"
    cases = [
        # (cwd, $MLFLOW_TRACKING_URI, mlflow.set_tracking_uri()), what is used
        ((plain, None, None), default),
        ((spaced, None, None), default),
        ((old_store, None, None), default),  # old ./mlruns and ./mlflow.db: not used
        ((plain, "", None), default),  # set but empty
        ((plain, "sqlite:///relative/store.db", None), f"sqlite:///{plain}/relative/store.db"),
        ((plain, "some/dir", None), (plain / "some" / "dir").as_uri()),
        ((plain, "http://127.0.0.1:5000", None), "http://127.0.0.1:5000"),
        ((plain, None, f"sqlite:///{tmp_path}/notebook.db"), f"sqlite:///{tmp_path}/notebook.db"),
    ]
    result = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps([(str(c), e, n) for (c, e, n), _ in cases])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "AIR_HOME": str(home)},
    )
    answers = json.loads(result.stdout)
    for ((cwd, env, notebook_set), used), (ours, mlflows, _) in zip(cases, answers, strict=True):
        assert mlflows == used, (cwd.name, env, notebook_set)
        if notebook_set is None:
            assert ours == used, (cwd.name, env)
    assert answers[0][2] is False, "resolved before MLflow was imported"
    assert not (plain / "mlflow.db").exists()


def test_only_the_default_store_keeps_its_artifacts_under_air_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    first = default_artifact_location(default_tracking_uri())
    second = default_artifact_location(default_tracking_uri())
    assert first is not None
    assert second is not None
    assert first != second, "one folder per experiment"
    assert first.startswith((tmp_path / "air" / "mlartifacts").as_uri() + "/")
    assert default_artifact_location(f"sqlite:///{tmp_path}/team.db") is None
    assert default_artifact_location("http://127.0.0.1:5000") is None


@pytest.mark.parametrize(
    ("uri", "absolute"),
    [
        ("sqlite:///mlflow.db", "sqlite:////work/dir/mlflow.db"),
        ("sqlite:////elsewhere/m.db", "sqlite:////elsewhere/m.db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        ("mlruns", "file:///work/dir/mlruns"),
        ("file:///data/a%20b/mlruns", "file:///data/a%20b/mlruns"),
        ("http://host:5000", "http://host:5000"),
    ],
)
def test_a_relative_store_is_spelled_from_the_working_directory(uri: str, absolute: str) -> None:
    assert absolute_tracking_uri(uri, cwd="/work/dir") == absolute
