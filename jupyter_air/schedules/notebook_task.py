"""A notebook task, run as the command of its job's single rank:
``python -m jupyter_air.schedules.notebook_task SCHEDULE_ID TASK_KEY``.

The notebook's snapshot (taken when the schedule was created or updated) runs top to
bottom in a fresh kernel, as papermill does: a first cell sets the task's parameters
(and loads jupyter_air, unless the notebook does so itself), so its ``%%air_distributed``
cells become jobs of their own, in the task's experiment. The executed notebook, outputs
and all, is kept in the attempt's directory (``executed``: what JupyterLab opens from the
schedule's run) and as an artifact of the task's MLflow run (``notebook/<name>``),
whether it succeeded or not; a failing cell fails the task (exit status 1). The kernel
sees the job's environment less what makes a process a rank (RANK, MASTER_ADDR, the
attempt's MLFLOW_RUN_ID, ...), so that the notebook's own distributed cells start ranks
of their own, as jobs that are children of the task's job.

What the notebook prints is printed here as it comes, so the task's logs read as the
notebook does. The kernel talks to this process over Unix sockets in a private
directory, not loopback TCP, where other users of the machine could reach it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from ..jobs.env import PARENT_ENV
from .launch import NOTEBOOK_ENV

#: What the rank's environment has that the notebook's kernel must not inherit.
RANK_ONLY = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "MLFLOW_RUN_ID",
    "MLFLOW_EXPERIMENT_ID",
    "AIR_JOB_ID",
    "AIR_ATTEMPT",
    "CUDA_VISIBLE_DEVICES",
)
PARAMETERS_TAG = "injected-parameters"


#: A line of a cell that loads jupyter_air (``%load_ext jupyter_air``, among others too).
LOADS_AIR = re.compile(r"^\s*%load_ext\s+(?:\S+\s+)*jupyter_air(?:\s|$)", re.MULTILINE)


def parameters_cell(parameters: dict[str, Any], load_air: bool = True) -> str:
    """The first cell: each parameter a variable (its JSON value), and jupyter_air
    loaded when ``load_air`` (a notebook that loads it itself would then be told, in
    its output and the task's log, that it "is already loaded")."""
    lines = ["%load_ext jupyter_air"] if load_air else []
    lines += [f"{name} = {json.loads(json.dumps(value))!r}" for name, value in parameters.items()]
    return "\n".join(lines)


def loads_air(nb: Any) -> bool:
    """Whether one of the notebook's code cells loads jupyter_air itself."""
    return any(c.cell_type == "code" and LOADS_AIR.search(c.source) for c in nb.cells)


def kernel_env(env: dict[str, str]) -> dict[str, str]:
    """The rank's environment less what makes a rank; the task's job as the parent of
    the jobs the notebook's cells submit."""
    out = {k: v for k, v in env.items() if k not in RANK_ONLY}
    if env.get("AIR_JOB_ID"):
        out[PARENT_ENV] = env["AIR_JOB_ID"]
    if env.get(NOTEBOOK_ENV):
        out["MLFLOW_EXPERIMENT_NAME"] = env[NOTEBOOK_ENV]
    return out


#: Terminal colours of IPython's tracebacks: noise in a log.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def echo(msg: dict[str, Any], out: TextIO, err: TextIO) -> None:
    """Print one output message of the kernel as the notebook shows it: streams, results
    and displays as text, errors as their traceback. Updates of a display (a cell's live
    status line, each second) are left out."""
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        (err if content["name"] == "stderr" else out).write(content["text"])
    elif kind in ("execute_result", "display_data"):
        text = content["data"].get("text/plain")
        if text and "application/vnd.jupyter.widget-view+json" not in content["data"]:
            out.write(ANSI.sub("", text).rstrip("\n") + "\n")
    elif kind == "error":
        err.write(ANSI.sub("", "\n".join(content["traceback"])) + "\n")
    else:
        return
    (err if kind == "error" else out).flush()


def main(argv: list[str]) -> int:
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    class EchoingClient(NotebookClient):
        def output(
            self, outs: list[Any], msg: dict[str, Any], display_id: str | None, cell_index: int
        ) -> Any:
            echo(msg, sys.stdout, sys.stderr)
            return super().output(outs, msg, display_id, cell_index)

    from ..jobs.store import JobStore
    from .store import ScheduleStore, UnknownSchedule

    schedule_id, task_key = argv
    try:
        task = ScheduleStore(JobStore()).get(schedule_id).spec.task(task_key)
    except (UnknownSchedule, StopIteration):
        print(f"schedule {schedule_id} or its task {task_key} was deleted", file=sys.stderr)
        return 1
    if task.notebook is None:
        print(f"task {task_key} is not a notebook task", file=sys.stderr)
        return 1
    nb = nbformat.reads(task.notebook, as_version=4)
    cell = nbformat.v4.new_code_cell(parameters_cell(task.parameters, not loads_air(nb)))
    cell.metadata["tags"] = [PARAMETERS_TAG]
    nb.cells.insert(0, cell)
    kernel = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    sockets = tempfile.mkdtemp(prefix="air-kernel-")  # 0700: this user's alone
    km = KernelManager(kernel_name=kernel, transport="ipc", ip=os.path.join(sockets, "k"))
    client = EchoingClient(
        nb,
        km=km,
        timeout=None,
        kernel_name=kernel,
        resources={"metadata": {"path": os.getcwd()}},
    )
    failed: str | None = None
    try:
        client.execute(env=kernel_env(dict(os.environ)))
    except CellExecutionError as err:
        said = ANSI.sub("", str(err)).strip()
        failed = said.splitlines()[-1] if said else "a cell failed"
    finally:
        if km.has_kernel:  # a kernel manager given to nbclient is the giver's to stop
            km.shutdown_kernel()
        shutil.rmtree(sockets, ignore_errors=True)
        _keep(nb, Path(task.notebook_path or f"{task_key}.ipynb").name)
    if failed:
        print(f"notebook task {task_key} failed: {failed}", file=sys.stderr)
        return 1
    return 0


def _keep(nb: Any, name: str) -> None:
    """The executed notebook in this attempt's directory, and as an artifact of its run
    (when there is one)."""
    import nbformat

    from ..jobs.store import JobStore
    from . import executed

    text = nbformat.writes(nb)
    job_id, attempt = os.environ.get("AIR_JOB_ID"), os.environ.get("AIR_ATTEMPT")
    if job_id and attempt:
        path = executed.keep(JobStore(), job_id, int(attempt), name, text)
        print(f"executed notebook: {path}", flush=True)
    run_id, uri = os.environ.get("MLFLOW_RUN_ID"), os.environ.get("MLFLOW_TRACKING_URI")
    if not run_id or not uri:
        print("no MLflow run to keep the executed notebook in", file=sys.stderr)
        return
    from mlflow import MlflowClient

    MlflowClient(uri).log_text(run_id, text, f"notebook/{name}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
