"""A library is patched once it is imported, never imported by us (issue 38; resuming
and the step marks both rely on it): after its own code, once per patch, now if it is
imported already; a patch that fails leaves the import working, with one line said."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from jupyter_air.import_hooks import when_imported


@pytest.fixture
def library(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A module of this test's own, importable from ``tmp_path``, not imported yet."""
    name = f"lib_{request.node.name.replace('[', '_').replace(']', '_')}"
    (tmp_path / f"{name}.py").write_text("VALUE = 1\ndef f():\n    return 'plain'\n")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def wrap_f(module: ModuleType) -> None:
    plain = module.f
    setattr(module, "f", lambda: f"patched {plain()}")  # noqa: B010 (mypy: no such name)
    setattr(module, "seen", [*getattr(module, "seen", []), module.VALUE])  # noqa: B010


def test_a_module_is_patched_after_its_own_code_runs(library: str) -> None:
    when_imported(library, wrap_f)
    assert library not in sys.modules, "waiting imports nothing"
    module = importlib.import_module(library)
    assert module.f() == "patched plain"
    assert module.seen == [1], "patched once, with the module's own names in place"


def test_a_module_imported_already_is_patched_now(library: str) -> None:
    module = importlib.import_module(library)
    when_imported(library, wrap_f)
    assert module.f() == "patched plain"


def test_the_same_patch_given_twice_runs_once(library: str) -> None:
    when_imported(library, wrap_f)
    when_imported(library, wrap_f)
    assert importlib.import_module(library).f() == "patched plain"


def test_a_failing_patch_leaves_the_import_and_the_other_patches_working(
    library: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(module: ModuleType) -> None:
        raise KeyError("nope")

    when_imported(library, broken)
    when_imported(library, wrap_f)
    module = importlib.import_module(library)
    assert module.f() == "patched plain"
    assert f"[air] a hook on {library} is off: KeyError('nope')" in capsys.readouterr().err


def test_a_module_that_cannot_be_found_still_fails_as_it_would() -> None:
    when_imported("no_such_module_anywhere", wrap_f)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("no_such_module_anywhere")
