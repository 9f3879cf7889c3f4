"""The subpackages form layers: no import cycle between them, and each imports alone.

Every import counts, also those inside functions (a lazy import is still a dependency);
top-level modules (``paths``, ``job_dir``, ...) are the base every subpackage may use.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import jupyter_air

PACKAGE = Path(jupyter_air.__file__).parent
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def imports_between_subpackages() -> dict[str, dict[str, list[str]]]:
    """subpackage -> subpackage it imports -> the imports that make the edge."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) < 2 or parts[0] not in SUBPACKAGES:
            continue
        here = ["jupyter_air", *parts[:-1]] if parts[-1] != "__init__" else ["jupyter_air", *parts]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                names = [".".join([*base, *([node.module] if node.module else [])])]
                if names[0] == "jupyter_air":
                    names = [f"jupyter_air.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")
                inside = target[0] == "jupyter_air" and len(target) > 1
                if inside and target[1] in SUBPACKAGES and target[1] != parts[0]:
                    edges[parts[0]][target[1]].append(f"{'.'.join(parts)} -> {name}")
    return edges


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one subpackage (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted({*edges, *(b for targets in edges.values() for b in targets)}):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_subpackages() -> None:
    edges = imports_between_subpackages()
    found = cycles(edges)
    why = [
        line
        for component in found
        for a in component
        for b in component
        for line in edges[a].get(b, [])
    ]
    assert found == [], "\n".join(why)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_each_subpackage_imports_alone(subpackage: str) -> None:
    modules = sorted(
        ".".join(("jupyter_air", subpackage, p.stem))
        for p in (PACKAGE / subpackage).glob("*.py")
        if p.stem not in ("__init__", "__main__")
    )
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    done = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
