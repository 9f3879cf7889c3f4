"""The backends, by name: each a module registered under the ``jupyter_air.backends``
entry-point group (pyproject.toml), loaded when first asked for. A new engine is a new
module and one entry point, nothing else."""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from .base import Backend

GROUP = "jupyter_air.backends"


class UnknownBackend(ValueError):
    """No backend of that name is installed."""


@functools.cache
def _registered() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def forget() -> None:
    """Look the entry points up again at the next call: a distribution was installed or
    removed while this process runs (the tests' own backend)."""
    _registered.cache_clear()
    get.cache_clear()


def names() -> list[str]:
    """The installed backends' names, sorted."""
    return sorted(_registered())


@functools.cache
def get(name: str) -> Backend:
    """The backend registered as ``name``."""
    entry = _registered().get(name)
    if entry is None:
        raise UnknownBackend(f"no backend {name!r}: choose one of {', '.join(names())}")
    backend_class = entry.load()
    if not (isinstance(backend_class, type) and issubclass(backend_class, Backend)):
        raise UnknownBackend(f"the backend {name!r} ({entry.value}) is not a Backend")
    backend: Backend = backend_class()
    return backend
