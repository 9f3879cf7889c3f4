"""A backend's settings: declared once on its class, written the same way for every
backend (a workload file's ``backend:`` section, ``--backend-opt KEY=VALUE``,
``backend_settings=``), the older spellings kept, each refusal named as it was written;
a backend from a distribution of its own plugs in with no file of ours changed."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from jupyter_air.jobs import backends
from jupyter_air.jobs.backends.settings import aliases, table
from jupyter_air.jobs.workload_file import Submission
from jupyter_air.kernel.job_options import options_from
from jupyter_air.kernel.magics import AirMagics
from jupyter_air.kernel.options import OptionError, Options
from tests.air_cli import air
from tests.backend_contract import sandbox_installed
from tests.mlflow_store import fresh_store
from tests.waits import job_processes, until, wait_settled

PACKAGE = Path(__file__).parents[2] / "jupyter_air"
DOCS = Path(__file__).parents[2] / "docs" / "backends.md"
#: Records of an earlier version, whose flat ``ray_address`` is read as it was written.
EARLIER_RECORDS = PACKAGE / "jobs" / "spec.py"
SLURM_GPU = {"partition": "gpu", "time": "30"}


def magic(*flags: str) -> Submission:
    """The submission ``%%air_distributed FLAGS`` makes."""
    args = AirMagics.air_distributed.parser.parse_args(list(flags))
    return options_from(args).validate()


def test_every_spelling_of_a_backend_s_settings_gives_the_same_settings() -> None:
    two = {"compute": {"nnodes": 2}}
    on_slurm = ("--backend", "slurm", "--nnodes", "2")
    spellings = [
        Submission.model_validate({**two, "backend": {"name": "slurm", **SLURM_GPU}}),
        Submission.model_validate(
            {**two, "backend": "slurm", "slurm": {"partition": "gpu", "time": 30}}
        ),
        magic(*on_slurm, "--backend-opt", "partition=gpu", "--backend-opt", "time=30"),
        magic(*on_slurm, "--slurm", "partition=gpu", "--slurm", "time=30"),
        Options(backend="slurm", nnodes=2, backend_settings=SLURM_GPU).validate(),
        Options(backend="slurm", nnodes=2, aliased={"slurm": SLURM_GPU}).validate(),
    ]
    assert [s.backend_settings for s in spellings] == [SLURM_GPU] * len(spellings)
    ray = [
        Submission.model_validate({"backend": {"name": "ray", "address": "10.0.0.1:6379"}}),
        Submission.model_validate({"backend": "ray", "ray_address": "10.0.0.1:6379"}),
        magic("--backend", "ray", "--ray-address", "10.0.0.1:6379"),
        magic("--backend", "ray", "--backend-opt", "address=10.0.0.1:6379"),
    ]
    assert [s.backend_settings for s in ray] == [{"address": "10.0.0.1:6379"}] * len(ray)


def test_no_module_outside_a_backend_s_package_names_the_backend_or_its_settings() -> None:
    """Code, not prose: string constants and names (docstrings say what they like)."""
    spelled = {name for name in backends.names() if name != "local"}
    spelled |= {word for _, alias in aliases() for word in (alias.field, alias.flag)}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if (PACKAGE / "jobs" / "backends") in path.parents or path == EARLIER_RECORDS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            word = (
                node.value
                if isinstance(node, ast.Constant) and id(node) not in docstrings
                else node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else None
            )
            if word in spelled:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {word!r}")
    assert found == []


def test_the_kernel_is_configured_by_each_one_setting_alias_its_backend_declares() -> None:
    configurable = AirMagics.class_traits(config=True)
    assert set(configurable) == {alias.field for _, alias in aliases() if alias.setting}
    assert configurable["ray_address"].default() is None  # c.AirMagics.ray_address, kept


def test_flags_give_text_that_the_backend_s_model_reads_as_its_types() -> None:
    submission = magic(
        *("--backend", "slurm", "--nnodes", "2"),
        *("--backend-opt", "cpus-per-task=4", "--backend-opt", "new_allocation=true"),
        *("--backend-opt", "args=--exclusive --comment=x"),
        *("--backend-opt", "args=--hint=nomultithread"),
    )
    assert submission.backend_settings == {
        "cpus_per_task": 4,
        "new_allocation": True,
        "args": ["--exclusive", "--comment=x", "--hint=nomultithread"],
    }


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"backend": {"name": "slurm", "partiton": "gpu"}},
            "backend.partiton: Extra inputs are not permitted",
        ),
        (
            {"backend": "slurm", "slurm": {"partition": "a b"}},
            "slurm.partition: String should match pattern",
        ),
        ({"backend": "local", "slurm": {"partition": "gpu"}}, "slurm is for 'backend: slurm'"),
        (
            {"backend": {"name": "local", "queue": "x"}},
            "backend: the local backend takes no settings (queue)",
        ),
        (
            {"backend": "ray", "ray_address": ""},
            "ray_address: String should have at least 1 character",
        ),
        ({"backend": {"name": "nope"}}, "no backend 'nope': choose one of"),
    ],
)
def test_a_workload_s_bad_setting_is_named_as_the_file_writes_it(
    fields: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Submission.model_validate({"compute": {"nnodes": 2}, **fields})
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--backend", "slurm", "--backend-opt", "partiton=gpu"],
            "--backend-opt partiton: Extra inputs are not permitted",
        ),
        (
            ["--backend", "slurm", "--slurm", "cpus_per_task=0"],
            "--slurm cpus_per_task: Input should be greater than or equal to 1",
        ),
        (["--ray-address", "10.0.0.1:6379"], "--ray-address is for --backend ray"),
        (["--backend-opt", "label=x"], "--backend: the local backend takes no settings (label)"),
        (["--backend", "slurm", "--backend-opt", "gpu"], "--backend-opt 'gpu': expected KEY=VALUE"),
    ],
)
def test_a_cell_s_bad_setting_is_refused_in_one_line_naming_its_flag(
    flags: list[str], said: str
) -> None:
    with pytest.raises(OptionError) as refused:
        magic("--nnodes", "2" if "--backend" in flags else "1", *flags)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_docs_show_each_backend_s_settings_as_its_model_declares_them() -> None:
    text = DOCS.read_text()
    for name in backends.names():
        assert table(backends.get(name)) in text, f"docs/backends.md: {name}'s table is stale"


@pytest.fixture
def workdir(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "label.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(f\"rank{os.environ['RANK']}\").write_text(os.environ['AIR_SANDBOX_LABEL'])\n"
    )
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_air_run_takes_another_backend_and_its_settings_over_the_workload_s(
    workdir: Path,
) -> None:
    (workdir / "w.yaml").write_text(
        f"experiment_name: e\ncommand: {sys.executable} label.py\n"
        "backend: {name: ray, address: '10.0.0.1:6379'}\ncompute: {nnodes: 2}\n"
    )
    elsewhere = ("--backend", "slurm", "--backend-opt", "partition=gpu")
    planned = air("run", "-f", "w.yaml", "--dry-run", *elsewhere)
    assert planned.returncode == 0, planned.stderr
    doc = json.loads(planned.stdout)
    assert (doc["backend"], doc["backend_settings"]) == ("slurm", {"partition": "gpu"})
    refused = air("run", "-f", "w.yaml", "--dry-run", "--backend-opt", "adress=x")
    assert refused.returncode != 0
    assert "--backend-opt adress: Extra inputs are not permitted" in refused.stderr


@pytest.mark.heavy
def test_a_backend_from_a_distribution_of_its_own_runs_a_workload_with_its_settings(
    workdir: Path,
) -> None:
    (workdir / "w.yaml").write_text(
        f"experiment_name: e\ncommand: {sys.executable} label.py\n"
        "backend: {name: sandbox, label: blue}\ncompute: {nproc_per_node: 2}\n"
    )
    with sandbox_installed():
        assert magic("--backend", "sandbox", "--backend-opt", "label=red").backend_settings == {
            "label": "red"
        }
        with pytest.raises(OptionError, match="--backend-opt label: String should match"):
            magic("--backend", "sandbox", "--backend-opt", "label=Red")
        submitted = air("run", "-f", "w.yaml")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1]
        job = wait_settled(workdir / "air", job_id)
    assert job.status == "SUCCEEDED", job.message
    assert [(workdir / f"rank{r}").read_text() for r in (0, 1)] == ["blue", "blue"]
    until(lambda: not job_processes(job_id), f"job {job_id}'s processes gone", 60)
