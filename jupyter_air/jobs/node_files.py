"""What a multi-node attempt keeps about its nodes, beside its logs.

The supervisor writes them from what the node agents report; the server reads them
for the GPU resources panel. ``attempt_K/nodes.json`` lists the nodes (rank, Ray node
id, address, host name); ``attempt_K/gpu/node_N.json`` is node N's GPU sampler
snapshot (the document of ``GET jupyter-air/gpu``, full history), replaced at every
sample so readers always see a whole file. Both stay after the job for its history.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..paths import write_private

NODES_FILE = "nodes.json"
GPU_DIR = "gpu"


def write_nodes(attempt_dir: Path, nodes: list[dict[str, Any]]) -> None:
    _replace(attempt_dir / NODES_FILE, nodes)


def read_nodes(attempt_dir: Path) -> list[dict[str, Any]]:
    """The attempt's nodes, ``[]`` for a single-machine attempt (no file)."""
    try:
        nodes = json.loads((attempt_dir / NODES_FILE).read_text())
    except (OSError, ValueError):
        return []
    return nodes if isinstance(nodes, list) else []


def write_gpu(attempt_dir: Path, node: int, snapshot: dict[str, Any]) -> None:
    _replace(attempt_dir / GPU_DIR / f"node_{node}.json", snapshot)


def read_gpu(attempt_dir: Path, node: int) -> dict[str, Any] | None:
    """Node ``node``'s last GPU snapshot, or None if it never sent one."""
    try:
        doc = json.loads((attempt_dir / GPU_DIR / f"node_{node}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _replace(path: Path, value: Any) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_private(tmp, json.dumps(value, separators=(",", ":")))
    tmp.replace(path)
