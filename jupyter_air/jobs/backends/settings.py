"""A backend's settings as users write them, whichever backend it is.

Each backend declares its settings once, as a pydantic model on its class
(``Backend.settings_model``) and the older spellings it keeps (``Backend.aliases``).
From them come the workload file's ``backend:`` section, the magics' and ``air run``'s
``--backend-opt KEY=VALUE`` (and the aliases' flags), the check of what was given, and
the table the docs show: no code outside a backend's package names its settings.
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from . import get, names
from .base import Alias, Backend

#: The generic flag of every backend's settings.
FLAG = "--backend-opt"


class BadPair(ValueError):
    """A ``KEY=VALUE`` flag that is not one."""


def aliases() -> Iterator[tuple[Backend, Alias]]:
    """Every installed backend's older spellings, with their backend."""
    for name in names():
        backend = get(name)
        for alias in backend.aliases:
            yield backend, alias


def owner(field: str) -> tuple[Backend, Alias] | None:
    """The backend whose alias ``field`` is (``ray_address``: ray)."""
    return next(((b, a) for b, a in aliases() if a.field == field), None)


def from_pairs(flag: str, pairs: Sequence[str], model: type[BaseModel] | None) -> dict[str, Any]:
    """``KEY=VALUE`` flags as settings (``-`` in a key is ``_``): a setting that holds a
    list (``args``) takes each value split as a shell would, given once or more; any
    other keeps the last value given. The model checks the values later."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadPair(f"{flag} {pair!r}: expected KEY=VALUE")
        key = key.replace("-", "_")
        if model is not None and _holds_a_list(model, key):
            found.setdefault(key, []).extend(shlex.split(value))
        else:
            found[key] = value
    return found


def checked(backend: Backend, given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as the job's spec keeps them (those at their default left out),
    checked by the backend's model: leniently, since flags give every value as text
    (``cpus_per_task=4``). Raises pydantic's ``ValidationError``, each error at its
    setting, or ``ValueError`` for a backend that takes none."""
    model = backend.settings_model
    if model is None:
        if given:
            raise ValueError(f"the {backend.name} backend takes no settings ({', '.join(given)})")
        return {}
    return model.model_validate(dict(given), strict=False).model_dump(exclude_defaults=True)


def table(backend: Backend) -> str:
    """The backend's settings as the docs show them: a Markdown table."""
    model = backend.settings_model
    if model is None:
        return f"The {backend.name} backend takes no settings.\n"
    rows = ["| setting | meaning |", "| --- | --- |"]
    for key, info in model.model_fields.items():
        rows.append(f"| `{key}` | {info.description or ''} |")
    spelled = [f"`{a.field}:` and `{a.flag}`" for a in backend.aliases]
    older = f"\nAlso taken, as before: {', '.join(spelled)}.\n" if spelled else "\n"
    return "\n".join(rows) + "\n" + older


def _holds_a_list(model: type[BaseModel], key: str) -> bool:
    info = model.model_fields.get(key)
    return info is not None and typing.get_origin(info.annotation) is list
