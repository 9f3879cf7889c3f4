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


# -- inside jobs/ ----------------------------------------------------------------------

JOBS = PACKAGE / "jobs"
JOBS_SUBPACKAGES = sorted(p.parent.name for p in JOBS.glob("*/__init__.py"))

#: What each subpackage of ``jobs`` must never reach. ``node`` is the floor: what runs on
#: a node (its agent, its ranks' start and reaping, ``rank_main``, outcomes, stacks, the
#: hints its samples feed), which the backends and the supervisor build on. Warm sessions
#: stand beside it: their ranks run ``rank_main``'s cells (``sessions`` imports ``node``),
#: and a node starts them by command like any rank, never by importing ``sessions``. The
#: supervisor drives the backends (it asks one for each attempt's nodes and watches them),
#: so a backend never imports the supervisor.
JOBS_FORBIDDEN = {
    "node": {
        "backends",
        "supervision",
        "sessions",
        "service",
        "submit",
        "jupyter_air.kernel",
        "jupyter_air.server",
    },
    "sessions": {"backends", "supervision"},
    "backends": {"supervision"},
}


def module_names() -> set[str]:
    """Every module and package of ``jupyter_air``, dotted."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ``jupyter_air`` that one file imports, lazily or not."""
    here = list(path.relative_to(PACKAGE.parent).parts[:-1])  # the file's package
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # ``from . import stacks`` imports a module
                name = f"{module}.{alias.name}"
                found.add(name if name in known else module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.split(".")[0] == "jupyter_air"}


def jobs_place(module: str) -> str:
    """Where a module stands as the jobs layers see it: a subpackage or top-level module
    of ``jobs`` by its name (``node``, ``service``), anything else by its package
    (``jupyter_air.kernel``)."""
    parts = module.split(".")
    if parts[:2] == ["jupyter_air", "jobs"] and len(parts) > 2:
        return parts[2]
    return ".".join(parts[:2])


def jobs_reach() -> dict[str, dict[str, list[str]]]:
    """subpackage of ``jobs`` -> what it reaches -> the chain of imports that does. The
    top-level modules of ``jobs`` (``env``, ``spec``, ...) are shared ground: what they
    import counts for whoever imports them; another subpackage, or a module outside
    ``jobs``, ends the chain."""
    known = module_names()
    files = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in JOBS.rglob("*.py")
    }
    edges = {
        name.removesuffix(".__init__"): imports_of(path, known) for name, path in files.items()
    }
    reach: dict[str, dict[str, list[str]]] = {}
    for sub in JOBS_SUBPACKAGES:
        start = [m for m in edges if jobs_place(m) == sub]
        chains: dict[str, list[str]] = {m: [m] for m in start}
        queue = list(start)
        found: dict[str, list[str]] = {}
        while queue:
            module = queue.pop(0)
            for target in sorted(edges.get(module, ())):
                place = jobs_place(target)
                chain = [*chains[module], target]
                if place == sub:
                    continue
                found.setdefault(place, chain)
                shared = place not in JOBS_SUBPACKAGES and target in edges
                if shared and target not in chains:  # its imports are ours
                    chains[target] = chain
                    queue.append(target)
        reach[sub] = found
    return reach


def test_the_node_side_is_below_backends_and_the_supervisor() -> None:
    """``node`` and ``sessions`` import no backend and no supervisor (``node`` nothing
    above it at all), and the backends do not import the supervisor, directly or through
    ``jobs``' shared modules."""
    reach = jobs_reach()
    broken = [
        f"{sub} -> {place}: {' -> '.join(reach[sub][place])}"
        for sub, forbidden in JOBS_FORBIDDEN.items()
        for place in sorted(forbidden & set(reach[sub]))
    ]
    assert broken == [], "\n".join(broken)


def test_no_import_cycle_between_the_subpackages_of_jobs() -> None:
    edges = {
        sub: {place: [" -> ".join(chain)] for place, chain in reached.items()}
        for sub, reached in jobs_reach().items()
    }
    inside = {a: {b: c for b, c in t.items() if b in JOBS_SUBPACKAGES} for a, t in edges.items()}
    found = cycles(inside)
    why = [line for part in found for a in part for b in part for line in inside[a].get(b, [])]
    assert found == [], "\n".join(why)
