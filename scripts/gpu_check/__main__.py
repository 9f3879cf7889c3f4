"""``python -m scripts.gpu_check``: the kit's checks, in one run, into one report.

``scripts/gpu-check`` installs the wheelhouse and calls this; see docs/gpu-check.md.
Exit status: 0 when no check failed (skipped ones allowed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from .report import Report

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="emptied, then used")
    parser.add_argument("--report-dir", type=Path, required=True)
    parser.add_argument("--install-log", type=Path, help="what scripts/gpu-check installed")
    parser.add_argument("--rounds", type=int, default=3, help="nvidia-smi comparison rounds")
    parser.add_argument("--timing-rounds", type=int, default=7)
    parser.add_argument("--timing-samples", type=int, default=200)
    parser.add_argument("--hold-mib", type=int, default=4096, help="GPU memory the job holds")
    parser.add_argument("--side", type=int, default=8192, help="matrix side of the job's load")
    parser.add_argument("--no-gpu-tests", action="store_true", help="skip pytest -m gpu")
    args = parser.parse_args(argv)

    from .steps import Run

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    report = Report()
    run = Run(args, report, ROOT)
    started = time.monotonic()
    try:
        run.all()
    except BaseException as err:  # the report is written whatever happened, and says so
        report.failed("kit", "kit", f"the kit stopped: {type(err).__name__}: {err}")
        if not isinstance(err, Exception):
            raise
    finally:
        report.timings["kit_seconds"] = round(time.monotonic() - started, 1)
        paths = report.write(args.report_dir)
    counts = report.counts()
    print(json.dumps({"report": [str(p) for p in paths], **counts}))
    for check in report.checks:
        print(f"{check.outcome.value:8} {check.step:22} {check.name}: {check.detail[:160]}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
