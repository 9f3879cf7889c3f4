"""The entry point of one rank: run a notebook cell or a function shipped by the kernel.

``python -m jupyter_air.jobs.node.rank_main PAYLOAD ATTEMPT_DIR``. The payload holds the
cell source (or the function and its arguments) and the notebook names it uses,
pickled with cloudpickle. Rank 0 writes the cell's result for the kernel to pick up;
a rank that fails writes its traceback beside it.
"""

from __future__ import annotations

import ast
import atexit
import functools
import importlib
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import cloudpickle

from ...import_hooks import when_imported
from ...job_dir import AttemptDir
from ...paths import write_private
from ...perf import hooks
from . import rank_debugger

#: The cell's name in tracebacks (its lines come from ``linecache``, as in IPython).
CELL_FILE = "<air_distributed cell>"

P = ParamSpec("P")
R = TypeVar("R")


def run_cell(source: str, namespace: dict[str, Any], filename: str = CELL_FILE) -> Any:
    """Execute like IPython: the value of a final expression is the cell's result."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = ast.parse(source, filename)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


#: The job's MLflow variables: what MLflow's own calls remove from them is put back.
JOB_VARIABLES = ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_URI")


def keep_run_in_environment() -> None:
    """Put back the job's MLflow variables that ``mlflow.start_run()``/``end_run()`` remove.

    MLflow deletes MLFLOW_RUN_ID when it starts or ends a run, but training code (like
    the managed product's examples) reads ``os.environ["MLFLOW_RUN_ID"]`` at every step,
    and a rank must always log into its attempt's run. ``os.environ`` stays a plain
    mapping (accelerate clears and restores it): only those two MLflow calls are wrapped,
    once MLflow is imported, so a rank that never uses MLflow does not pay for importing it.
    """
    when_imported("mlflow.tracking.fluent", _wrap_run_calls)


def _wrap_run_calls(fluent: types.ModuleType) -> None:
    # Before ``mlflow/__init__`` re-exports them: ``mlflow.start_run`` is the wrapper too.
    for name in ("start_run", "end_run"):
        setattr(fluent, name, _putting_back(getattr(fluent, name)))


def _putting_back(call: Callable[P, R]) -> Callable[P, R]:
    """``call``; then the job's variables it removed from ``os.environ`` are set again."""

    @functools.wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        kept = {name: os.environ[name] for name in JOB_VARIABLES if name in os.environ}
        try:
            return call(*args, **kwargs)
        finally:
            for name, value in kept.items():
                os.environ.setdefault(name, value)

    return wrapper


def main(argv: list[str]) -> int:
    payload_path, attempt_dir = Path(argv[0]), Path(argv[1])
    keep_run_in_environment()
    hooks.install()
    rank_debugger.install()  # pdb.set_trace() as breakpoint()
    rank = int(os.environ.get("RANK", "0"))
    # The cell runs in a fresh __main__, as in the notebook, so that classes it defines
    # pickle by reference (torch.save of a model, DataLoader workers) and resolve here.
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    namespace["__builtins__"] = __builtins__
    payload: dict[str, Any] = cloudpickle.loads(payload_path.read_bytes())
    for alias, module in payload.get("modules", {}).items():
        namespace[alias] = importlib.import_module(module)
    namespace.update(payload.get("names", {}))
    try:
        if payload["kind"] == "cell":
            value = run_cell(payload["source"], namespace)
        else:
            value = payload["function"](*payload["args"], **payload["kwargs"])
    except KeyboardInterrupt:
        return 130
    except BaseException as err:
        if isinstance(err, SystemExit) and err.code in (0, None):
            value = None
        else:
            text = user_traceback(err)
            sys.stderr.write(text)
            write_private(AttemptDir(attempt_dir).error(rank), text)
            return err.code if isinstance(err, SystemExit) and isinstance(err.code, int) else 1
    if rank == 0:
        _write_result(
            attempt_dir,
            value,
            {n: namespace[n] for n in payload.get("outputs", []) if n in namespace},
        )
    return 0


def user_traceback(err: BaseException) -> str:
    """The traceback from the user's code on: this module's frames, which only ran the
    cell or called the function, are left out, as IPython leaves out its own."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    if tb is None:  # raised here, not in the user's code: show where
        tb = err.__traceback__
    return "".join(traceback.format_exception(type(err), err, tb))


def _write_result(attempt_dir: Path, value: Any, outputs: dict[str, Any]) -> None:
    """Rank 0's value and requested names; what cannot be pickled comes back as its repr."""
    result: dict[str, Any] = {"value": value, "outputs": outputs, "unpicklable": {}}
    try:
        data = cloudpickle.dumps(result)
    except Exception as err:
        reprs = {"value": repr(value), **{n: repr(v) for n, v in outputs.items()}}
        data = cloudpickle.dumps(
            {"value": None, "outputs": {}, "unpicklable": reprs, "why": str(err)}
        )
    files = AttemptDir(attempt_dir)
    write_private(files.result_partial, data)
    files.result_partial.replace(files.result)


def exit_now(code: int) -> None:
    """Run the atexit handlers and flush, then leave without C++ teardown.

    Rank 0 hosts torch's TCPStore; tearing its threads down at interpreter exit can
    abort the process ("terminate called without an active exception") after the
    work succeeded. torchrun's workers avoid it by not hosting the store.
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
