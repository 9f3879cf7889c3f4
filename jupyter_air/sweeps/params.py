"""A trial's parameters, as its ranks read them: ``jupyter_air.params()``, or as a
swept function takes them (``call_with_params``)."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

#: The trial's parameters, a JSON object, in every rank's environment.
PARAMS_ENV = "AIR_PARAMS"


def params() -> dict[str, Any]:
    """This trial's parameters (``{"lr": 0.01, "layers": 2}``); empty outside a sweep,
    so that the same script runs on its own with its defaults."""
    text = os.environ.get(PARAMS_ENV)
    if not text:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"${PARAMS_ENV} is not a JSON object: {text[:80]!r}")
    return found


def call_with_params(fn: Callable[..., Any], objective: str, *args: Any, **kwargs: Any) -> Any:
    """A trial of ``sweep(fn, ...)`` on one rank: ``fn`` called with the trial's
    parameters that it takes by name (``def train(lr=1e-3, layers=2)``); every one is in
    ``params()`` too. A number it returns is the trial's ``objective``, logged as its
    last point (from rank 0), as Optuna's objective functions return theirs."""
    found = params()
    try:
        accepted: Mapping[str, inspect.Parameter] = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a C function: params() only
        accepted = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    given = {k: v for k, v in found.items() if takes_any or k in accepted}
    value = fn(*args, **{**kwargs, **given})
    if isinstance(value, int | float) and not isinstance(value, bool):
        from ..ranks import log_metrics

        log_metrics({objective: float(value)})
    return value
