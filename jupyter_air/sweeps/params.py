"""A trial's parameters, as its ranks read them: ``jupyter_air.params()``."""

from __future__ import annotations

import json
import os
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
