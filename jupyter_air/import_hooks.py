"""Patch a library once it is imported, as MLflow's autologging does, without
importing it ourselves: a rank that never imports ``transformers`` never pays for it.

One finder at the front of ``sys.meta_path`` finds the awaited modules as the finders
after it would, and runs their patches right after the module's own code. A patch that
fails prints one ``[air]`` line and leaves the import as it was: never in the way of the
user's program. Used by resuming (``jobs.autoresume``) and by the step marks
(``perf.hooks``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Patch = Callable[[ModuleType], None]

_lock = threading.Lock()
_patches: dict[str, list[Patch]] = {}


def when_imported(module_name: str, patch: Patch) -> None:
    """Run ``patch(module)`` once ``module_name`` is imported: now, if it already is.
    The same patch given twice for a module runs once per import of it."""
    module = sys.modules.get(module_name)
    if module is not None:
        _run(patch, module)
        return
    with _lock:
        waiting = _patches.setdefault(module_name, [])
        if patch not in waiting:
            waiting.append(patch)
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())


def _run(patch: Patch, module: ModuleType) -> None:
    try:
        patch(module)
    except Exception as err:  # the library works as it did, without our hook
        print(f"[air] a hook on {module.__name__} is off: {err!r}", file=sys.stderr, flush=True)


class _Patching(importlib.abc.Loader):
    """The module's own loader, then the patches: a loader of its own, so one shared by
    other modules (zipimport's) is left as it is."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its real loader (tracebacks, importlib.resources, reload).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        with _lock:
            patches = list(_patches.get(module.__name__, ()))
        for patch in patches:
            _run(patch, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the awaited modules as the finders after it would; anything unexpected
    leaves the import to them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _patches:
            return None
        try:
            spec = next(
                (
                    found
                    for finder in sys.meta_path
                    if finder is not self and hasattr(finder, "find_spec")
                    if (found := finder.find_spec(fullname, path, target)) is not None
                ),
                None,
            )
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None
            spec.loader = _Patching(spec.loader)
            return spec
        except Exception:
            return None
