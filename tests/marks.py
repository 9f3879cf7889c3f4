"""Step marks files as a job's ranks write them (issue 38's contract: one
``rank-<R>.jsonl`` a rank in the attempt's ``perf/``), for the tests of what shows them:
the jobs API, ``air get`` and ``air list``, the cell's status line, the panels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_air.job_dir import AttemptDir


def write_marks(
    attempt_dir: Path,
    ranks: int = 2,
    steps: int = 100,
    every: float = 0.5,
    end: float = 1_000_000.0,
    plan: int | None = 1000,
    batch: dict[str, int] | None = None,
    flops: dict[str, Any] | None = None,
) -> Path:
    """``steps`` steady steps of ``every`` seconds by each of ``ranks`` ranks, the last
    at ``end``, after the run's ``plan`` (None: unknown length), each with ``batch``
    (``{"n": 8, "k": 1024}``), and rank 0's ``flops`` line if given; the folder."""
    perf = AttemptDir(attempt_dir).perf
    perf.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        lines: list[dict[str, Any]] = []
        if plan is not None:
            lines.append({"plan": plan, "src": "hf", "t": end - steps * every})
        if flops is not None and rank == 0:
            lines.append({**flops, "t": end - steps * every})
        for s in range(1, steps + 1):
            t = end - (steps - s) * every
            lines.append({"s": s, "t": t, "dt": every, **(batch or {}), "src": "hf"})
        with (perf / f"rank-{rank}.jsonl").open("a") as f:
            f.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    return perf
