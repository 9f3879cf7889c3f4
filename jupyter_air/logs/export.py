"""A job's logs written out as files, one per rank (``air logs --download-to DIR``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .query import LogFilter, log_files, read_all_text


def write_rank_files(
    attempt_dir: Path, flt: LogFilter, target: Path, attempt: int
) -> list[tuple[Path, int]]:
    """Each matching rank's lines as text in ``target/attempt_K/node_N/rank_R.log``: the
    download's own layout, not a job's directory (which has ``logs/`` in between). The
    files written and their number of lines."""
    written = []
    for f in log_files(attempt_dir, flt):
        path = target / f"attempt_{attempt}" / f"node_{f.node}" / f"rank_{f.rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        one = dataclasses.replace(flt, node=f.node, rank=f.rank)
        count = 0
        with path.open("w", encoding="utf-8") as out:
            for page in read_all_text(attempt_dir, one):
                out.write(page.text)
                count += page.count
        written.append((path, count))
    return written
