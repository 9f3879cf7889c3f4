"""The quickstart notebook runs top to bottom as ``make demo`` runs it, and a demo
leaves the checkout as it found it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from jupyter_air.jobs.store import JobStore
from scripts import demo

PLOTLY = "application/vnd.plotly.v1+json"
#: What a demo could write where git sees it: notebooks, checkpoints, MLflow stores.
DEMO_WRITES = re.compile(r"\.ipynb|notebooks/|\.demo|mlflow\.db|mlruns")


def git_status() -> list[str]:
    done = subprocess.run(
        ["git", "status", "--porcelain"], cwd=demo.ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch folder of the test's own, never the user's ``.demo/`` (a demo may be
    running there): git ignoring what the demo writes in ``.demo/`` is checked apart."""
    return tmp_path / "demo"


@pytest.mark.slow
def test_the_quickstart_trains_on_two_ranks_and_the_demo_leaves_git_status_clean(
    kernel_env: dict[str, str],
    air_home: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = git_status()
    for name, value in kernel_env.items():
        monkeypatch.setenv(name, value)
    assert demo.prepare(workdir) == []
    nb = demo.run_quickstart(workdir, demo.check_experiment("quickstart-test"))
    # What JupyterLab does with the demo's notebook: save it with outputs, checkpoint it.
    from jupyter_server.services.contents.filemanager import FileContentsManager

    contents = FileContentsManager(root_dir=str(workdir))
    contents.save({"type": "notebook", "format": "json", "content": nb}, demo.QUICKSTART)
    contents.create_checkpoint(demo.QUICKSTART)
    # Whatever else changes in the checkout meanwhile, nothing the demo writes shows;
    # and git ignores what it writes in .demo/, where `make demo` makes its copies.
    new = sorted(set(git_status()) - set(before))
    assert [line for line in new if DEMO_WRITES.search(line)] == []
    ignored = [".demo/quickstart.ipynb", ".demo/.ipynb_checkpoints/quickstart-checkpoint.ipynb"]
    checked = subprocess.run(
        ["git", "check-ignore", *ignored], cwd=demo.ROOT, capture_output=True, text=True
    )
    assert checked.stdout.split() == ignored
    assert (workdir / ".ipynb_checkpoints").is_dir()
    assert demo.prepare(workdir) == [], "a copy with outputs but the same code is kept quietly"

    outputs = [o for cell in nb.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert "[rank 0] step 199: loss" in text
    assert "[rank 1] step 199: loss" in text
    results = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "execute_result"]
    assert float(results[0]) > 0.9, "the model learned to tell the spirals apart"
    assert results[1] == "'rank 0 of 2'"

    from mlflow import MlflowClient

    ddp = JobStore(air_home).get(demo.job_of(nb))
    assert ddp.spec.tracking.run_name == "quickstart"
    (attempt,) = JobStore(air_home).attempts(ddp.id)
    client = MlflowClient(ddp.spec.tracking.tracking_uri)
    for metric in ("train_loss", "train_accuracy", "lr"):
        history = client.get_metric_history(attempt.run_id, metric)
        assert [m.step for m in history] == list(range(200)), f"rank 0 logged {metric} once a step"
    chart = next(o["data"][PLOTLY] for o in outputs if PLOTLY in o.get("data", {}))
    assert {"train_loss", "train_accuracy", "lr"} <= {t["name"] for t in chart["data"]}
    assert chart["layout"]["showlegend"] is True


def test_an_edited_copy_is_kept_and_said_so(tmp_path: Path) -> None:
    demo.prepare(tmp_path)
    copy = tmp_path / demo.QUICKSTART
    nb = nbformat.read(copy, as_version=4)
    nb.cells[1].source = "# my own change\n" + nb.cells[1].source
    nbformat.write(nb, copy)
    notes = demo.prepare(tmp_path)
    assert notes == [f"kept your edited {copy} (delete it to get quickstart.ipynb afresh)"]
    assert "# my own change" in copy.read_text()
