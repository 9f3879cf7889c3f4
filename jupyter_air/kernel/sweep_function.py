"""``sweep(fn, space, ...)``: a hyperparameter search over a ``@distributed`` function,
every trial one job of the function's shape (its ``-n``, nodes, backend, ...).

::

    @distributed(nproc_per_node=2)
    def train(lr=1e-3, layers=2):
        ...
        return val_loss                  # or log_metrics({"val_loss": ...})

    best = sweep(train, {"lr": "loguniform(1e-4, 1e-1)", "layers": "int(1, 4)"},
                 objective="val_loss", trials=12, parallel=2)

Each trial calls the function with the parameters it takes by name (all are in
``jupyter_air.params()``); a number it returns is the objective's last point.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..jobs.service import Refused
from ..jobs.workload_file import WorkloadError
from ..notify.targets import BadTarget, parse_all
from ..sweeps.params import call_with_params
from ..sweeps.space_text import BadSpace, parse_space
from ..sweeps.store import Code
from ..sweeps.sweep_file import SweepFile
from .capture import Payload
from .decorator import DistributedFunction
from .options import Options, option_error
from .session import notebook_path
from .sweep_launch import Search, experiment_name, start_or_follow, sweep_key, sweep_spec


def _named(dotted: str) -> str:
    """A sweep field as ``sweep()``'s argument: ``space.lr`` is ``space['lr']``."""
    head, _, rest = dotted.partition(".")
    if head == "space" and rest:
        name, _, more = rest.partition(".")
        return f"space[{name!r}]" + (f" {more.replace('.', ' ')}" if more else "")
    if head == "experiment_name":
        return "experiment"
    return f"{head}="


def sweep(
    fn: Callable[..., Any],
    space: Mapping[str, Any],
    *,
    objective: str,
    direction: str = "minimize",
    trials: int | None = None,
    parallel: int = 1,
    sampler: str = "tpe",
    pruner: str = "none",
    seed: int | None = None,
    notify: Sequence[str] | None = None,
    storage: str | None = None,
    new: bool = False,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Search ``space`` for the parameters of ``fn`` (a ``@distributed`` function, or a
    plain one run as ``@distributed()`` would) that make the metric ``objective`` best
    (``direction``: minimize or maximize), ``trials`` trials in all, ``parallel`` at once.
    A parameter is a form (``"loguniform(1e-4, 1e-1)"``, ``"int(1, 4)"``,
    ``"choice(adam, sgd)"``), a list of choices, or a sweep file's mapping. ``args`` and
    ``kwargs`` go to every call; ``notify``: whom the sweep's end is told, with its best
    trial (``--notify``'s forms: ``"jupyterlab"``, ``"email:ADDRESS"``, ...); ``storage``:
    an Optuna RDB URL to keep the study at instead of AIR_HOME's store. The sweep
    runs in a process of its own; this shows its trials as they go and returns the best
    parameters. Called again with the same arguments (after a kernel restart), it
    follows that sweep, or shows its result; ``new=True`` searches again."""
    if isinstance(fn, DistributedFunction) and fn._session:
        raise TypeError(
            "sweep() runs each trial as a job of its own: use @distributed(...) without "
            "session=True"
        )
    if isinstance(fn, DistributedFunction):
        function, options = fn._fn, fn._options
    elif callable(fn):
        function, options = fn, Options()
    else:
        raise TypeError(f"sweep() needs a function, got {type(fn).__name__}")
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction= must be minimize or maximize, got {direction!r}")
    try:
        parsed = parse_space(space)
    except BadSpace as err:
        raise ValueError(f"space {err}") from None
    try:
        targets = parse_all(list(notify or []))
    except BadTarget as err:
        raise ValueError(f"notify=: {err}") from None
    search = Search(
        space=parsed,
        objective={direction: objective},
        trials=10_000 if trials is None and sampler == "grid" else _needed(trials),
        parallel=parallel,
        sampler=sampler,
        pruner=pruner,
        seed=seed,
        notify=targets,
        storage=storage,
    )
    submission = options.validate()
    run_name = str(options.run_name or getattr(function, "__name__", "function"))
    source = _source(function)
    call = functools.partial(call_with_params, function, objective)
    payload = Payload(kind="function", function=call, args=tuple(args), kwargs=dict(kwargs or {}))

    def make_spec(tracking_uri: str) -> SweepFile:
        from ..identity import mlflow_user

        experiment = experiment_name(options.experiment, mlflow_user(), tracking_uri)
        return sweep_spec(
            search,
            submission,
            experiment=experiment,
            run_name=run_name,
            label=f"sweep({run_name})",
            name=_named,
        )

    described = json.dumps(
        [search.__dict__, repr(args), repr(sorted((kwargs or {}).items()))],
        sort_keys=True,
        default=repr,
    )
    try:
        return start_or_follow(
            make_spec,
            payload.dumps,
            Code(source=source),
            sweep_key(f"{source}\n{described}", notebook_path()),
            new=new,
            notify=search.notify,
        )
    except WorkloadError as err:
        raise ValueError(str(err)) from None
    except Refused as err:
        if err.field in ("notify", "storage"):
            raise ValueError(f"{err.field}=: {err}") from None
        raise ValueError(str(option_error(err))) from None


def _needed(trials: int | None) -> int:
    if trials is None:
        raise TypeError("sweep() needs trials=N: how many trials in all")
    return trials


def _source(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return repr(function)
