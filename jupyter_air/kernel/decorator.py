"""``@distributed``: the magic's job for a function, with ``fn.distributed(...)``; with
``session=True``, a call on the warm ranks of ``%air_session start``, as
``%%air_distributed --session`` runs a cell there."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ..jobs.backends.settings import owner
from .capture import Payload
from .launch import run
from .options import Options

P = ParamSpec("P")
R = TypeVar("R")
#: ``Options``' fields that are no keyword of the decorator: ``out`` (return it instead)
#: and ``aliased``, the older spellings given by their own names (``slurm={...}``).
INTERNAL = frozenset({"out", "aliased"})


class DistributedFunction(Generic[P, R]):
    """A function that runs as usual when called, and on N ranks with ``.distributed()``.

    ``.distributed()`` returns rank 0's return value. To get every rank's value, gather
    them on rank 0 (``torch.distributed.gather_object``) and return the list.
    """

    def __init__(self, fn: Callable[P, R], options: Options, session: bool = False) -> None:
        self._submission = options.validate()
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._options = options
        self._session = session

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)

    def distributed(self, *args: P.args, **kwargs: P.kwargs) -> R | None:
        """Run on every rank as one job (one MLflow run); rank 0's return value, or None
        for a background job. With ``session=True``: on the session's warm ranks, in each
        rank's namespace (names earlier session cells made are there), as a child run."""
        payload = Payload(kind="function", function=self._fn, args=args, kwargs=kwargs)
        try:
            source = inspect.getsource(self._fn)
        except (OSError, TypeError):
            source = repr(self._fn)
        if self._session:
            from .warm_session import WarmSession

            session, title = WarmSession.running(), getattr(self._fn, "__name__", None)
            value: R | None = session.run_cell(
                payload.dumps(),
                source,
                self._options.output_ranks,
                None,
                title,
                debug_rank=self._options.debug_rank,
            )
            return value
        name = getattr(self._fn, "__name__", "function")  # its run's name: "train"
        result: R | None = run(payload, self._options, self._submission, source, None, name)
        return result


@overload
def distributed(fn: Callable[P, R]) -> DistributedFunction[P, R]: ...
@overload
def distributed(
    fn: None = None, **options: Any
) -> Callable[[Callable[P, R]], DistributedFunction[P, R]]: ...
def distributed(fn: Callable[P, R] | None = None, **options: Any) -> Any:
    """``@distributed(nproc_per_node=2, experiment=..., max_retries=1, ...)``: the options
    of ``%%air_distributed`` as keyword arguments (``env`` is a dict, ``share`` a list of
    grants such as ``["bob:CAN_VIEW"]``, ``backend_settings`` a dict of the backend's
    settings, as ``--backend-opt``'s; ``guards`` a guard or a list of them, as
    ``--guard``'s: ``guards=["loss: nan -> stop"]``; ``out`` is not needed: return what
    you want back).
    ``@distributed(session=True)`` runs on the session's ranks and takes only
    ``output_ranks`` and ``debug_rank``: the rest belongs to ``%air_session start``."""
    session = options.pop("session", False)
    if not isinstance(session, bool):
        raise TypeError(f"distributed(session=...) must be True or False, got {session!r}")
    aliased = {k: options.pop(k) for k in list(options) if owner(k) is not None}
    unknown = set(options) - {f for f in Options.__dataclass_fields__ if f not in INTERNAL}
    if unknown:
        raise TypeError(f"distributed() got unknown option(s): {', '.join(sorted(unknown))}")
    if session and (whole_job := sorted({*options, *aliased} - {"output_ranks", "debug_rank"})):
        raise TypeError(
            f"{', '.join(whole_job)} does not apply to distributed(session=True) "
            "(give it to %air_session start)"
        )
    settings = Options(**options, aliased=aliased)

    def wrap(f: Callable[P, R]) -> DistributedFunction[P, R]:
        return DistributedFunction(f, settings, session)

    return wrap(fn) if fn is not None else wrap
