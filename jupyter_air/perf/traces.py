"""A profile's traces: every rank's ``torch.profiler`` trace merged into one (a process
per rank, on one clock), and what they say (the top operators by self time, each rank's
compute / communication / idle split).

Each rank's Chrome trace counts time from its own base (``baseTimeNanoseconds`` plus the
events' ``ts`` in microseconds is the host's wall clock). Ranks of one host share that
clock; another host's clock may be off by milliseconds, which would put its collectives
out of step with the others'. A collective ends on every rank at nearly the same moment
(none leaves before the last one arrives), so each other host is shifted by the median
gap between the ends of its collectives and the reference rank's, matched in order:
the NCCL kernels on a GPU, gloo's own work (``gloo:all_reduce``) on the CPU.

The split of a rank's profiled steps (its first step's start to its last step's end):
``compute`` is the time some operator runs (the GPU's kernels where the trace has them,
else the CPU's operators), ``comm`` the time a collective runs and no compute does
(communication not hidden behind compute), ``idle`` the rest (Python between operators,
waiting for data, a GPU with nothing queued). The three add up to the window.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A collective: c10d's operators, gloo's and NCCL's own work, NCCL's kernels.
COMM = re.compile(r"^(?:c10d|gloo|nccl|mpi|ucc)::?|^record_param_comms$|^nccl\w*Kernel", re.I)
#: The collectives whose end is the same moment on every rank (not an enqueue).
ALIGNING = re.compile(r"^(?:gloo|nccl):|^nccl\w*Kernel", re.I)
#: A step of ``torch.profiler``'s schedule.
STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: Device work: the split reads these where a trace has any.
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: What the operators table counts.
OPERATOR_CATS = frozenset({"cpu_op", "user_annotation", *DEVICE_CATS})
#: Operators listed in a summary.
TOP = 15


class BadTrace(ValueError):
    """A file that is not a Chrome trace of ``torch.profiler``."""


def load(path: Path) -> dict[str, Any]:
    """A rank's trace (``.json``, or ``.json.gz``)."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, ValueError, EOFError) as err:
        raise BadTrace(f"{path.name}: not a readable trace ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise BadTrace(f"{path.name}: no 'traceEvents' in it")
    return doc


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace, and the host whose clock it counts on."""

    rank: int
    host: str
    doc: dict[str, Any]

    @property
    def base_us(self) -> float:
        """Where its ``ts`` count from, in microseconds of the host's wall clock."""
        base = self.doc.get("baseTimeNanoseconds")
        return base / 1000.0 if isinstance(base, int | float) else 0.0

    def spans(self) -> list[dict[str, Any]]:
        """Its complete events (``ph: X``) of real threads, with numeric times."""
        return [
            e
            for e in self.doc["traceEvents"]
            if isinstance(e, dict)
            and e.get("ph") == "X"
            and isinstance(e.get("pid"), int)
            and isinstance(e.get("ts"), int | float)
            and isinstance(e.get("dur"), int | float)
        ]


# -- clocks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clocks:
    """Each rank's shift onto the reference rank's clock (microseconds), and how it was
    found, in words."""

    shift_us: dict[int, float]
    how: str


def collective_ends(trace: RankTrace) -> list[tuple[str, float]]:
    """The aligning collectives of a rank, in order: (name, end on its host's clock)."""
    found = sorted(
        (e["ts"], e["name"], e["ts"] + e["dur"])
        for e in trace.spans()
        if ALIGNING.search(str(e.get("name", "")))
    )
    return [(name, trace.base_us + end) for _, name, end in found]


def align(traces: list[RankTrace]) -> Clocks:
    """Shift each host other than the first rank's onto its clock (see the module)."""
    if not traces:
        return Clocks({}, "no trace")
    ref = traces[0]
    hosts: dict[str, list[RankTrace]] = defaultdict(list)
    for t in traces:
        hosts[t.host].append(t)
    if len(hosts) == 1:
        return Clocks({t.rank: 0.0 for t in traces}, f"one host ({ref.host}): one clock")
    shift = {t.rank: 0.0 for t in hosts[ref.host]}
    said = []
    ref_ends = collective_ends(ref)
    for host, ranks in hosts.items():
        if host == ref.host:
            continue
        gaps = _gaps(ref_ends, collective_ends(ranks[0]))
        offset = statistics.median(gaps) if gaps else 0.0
        for t in ranks:
            shift[t.rank] = offset
        if gaps:
            said.append(f"{host} {offset / 1000:+.3f} ms ({len(gaps)} collectives)")
        else:
            said.append(f"{host} not shifted (no collective in common with rank {ref.rank})")
    return Clocks(shift, f"onto {ref.host}'s clock: " + ", ".join(said))


def _gaps(ref: list[tuple[str, float]], other: list[tuple[str, float]]) -> list[float]:
    """``ref``'s end minus ``other``'s, pair by pair while the names match."""
    gaps = []
    for (a_name, a_end), (b_name, b_end) in zip(ref, other, strict=False):
        if a_name != b_name:
            break
        gaps.append(a_end - b_end)
    return gaps


# -- merging -----------------------------------------------------------------------------


def merge(traces: list[RankTrace], clocks: Clocks | None = None) -> dict[str, Any]:
    """One Chrome trace: a process per rank (named ``rank R (host, pid P)``, in rank
    order), each rank's threads in it, every time on one clock and counted from the
    earliest event. Opens in Perfetto or ``chrome://tracing``."""
    clocks = clocks or align(traces)
    # Bases are around 1e15 us: differences of them first, then the small numbers.
    ref = traces[0].base_us if traces else 0.0

    def moved_by(t: RankTrace) -> float:
        return (t.base_us - ref) + clocks.shift_us.get(t.rank, 0.0)

    starts = [moved_by(t) + min(e["ts"] for e in t.spans()) for t in traces if t.spans()]
    origin = min(starts, default=0.0)
    events: list[dict[str, Any]] = []
    for t in sorted(traces, key=lambda t: t.rank):
        offset = moved_by(t) - origin
        pids = {e["pid"] for e in t.doc["traceEvents"] if isinstance(e.get("pid"), int)}
        label = f"rank {t.rank} ({t.host}, pid {', '.join(map(str, sorted(pids)))})"
        events.append(_meta(t.rank, "process_name", {"name": label}))
        events.append(_meta(t.rank, "process_sort_index", {"sort_index": t.rank}))
        for e in t.doc["traceEvents"]:
            moved = _moved(e, t.rank, offset)
            if moved is not None:
                events.append(moved)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "ranks": [t.rank for t in traces],
            "start_unix_us": round(ref + origin, 3),
            "clocks": clocks.how,
        },
    }


def _meta(pid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": 0, "ts": 0, "args": args}


def _moved(e: Any, rank: int, offset: float) -> dict[str, Any] | None:
    """An event of rank ``rank``'s process, its time moved by ``offset``; None: one that
    is no thread's (the profiler's own spans) or names the process (named anew)."""
    if not isinstance(e, dict) or not isinstance(e.get("pid"), int):
        return None
    if e.get("ph") == "M" and e.get("name") in ("process_name", "process_sort_index"):
        return None
    out = {**e, "pid": rank}
    if isinstance(e.get("ts"), int | float):
        out["ts"] = round(e["ts"] + offset, 3)
    if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
        out["id"] = (e["id"] << 20) | rank  # flows stay within their rank
    return out


def write_merged(doc: dict[str, Any], path: Path) -> None:
    """The merged trace, gzipped (Perfetto and ``chrome://tracing`` open it as it is)."""
    from ..paths import write_private

    write_private(path, gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6))


# -- what the traces say -----------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """One rank's profiled steps: their window and how it was spent (seconds)."""

    rank: int
    host: str
    steps: int
    window_s: float
    compute_s: float
    comm_s: float
    idle_s: float
    on_gpu: bool

    def share(self, seconds: float) -> float:
        return seconds / self.window_s if self.window_s > 0 else 0.0

    @property
    def step_s(self) -> float | None:
        return self.window_s / self.steps if self.steps else None


@dataclass(frozen=True)
class Operator:
    name: str
    calls: int
    self_s: float


@dataclass(frozen=True)
class Summary:
    """What a profile says: each rank's split, the top operators of all ranks by self
    time (``share`` of all operators' self time), how the clocks were aligned."""

    ranks: list[Split]
    operators: list[Operator]
    self_total_s: float
    clocks: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ranks": [
                {
                    "rank": s.rank,
                    "host": s.host,
                    "steps": s.steps,
                    "window_s": round(s.window_s, 6),
                    "step_s": None if s.step_s is None else round(s.step_s, 6),
                    "compute_s": round(s.compute_s, 6),
                    "comm_s": round(s.comm_s, 6),
                    "idle_s": round(s.idle_s, 6),
                    "compute": round(s.share(s.compute_s), 4),
                    "comm": round(s.share(s.comm_s), 4),
                    "idle": round(s.share(s.idle_s), 4),
                    "on_gpu": s.on_gpu,
                }
                for s in self.ranks
            ],
            "operators": [
                {
                    "name": o.name,
                    "calls": o.calls,
                    "self_s": round(o.self_s, 6),
                    "share": round(o.self_s / self.self_total_s, 4) if self.self_total_s else 0,
                }
                for o in self.operators
            ],
            "self_total_s": round(self.self_total_s, 6),
            "clocks": self.clocks,
            "notes": self.notes,
        }

    def text(self) -> str:
        """As the CLI prints it (and the run keeps it)."""
        lines = ["Each rank's profiled steps (compute / communication / idle):"]
        lines.append(f"  {'RANK':>4} {'HOST':16} {'STEPS':>5} {'STEP':>10}  COMPUTE   COMM   IDLE")
        for s in self.ranks:
            step = f"{s.step_s * 1000:.1f} ms" if s.step_s is not None else "-"
            lines.append(
                f"  {s.rank:>4} {s.host[:16]:16} {s.steps:>5} {step:>10}  "
                f"{_pct(s.share(s.compute_s)):>7} {_pct(s.share(s.comm_s)):>6} "
                f"{_pct(s.share(s.idle_s)):>6}"
            )
        lines.append("Top operators by self time (all ranks):")
        lines.append(f"  {'SELF':>10} {'SHARE':>6} {'CALLS':>7}  NAME")
        for o in self.operators:
            share = o.self_s / self.self_total_s if self.self_total_s else 0.0
            lines.append(f"  {o.self_s * 1000:>7.2f} ms {_pct(share):>6} {o.calls:>7}  {o.name}")
        lines.append(f"Clocks: {self.clocks}")
        lines.extend(self.notes)
        return "\n".join(lines) + "\n"


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def summarize(traces: list[RankTrace], clocks: Clocks | None = None, top: int = TOP) -> Summary:
    """Each rank's split and the top operators (see the module)."""
    clocks = clocks or align(traces)
    calls: dict[str, int] = defaultdict(int)
    self_s: dict[str, float] = defaultdict(float)
    splits = []
    for t in sorted(traces, key=lambda t: t.rank):
        spans = t.spans()
        splits.append(split(t, spans))
        for name, seconds in self_times(spans):
            calls[name] += 1
            self_s[name] += seconds
    ranked = sorted(self_s, key=lambda n: -self_s[n])[:top]
    return Summary(
        ranks=splits,
        operators=[Operator(n, calls[n], self_s[n]) for n in ranked],
        self_total_s=sum(self_s.values()),
        clocks=clocks.how,
    )


def split(trace: RankTrace, spans: list[dict[str, Any]] | None = None) -> Split:
    """A rank's window (its profiled steps) and its compute / comm / idle in it."""
    spans = trace.spans() if spans is None else spans
    steps = [e for e in spans if STEP.match(str(e.get("name", "")))]
    if steps:
        lo = min(e["ts"] for e in steps)
        hi = max(e["ts"] + e["dur"] for e in steps)
    elif spans:
        lo = min(e["ts"] for e in spans)
        hi = max(e["ts"] + e["dur"] for e in spans)
    else:
        lo = hi = 0.0
    device = [e for e in spans if e.get("cat") in DEVICE_CATS]
    work = device or [e for e in spans if e.get("cat") in ("cpu_op", "user_annotation")]
    comm = [e for e in work if COMM.search(str(e.get("name", "")))]
    if not device:  # gloo's own work runs on its threads, as user annotations
        comm = [e for e in spans if COMM.search(str(e.get("name", "")))]
    compute = [
        e
        for e in work
        if not COMM.search(str(e.get("name", "")))
        and not STEP.match(str(e.get("name", "")))
        and (device or e.get("cat") == "cpu_op")
    ]
    busy = _union(_clip(compute, lo, hi))
    talking = _union(_clip(comm, lo, hi))
    compute_us = _length(busy)
    either_us = _length(_union(busy + talking))
    window_us = hi - lo
    return Split(
        rank=trace.rank,
        host=trace.host,
        steps=len(steps),
        window_s=window_us / 1e6,
        compute_s=compute_us / 1e6,
        comm_s=(either_us - compute_us) / 1e6,
        idle_s=max(window_us - either_us, 0.0) / 1e6,
        on_gpu=bool(device),
    )


def self_times(spans: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
    """(name, seconds) of each operator: its length less its direct children's on its
    thread (a GPU kernel has none)."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in spans:
        by_thread[(e["pid"], e.get("tid"))].append(e)
    found = []
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list[Any]] = []  # [event, children's length]
        done: list[list[Any]] = []
        for e in events:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                done.append(stack.pop())
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        done.extend(stack)
        for e, children in done:
            name = str(e.get("name", ""))
            if e.get("cat") in OPERATOR_CATS and not STEP.match(name):
                found.append((name, max(e["dur"] - children, 0.0) / 1e6))
    return found


def _clip(events: list[dict[str, Any]], lo: float, hi: float) -> list[tuple[float, float]]:
    out = []
    for e in events:
        a, b = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
        if b > a:
            out.append((a, b))
    return out


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def from_files(files: Mapping[int, tuple[Path, str]]) -> list[RankTrace]:
    """The traces of ``{rank: (file, host)}``, in rank order."""
    return [RankTrace(rank, host, load(path)) for rank, (path, host) in sorted(files.items())]
