"""The ``gpu``-marked pytest tests (tests/gpu), run in their own interpreter, each one
reported as a check of its own (skipped ones with pytest's reason)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from .report import Report

STEP = "gpu pytest"


def run_gpu_tests(root: Path, workdir: Path, env: dict[str, str], report: Report) -> None:
    junit = workdir / "gpu-tests.xml"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q", "-rs",
            "-p", "no:cacheprovider", f"--junitxml={junit}",
        ],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    (workdir / "gpu-tests.log").write_text(proc.stdout + proc.stderr)
    if not junit.is_file():
        report.failed(
            "pytest -m gpu", STEP, f"pytest exited {proc.returncode}: {proc.stderr[-500:]}"
        )
        return
    cases = ET.parse(junit).getroot().iter("testcase")
    seen = 0
    for case in cases:
        seen += 1
        name = f"pytest:{case.get('name')}"
        skipped = case.find("skipped")
        failure = case.find("failure")
        if failure is None:  # an Element without children is falsy: no `or` here
            failure = case.find("error")
        if failure is not None:
            report.failed(name, STEP, (failure.get("message") or "")[:500])
        elif skipped is not None:
            report.skipped(name, STEP, skipped.get("message") or "")
        else:
            report.passed(name, STEP, f"{float(case.get('time') or 0):.1f} s")
    if not seen:
        report.failed("pytest -m gpu", STEP, f"no test collected (exit {proc.returncode})")
