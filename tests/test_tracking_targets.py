"""Where a job's runs go, said without MLflow: the tracking URI is MLflow's own answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_air.tracking.targets import absolute_tracking_uri

#: In a fresh process, for each case: (MLflow's answer made absolute, ours, whether
#: MLflow was imported when ours was resolved).
COMPARE = """
import json, os, sys
from jupyter_air.tracking.targets import absolute_tracking_uri, current_tracking_uri
out = []
for cwd, env in json.loads(sys.argv[1]):
    os.chdir(cwd)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if env is not None:
        os.environ["MLFLOW_TRACKING_URI"] = env
    ours = current_tracking_uri()
    before = "mlflow" in sys.modules
    import mlflow
    out.append([absolute_tracking_uri(mlflow.get_tracking_uri()), ours, before])
print(json.dumps(out))
"""


def test_the_tracking_uri_is_the_one_mlflow_resolves(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    spaced = tmp_path / "a dir with spaces"
    file_store = tmp_path / "old-file-store"
    empty_mlruns = tmp_path / "empty-mlruns"
    for directory in (plain, spaced, file_store, empty_mlruns / "mlruns" / "0"):
        directory.mkdir(parents=True)
    (file_store / "mlruns" / "0").mkdir(parents=True)
    (file_store / "mlruns" / "0" / "meta.yaml").write_text("name: Default\n")
    cases = [
        (plain, None),  # MLflow's default: ./mlflow.db
        (spaced, None),
        (file_store, None),  # an existing ./mlruns file store is kept
        (empty_mlruns, None),  # ./mlruns without experiments is not a store
        (plain, ""),  # set but empty: the default
        (plain, "sqlite:///relative/store.db"),
        (plain, f"sqlite:///{tmp_path}/absolute.db"),
        (plain, "some/dir"),
        (plain, "file:./mlruns-here"),
        (plain, "http://127.0.0.1:5000"),
        (plain, "databricks"),
    ]
    result = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps([(str(c), e) for c, e in cases])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answers = json.loads(result.stdout)
    for (cwd, env), (mlflows, ours, _) in zip(cases, answers, strict=True):
        assert ours == mlflows, (cwd.name, env)
    assert answers[0][2] is False, "resolved before MLflow was imported"
    assert answers[0][1] == f"sqlite:///{plain}/mlflow.db"
    assert answers[2][1] == (file_store / "mlruns").as_uri()


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
