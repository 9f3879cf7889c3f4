"""A profile of a running local job (issue 38, item 5), end to end: ``air profile`` turns
torch.profiler on in both ranks of a real 2-rank gloo job for 5 steps, then off; the
summary is printed; each rank's trace and the merged one are kept with the attempt and
on its MLflow run; the job goes on at its speed and ends as it would have."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.perf import profiles
from tests.air_cli import air
from tests.perf.profile_job import TRAIN, check_merged, speeds, workload
from tests.waits import until, wait_settled


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "w.yaml").write_text(workload(sys.executable))
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server: no links
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.heavy
@pytest.mark.slow
def test_a_running_job_is_profiled_on_request_and_goes_on(workdir: Path) -> None:
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    store = JobStore(workdir / "air")
    perf = store.attempt_dir(job_id, 1) / profiles.PERF
    until(lambda: (perf / "rank-1.jsonl").exists(), "the ranks' first steps", 180)

    profiled = air("profile", job_id, "--steps", "5")
    assert profiled.returncode == 0, profiled.stderr
    assert f"asked the 2 ranks of job {job_id} to profile 5 steps" in profiled.stderr
    out = profiled.stdout
    assert "Each rank's profiled steps (compute / communication / idle):" in out
    assert "Top operators by self time (all ranks):" in out
    assert "aten::" in out
    assert "Clocks: one host" in out

    (profile,) = profiles.of_attempt(perf)
    answers = profile.answers()
    assert answers[0]["steps"] == answers[1]["steps"]
    first, last = answers[0]["steps"]
    assert last - first == 4
    merged_path = profile.folder / profiles.MERGED
    assert f"Merged trace: {merged_path} (open it in Perfetto or chrome://tracing)" in out
    check_merged(json.loads(gzip.decompress(merged_path.read_bytes())))

    # kept on the attempt's run
    run_id = store.attempts(job_id)[0].run_id
    assert run_id is not None
    assert f"On the run: profile/{profile.id}/ of run {run_id}" in out
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir}/mlflow.db")
    kept = {Path(a.path).name for a in client.list_artifacts(run_id, f"profile/{profile.id}")}
    assert kept == {"rank-0.json", "rank-1.json", "merged.json.gz", "summary.txt", "summary.json"}

    # the profiler is off again: the steps after it are back to their speed
    until(
        lambda: len([s for s in _marked(perf) if s > last + 1]) >= 30,
        "30 steps after the profile",
        180,
    )
    before, after = speeds(perf, first, last)
    assert after < 1.5 * before, (before, after)
    (workdir / "stop").touch()
    assert wait_settled(workdir / "air", job_id, 180).status == "SUCCEEDED"


def _marked(perf: Path) -> list[int]:
    lines = (perf / "rank-0.jsonl").read_text().splitlines()
    return [doc["s"] for doc in map(json.loads, lines) if "s" in doc]
