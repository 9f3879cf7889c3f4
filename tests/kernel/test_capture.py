"""Which notebook names a cell ships to the ranks, and refusing what cannot be shipped."""

from __future__ import annotations

import threading
import types

import pytest

from jupyter_air.kernel.capture import UnpicklableName, cell_payload, names_read


def test_only_names_the_cell_reads_are_shipped() -> None:
    user_ns = {"model": object(), "unused": 1, "x": 2, "In": [], "_": 3, "os": types}
    payload = cell_payload("y = x + 1\nprint(model)\nimport os", user_ns, outputs=[])
    assert set(payload.names) == {"x", "model"}
    assert payload.modules == {}  # `os` is imported by the cell itself


def test_modules_are_imported_again_rather_than_pickled() -> None:
    import json

    payload = cell_payload("json.dumps(1)", {"json": json}, outputs=[])
    assert payload.modules == {"json": "json"}
    assert payload.names == {}


def test_names_in_nested_functions_count() -> None:
    assert {"helper", "data"} <= names_read("def f():\n    return helper(data)\nf()")


def test_an_unpicklable_name_is_refused_with_its_name_and_reason() -> None:
    payload = cell_payload("with lock: pass", {"lock": threading.Lock()}, outputs=[])
    with pytest.raises(UnpicklableName, match=r"cannot send 'lock' to the ranks: TypeError"):
        payload.dumps()
