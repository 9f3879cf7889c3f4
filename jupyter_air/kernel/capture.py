"""Shipping the notebook state a cell needs to fresh rank processes.

Only the names the cell reads are shipped (pickled with cloudpickle, which pickles
functions and classes defined in the notebook by value); modules are re-imported in
the rank instead. A name that cannot be pickled stops the launch before anything
starts, with the name and the reason.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import cloudpickle

#: IPython's own bookkeeping names, never shipped.
IPYTHON_NAMES = re.compile(r"_+|_i+|_i?\d+|_oh|_ih|_dh|In|Out|get_ipython|exit|quit")


class UnpicklableName(Exception):
    """A name the cell uses cannot be sent to the ranks."""

    def __init__(self, name: str, reason: BaseException) -> None:
        super().__init__(
            f"cannot send {name!r} to the ranks: {type(reason).__name__}: {reason}. "
            f"Create it inside the cell (or in a function the cell calls) instead."
        )
        self.name = name


@dataclass
class Payload:
    """What a rank needs: code, names, modules, and which names to send back."""

    kind: str
    source: str = ""
    names: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    function: Any = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> bytes:
        data = {
            "kind": self.kind,
            "source": self.source,
            "names": self.names,
            "modules": self.modules,
            "outputs": self.outputs,
            "function": self.function,
            "args": self.args,
            "kwargs": self.kwargs,
        }
        try:
            return bytes(cloudpickle.dumps(data))
        except Exception:  # find the culprit, to say which name it is
            for name, value in {**self.names, "function": self.function}.items():
                try:
                    cloudpickle.dumps(value)
                except Exception as err:
                    raise UnpicklableName(name, err) from err
            for i, value in enumerate([*self.args, *self.kwargs.values()]):
                try:
                    cloudpickle.dumps(value)
                except Exception as err:
                    raise UnpicklableName(f"argument {i}", err) from err
            raise


def names_read(source: str) -> set[str]:
    """Names the code reads (loads) anywhere, nested functions included."""
    tree = ast.parse(source)
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }


def cell_payload(source: str, user_ns: Mapping[str, Any], outputs: list[str]) -> Payload:
    """The body of a ``%%air_distributed`` cell, shipped after a blank line in place of
    the magic's line: the ranks number its lines as the editor does, from the magic's, so
    a traceback (or a syntax error here) names the line the user sees."""
    source = "\n" + source
    payload = Payload(kind="cell", source=source, outputs=outputs)
    for name in sorted(names_read(source)):
        if name not in user_ns or IPYTHON_NAMES.fullmatch(name):
            continue
        value = user_ns[name]
        if isinstance(value, ModuleType):
            payload.modules[name] = value.__name__
        elif name in vars(builtins) and value is vars(builtins)[name]:
            continue
        else:
            payload.names[name] = value
    return payload
