"""What one run of the kit found: compared values, checks and the machine, written as
JSON (for scripts) and Markdown (for people)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class Check:
    """One claim checked. ``detail``: why it failed or was skipped, or what it saw."""

    name: str
    step: str
    outcome: Outcome
    detail: str = ""


@dataclass
class Compared:
    """One value read by jupyter_air and by nvidia-smi at the same moment.

    ``ours``: our readings just before and just after nvidia-smi's (a value that moves
    is compared with the span of the two, widened by the tolerance).
    """

    gpu: int
    round: int
    field: str
    ours: list[Any]
    smi: Any
    tolerance: str
    agrees: bool
    note: str = ""


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    compared: list[Compared] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    tolerances: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, step: str, outcome: Outcome, detail: str = "") -> Check:
        check = Check(name, step, outcome, detail)
        self.checks.append(check)
        return check

    def passed(self, name: str, step: str, detail: str = "") -> Check:
        return self.add(name, step, Outcome.PASSED, detail)

    def failed(self, name: str, step: str, detail: str) -> Check:
        return self.add(name, step, Outcome.FAILED, detail)

    def skipped(self, name: str, step: str, reason: str) -> Check:
        return self.add(name, step, Outcome.SKIPPED, reason)

    def expect(self, name: str, step: str, ok: bool, detail: str) -> Check:
        return self.add(name, step, Outcome.PASSED if ok else Outcome.FAILED, detail)

    def counts(self) -> dict[str, int]:
        return {o.value: sum(c.outcome is o for c in self.checks) for o in Outcome}

    def as_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["summary"] = self.counts()
        return doc

    def write(self, directory: Path) -> tuple[Path, Path]:
        """``gpu-check.json`` and ``gpu-check.md`` in ``directory``; their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        as_json = directory / "gpu-check.json"
        as_md = directory / "gpu-check.md"
        as_json.write_text(json.dumps(self.as_json(), indent=2, default=str) + "\n")
        as_md.write_text(self.markdown())
        return as_json, as_md

    def markdown(self) -> str:
        counts = self.counts()
        lines = [
            "# jupyter_air GPU check",
            "",
            f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped.",
            "",
            "## Machine",
            "",
            "| what | value |",
            "| --- | --- |",
            *(f"| {k} | {_cell(v)} |" for k, v in self.machine.items()),
            "",
            "## Checks",
            "",
            "| step | check | outcome | detail |",
            "| --- | --- | --- | --- |",
            *(
                f"| {c.step} | {c.name} | {c.outcome.value} | {_cell(c.detail)} |"
                for c in self.checks
            ),
            "",
            "## Values compared with nvidia-smi",
            "",
            "| gpu | round | field | ours (before, after) | nvidia-smi | tolerance | agrees |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            *(
                f"| {v.gpu} | {v.round} | {v.field} | {_cell(v.ours)} | {_cell(v.smi)} "
                f"| {_cell(v.tolerance)} | {'yes' if v.agrees else 'NO'} {_cell(v.note)} |"
                for v in self.compared
            ),
            "",
            "## Timings",
            "",
            "| what | value |",
            "| --- | --- |",
            *(f"| {k} | {_cell(v)} |" for k, v in self.timings.items()),
            "",
            "## Tolerances",
            "",
            "| field | nvidia-smi field | tolerance | why |",
            "| --- | --- | --- | --- |",
            *(
                f"| {t['field']} | {t['smi']} | {_cell(t['allowed'])} | {_cell(t['why'])} |"
                for t in self.tolerances
            ),
            "",
        ]
        return "\n".join(lines)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text.replace("|", "\\|").replace("\n", " ")
