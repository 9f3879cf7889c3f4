"""A search space written inline, as a notebook user writes it: ``lr: loguniform(1e-4,
1e-1)``, ``layers: int(1, 4)``, ``optimizer: choice(adam, sgd)``.

Each parameter becomes the sweep file's form (``{type: float, low, high, log}``), which
``sweep_file`` then checks as any file's space (ranges, names). Only the forms below are
read, each by its words and literal values (``ast.literal_eval``): nothing is evaluated.

=============================  =====================================================
``uniform(LOW, HIGH)``          a float between them (``float(LOW, HIGH)`` alike)
``loguniform(LOW, HIGH)``       a float on a log scale (``float(LOW, HIGH, log=True)``)
``float(LOW, HIGH, step=S)``    a float on a grid of step S
``int(LOW, HIGH)``              an integer, both ends included (``step=``, ``log=``)
``choice(A, B, ...)``           one of the values; ``[A, B, ...]`` alike; a bare word
                                is text (``choice(adam, sgd)``)
=============================  =====================================================
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

#: What each form takes besides its two bounds (choices take values only).
_KEYWORDS = {
    "uniform": (),
    "loguniform": (),
    "float": ("step", "log"),
    "int": ("step", "log"),
}
FORMS = (
    "uniform(LOW, HIGH), loguniform(LOW, HIGH), float(LOW, HIGH, step=S), int(LOW, HIGH), "
    "choice(A, B, ...)"
)


class BadSpace(ValueError):
    """A parameter that is written in none of the forms; the message says which."""


def parse_line(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME: FORM`` as (name, the file's form of the parameter); quotes around it (a
    magic's line keeps them) are left out."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    name, sep, form = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise BadSpace(f"{text!r}: expected NAME: FORM, e.g. 'lr: loguniform(1e-4, 1e-1)'")
    return name, parse_form(form, name)


def parse_form(form: str, name: str) -> dict[str, Any]:
    """One parameter's form (``loguniform(1e-4, 1e-1)``) in the file's terms."""
    try:
        node = ast.parse(form.strip(), mode="eval").body
    except SyntaxError:
        raise BadSpace(f"{name}: {form.strip()!r} is not one of {FORMS}") from None
    if isinstance(node, ast.List | ast.Tuple):
        return {"type": "categorical", "choices": [_value(v, name) for v in node.elts]}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise BadSpace(f"{name}: {form.strip()!r} is not one of {FORMS}")
    kind = node.func.id
    args = [_value(v, name) for v in node.args]
    if kind == "choice":
        if node.keywords:
            raise BadSpace(f"{name}: choice() takes values only")
        return {"type": "categorical", "choices": args}
    if kind not in _KEYWORDS:
        raise BadSpace(f"{name}: no form {kind}(): use one of {FORMS}")
    if len(args) != 2:
        raise BadSpace(f"{name}: {kind}() takes (LOW, HIGH), got {len(args)} value(s)")
    keywords: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg not in _KEYWORDS[kind]:
            allowed = ", ".join(f"{k}=" for k in _KEYWORDS[kind]) or "no keyword"
            raise BadSpace(f"{name}: {kind}() takes {allowed}, not {keyword.arg}=")
        keywords[keyword.arg] = _value(keyword.value, name)
    low, high = args
    if kind == "int":
        return {"type": "int", "low": low, "high": high, **keywords}
    return {"type": "float", "low": low, "high": high, "log": kind == "loguniform", **keywords}


def parse_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """A space given as data (``sweep(fn, {"lr": "loguniform(1e-4, 1e-1)", "opt": [...]})``):
    a text value is a form, anything else is the file's form, checked by ``sweep_file``."""
    return {
        name: parse_form(value, name) if isinstance(value, str) else value
        for name, value in space.items()
    }


def _value(node: ast.expr, name: str) -> Any:
    """A literal, or a bare word as its text (``adam``); ``-1e-3`` too."""
    if isinstance(node, ast.Name):
        return {"True": True, "False": False, "None": None}.get(node.id, node.id)
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise BadSpace(f"{name}: {ast.unparse(node)!r} is not a plain value") from None
