"""Which collective a hung job waits in, and which rank never came: from each rank's
flight recorder (``node.flight_recorder``) and its stacks (``node.stacks``).

Collectives are numbered per process group, in the order every rank calls them: the
n-th ``all_reduce`` of one rank meets the n-th of the others. A rank records each call
as it enters it and retires it once done. So the lowest number that some rank has
entered and not finished is where the job waits: the ranks that entered it wait there;
a rank whose last call is below it never came (its stacks say where it is instead);
ranks that entered it with another op, or other shapes, disagree (a mismatch: they
wait for each other forever). Said in one line (``HangReport.line``) and in detail, one
line a rank. Pure logic: the supervisor, ``air stacks`` and the tests call it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

#: The default process group's id: every rank is in it.
DEFAULT_GROUP = "0"
#: c10's scalar type names, as torch spells them.
DTYPES = {
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "Half": "float16",
    "Float": "float32",
    "Double": "float64",
    "BFloat16": "bfloat16",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Bool": "bool",
}
#: Ops whose every rank passes the same shapes and dtypes (a gather's or a scatter's
#: root passes others than the rest: only their op is compared).
SAME_SHAPES = frozenset(
    {
        "all_reduce",
        "allreduce",
        "allreduce_coalesced",
        "all_reduce_coalesced",
        "broadcast",
        "reduce",
        "all_gather",
        "allgather",
        "_allgather_base",
        "all_gather_into_tensor",
        "allgather_into_tensor_coalesced",
        "reduce_scatter",
        "_reduce_scatter_base",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "barrier",
    }
)
#: A rank's last collective when it has called none.
NO_CALL = "none"
#: Tensors of a call shown in its line.
SHOWN_TENSORS = 3


class HangKind(StrEnum):
    #: Ranks wait in a collective that some rank never entered.
    ABSENT = "absent"
    #: Ranks entered different collectives (or shapes) at the same number.
    MISMATCH = "mismatch"
    #: Every rank with a recorder waits in the same collective.
    WAITING = "waiting"
    #: No rank waits in a collective.
    NONE = "none"
    #: No recorder could be read.
    UNKNOWN = "unknown"


#: The kinds that name a collective the ranks wait in.
NAMED = frozenset({HangKind.ABSENT, HangKind.MISMATCH, HangKind.WAITING})


@dataclass(frozen=True)
class Call:
    """One collective as one rank recorded it."""

    group: str
    group_name: str
    seq: int
    op: str
    backend: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    inputs: int
    done: bool
    created_ns: int
    frames: tuple[tuple[str, str, int], ...]

    @property
    def signature(self) -> tuple[Any, ...]:
        """What every rank's call of the same number must agree on."""
        if self.op in SAME_SHAPES:
            return (self.op, self.shapes, self.dtypes)
        return (self.op,)

    def tensors(self) -> str:
        shown = [
            f"{DTYPES.get(d, d.lower())}{list(s)}"
            for s, d in zip(self.shapes, self.dtypes, strict=False)
        ]
        shown = shown[:SHOWN_TENSORS]
        if self.inputs > len(shown):
            shown.append(f"{self.inputs - len(shown)} more")
        return ", ".join(shown) if shown else "no tensor"

    def shown(self, number: bool = True) -> str:
        """``all_reduce #812 (float32[1024], gloo)``; another group than the default is
        named (``, group 1``)."""
        group = "" if self.group == DEFAULT_GROUP else f", group {self.group_name}"
        seq = f" #{self.seq}" if number else ""
        return f"{self.op}{seq} ({self.tensors()}, {self.backend}{group})"

    def caller(self) -> str | None:
        """The innermost frame of the user's code the call was made from."""
        for name, file, line in self.frames:
            if not library_file(file):
                return f"{name} ({file.rsplit('/', 1)[-1]}:{line})"
        return None


@dataclass(frozen=True)
class Group:
    """One process group as one rank recorded it: its last call entered, and its calls."""

    last: int
    calls: dict[int, Call] = field(default_factory=dict)

    def pending(self) -> list[int]:
        return sorted(seq for seq, call in self.calls.items() if not call.done)


@dataclass(frozen=True)
class HangReport:
    kind: HangKind
    #: The one line: which collective, who waits, who never came or disagrees.
    line: str
    #: A line a rank, then other groups' waits.
    details: tuple[str, ...]
    #: The collective: its group, number and op (None where no rank waits in one).
    group: str | None = None
    seq: int | None = None
    op: str | None = None
    waiting: tuple[int, ...] = ()
    #: The ranks that never entered it, or disagree with the first of ``waiting``.
    culprits: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "line": self.line,
            "details": list(self.details),
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "waiting": list(self.waiting),
            "culprits": list(self.culprits),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> HangReport:
        return cls(
            HangKind(doc["kind"]),
            str(doc["line"]),
            tuple(str(d) for d in doc.get("details") or ()),
            doc.get("group"),
            doc.get("seq"),
            doc.get("op"),
            tuple(int(r) for r in doc.get("waiting") or ()),
            tuple(int(r) for r in doc.get("culprits") or ()),
        )


def analyse(
    recorders: Mapping[int, Mapping[str, Any] | None],
    errors: Mapping[int, str | None],
    stacks: Mapping[int, str | None],
    now_ns: int,
) -> HangReport | None:
    """The report of one moment of a job's ranks: ``recorders`` by rank (``slim``'s
    documents, None where none was read, ``errors`` saying why), their py-spy dumps.
    None when no rank has a recorder and none failed to give one (the recorder is off, or
    no rank runs a process group: a job that is not distributed)."""
    groups = {rank: parse(trace) for rank, trace in recorders.items() if trace is not None}
    missing = {rank: errors.get(rank) or "no recorder" for rank in recorders if rank not in groups}
    if not groups:
        from .node.flight_recorder import NO_GROUP, OFF

        said = sorted(set(missing.values()) - {OFF, NO_GROUP})
        if not said:
            return None
        return HangReport(HangKind.UNKNOWN, f"no flight recorder read: {said[0]}", ())
    found = [w for g in _group_ids(groups) if (w := _wait(g, groups, stacks)) is not None]
    absent_lines = [f"rank {rank}: no recorder: {why}" for rank, why in sorted(missing.items())]
    if not found:
        line = _none_waits(groups)
        return HangReport(HangKind.NONE, line, tuple(_idle_lines(groups, stacks) + absent_lines))
    found.sort(key=lambda w: w.since_ns)
    first = found[0]
    details = [*first.details(now_ns), *absent_lines]
    for other in found[1:]:
        details.append(f"also: {other.line()}")
    return HangReport(
        first.kind,
        first.line() + _missing_note(missing, first),
        tuple(details),
        first.call.group,
        first.call.seq,
        first.call.op,
        tuple(first.waiting),
        tuple(first.culprits),
    )


def parse(trace: Mapping[str, Any]) -> dict[str, Group]:
    """A rank's recorder by process group: collectives only (point-to-point calls are
    numbered apart and told nowhere here)."""
    calls: dict[str, dict[int, Call]] = {}
    for e in trace.get("entries") or []:
        if e.get("is_p2p"):
            continue
        backend, _, op = str(e.get("profiling_name", "")).rpartition(":")
        pg = e.get("process_group") or [str(e.get("pg_id"))]
        call = Call(
            group=str(e.get("pg_id")),
            group_name=str(pg[0]),
            seq=int(e.get("collective_seq_id", -1)),
            op=op,
            backend=backend or "?",
            shapes=tuple(tuple(int(d) for d in s) for s in e.get("input_sizes") or ()),
            dtypes=tuple(str(d) for d in e.get("input_dtypes") or ()),
            inputs=int(e.get("inputs", len(e.get("input_sizes") or ()))),
            done=bool(e.get("retired")) or e.get("state") == "completed",
            created_ns=int(e.get("time_created_ns", 0)),
            frames=tuple(
                (str(f.get("name")), str(f.get("file")), int(f.get("line", 0)))
                for f in e.get("frames") or ()
            ),
        )
        calls.setdefault(call.group, {})[call.seq] = call
    status = trace.get("pg_status") or {}
    groups = {}
    for group in set(calls) | set(status):
        recorded = calls.get(group, {})
        last = int((status.get(group) or {}).get("last_enqueued_collective", -1))
        groups[group] = Group(max([last, *recorded]), recorded)
    return groups


def _group_ids(groups: Mapping[int, Mapping[str, Group]]) -> list[str]:
    return sorted({g for by_group in groups.values() for g in by_group}, key=_number)


def _number(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (sys.maxsize, text)


@dataclass
class _Wait:
    """Where one process group waits."""

    kind: HangKind
    call: Call
    waiting: list[int]
    culprits: list[int]
    since_ns: int
    calls: dict[int, Call]
    lasts: dict[int, Call | None]
    last_seq: dict[int, int]
    stacks: Mapping[int, str | None]

    def line(self) -> str:
        if self.kind is HangKind.MISMATCH:
            return f"ranks disagree at collective #{self.call.seq}: " + "; ".join(
                f"{_ranks(ranks)} in {call.shown(number=False)}"
                for call, ranks in _by_signature(self.calls)
            )
        said = f"{_ranks(self.waiting)} wait{'s' if len(self.waiting) == 1 else ''} in "
        said += self.call.shown()
        if self.kind is HangKind.WAITING:
            return said + ": every rank entered it"
        absent = self.culprits
        if len(absent) == 1:
            rank = absent[0]
            where = where_in(self.stacks.get(rank))
            said += f"; rank {rank} never entered it: "
            if self.last_seq[rank] < 1:
                said += "it has called no collective yet"
            else:
                said += f"its last collective was {_last(self.lasts[rank], self.last_seq[rank])}"
            return said + (f", it is in {where} (stacks)" if where else "")
        lasts = ", ".join(_last(self.lasts[r], self.last_seq[r]) for r in absent)
        return said + f"; {_ranks(absent)} never entered it: their last collectives were {lasts}"

    def details(self, now_ns: int) -> list[str]:
        out = []
        for rank in sorted({*self.calls, *self.lasts}):
            call = self.calls.get(rank)
            if call is not None and not call.done:
                said = f"rank {rank}: waits in {call.shown()}"
                if call.created_ns > 0 and now_ns > call.created_ns:
                    said += f" for {_seconds((now_ns - call.created_ns) / 1e9)}"
                caller = call.caller()
                out.append(said + (f", called from {caller}" if caller else ""))
            elif call is not None:
                out.append(f"rank {rank}: went past {call.shown()}")
            else:
                where = where_in(self.stacks.get(rank))
                last = _last(self.lasts.get(rank), self.last_seq.get(rank, -1))
                said = f"rank {rank}: never entered it; "
                said += "no collective called yet" if last == NO_CALL else f"last collective {last}"
                out.append(said + (f"; now in {where}" if where else ""))
        return out


def _wait(
    group: str, groups: Mapping[int, Mapping[str, Group]], stacks: Mapping[int, str | None]
) -> _Wait | None:
    """Where ``group`` waits, if some rank waits in it."""
    members = {
        rank: by_group.get(group, Group(-1))
        for rank, by_group in groups.items()
        if group in by_group or group == DEFAULT_GROUP
    }
    pending = [seq for g in members.values() for seq in g.pending()]
    if not pending:
        return None
    seq = min(pending)
    calls = {rank: g.calls[seq] for rank, g in members.items() if seq in g.calls}
    waiting = sorted(rank for rank, call in calls.items() if not call.done)
    first = calls[waiting[0]]
    absent = sorted(rank for rank, g in members.items() if seq not in g.calls and g.last < seq)
    kind, culprits = HangKind.WAITING, []
    if len({call.signature for call in calls.values()}) > 1:
        kind = HangKind.MISMATCH
        culprits = sorted(r for r, call in calls.items() if call.signature != first.signature)
    elif absent:
        kind, culprits = HangKind.ABSENT, absent
    return _Wait(
        kind,
        first,
        waiting,
        culprits,
        since_ns=min(calls[r].created_ns for r in waiting),
        calls=calls,
        lasts={rank: _last_call(members.get(rank), seq) for rank in absent},
        last_seq={rank: members[rank].last for rank in absent},
        stacks=stacks,
    )


def _last_call(group: Group | None, below: int) -> Call | None:
    if group is None:
        return None
    earlier = [seq for seq in group.calls if seq < below]
    return group.calls[max(earlier)] if earlier else None


def _last(call: Call | None, seq: int) -> str:
    """``#811 (all_reduce)``, ``#811`` where the ring no longer holds it, ``none``."""
    if seq < 1:
        return NO_CALL
    if call is None or call.seq != seq:
        return f"#{seq}"
    return f"#{seq} ({call.op}{'' if call.done else ', not done'})"


def _by_signature(calls: Mapping[int, Call]) -> list[tuple[Call, list[int]]]:
    """The calls of one number grouped by what they are, in rank order."""
    seen: dict[tuple[Any, ...], tuple[Call, list[int]]] = {}
    for rank, call in sorted(calls.items()):
        seen.setdefault(call.signature, (call, []))[1].append(rank)
    return list(seen.values())


def _missing_note(missing: Mapping[int, str], wait: _Wait) -> str:
    """Ranks without a recorder, where every rank that has one waits: the likely ones."""
    if not missing or wait.kind is not HangKind.WAITING:
        return ""
    return f"; no recorder from {_ranks(sorted(missing))}"


def _none_waits(groups: Mapping[int, Mapping[str, Group]]) -> str:
    lasts = {g.get(DEFAULT_GROUP, Group(-1)).last for g in groups.values()}
    if len(lasts) == 1:
        (last,) = lasts
        return f"no rank waits in a collective (the last one of every rank: #{last}, done)"
    return "no rank waits in a collective"


def _idle_lines(
    groups: Mapping[int, Mapping[str, Group]], stacks: Mapping[int, str | None]
) -> list[str]:
    out = []
    for rank in sorted(groups):
        group = groups[rank].get(DEFAULT_GROUP)
        last = _last(_last_call(group, sys.maxsize), group.last if group else -1)
        where = where_in(stacks.get(rank))
        out.append(f"rank {rank}: last collective {last}" + (f"; now in {where}" if where else ""))
    return out


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _seconds(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


# -- where a rank is, from its stacks ---------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROCESS = re.compile(r"^Process (?P<pid>\d+): ")
_THREAD = re.compile(r'^Thread (?P<id>\S+) \((?P<state>[^)]*)\)(?:: "(?P<name>[^"]*)")?')
_FRAME = re.compile(r"^\s+(?P<name>\S.*?) \((?P<file>[^()]+):(?P<line>\d+)\)\s*$")


def _main_thread(dump: str | None) -> tuple[str, list[str]] | None:
    """The state (``idle``, ``active``) and frame lines of the rank's main thread in a
    py-spy dump: its thread named ``MainThread``, or, where py-spy names no thread (a
    process that never imported ``threading``), the one whose id is the process's. Only
    the rank's own process, the dump's first (``--subprocesses`` lists its children
    after it, and the command line in a process's header is not a frame)."""
    pid: str | None = None
    threads: list[tuple[str, str, str | None, list[str]]] = []
    for raw in _ANSI.sub("", dump or "").splitlines():
        if process := _PROCESS.match(raw):
            if pid is not None:
                break
            pid = process["pid"]
        elif thread := _THREAD.match(raw):
            threads.append((thread["id"], thread["state"], thread["name"], []))
        elif threads and raw[:1].isspace():
            threads[-1][3].append(raw)
    named = any(name is not None for _, _, name, _ in threads)
    for ident, state, name, lines in threads:
        if name == "MainThread" or (not named and ident == pid):
            return state, lines
    return None


def where_in(dump: str | None) -> str | None:
    """The main thread's innermost frame of the user's code in a py-spy dump
    (``load_batch (train.py:57)``), after the library frame it waits in if any
    (``get (queue.py:180), from load_batch (train.py:57)``)."""
    main = _main_thread(dump)
    frames = [
        (found["name"], found["file"], found["line"])
        for raw in (main[1] if main else [])
        if (found := _FRAME.match(raw))
    ]
    if not frames:
        return None
    shown = [f"{name} ({file}:{line})" for name, file, line in frames]
    user = next((i for i, (_, file, _) in enumerate(frames) if not library_file(file)), None)
    if user is None or user == 0:
        return shown[0]
    return f"{shown[0]}, from {shown[user]}"


def busy_in(dump: str | None) -> bool:
    """Whether the rank's main thread was running when py-spy looked (``active``), not
    waiting in a system call (``idle``: asleep, blocked on a lock, a socket, a file)."""
    main = _main_thread(dump)
    return main is not None and main[0].startswith("active")


#: Frames of a rank stopped at a ``breakpoint()``, its user at the prompt.
_DEBUGGER = re.compile(r"\((?:\S*/)?(?:bdb|pdb|rank_pdb)\.py:\d+\)")


def stuck(report: HangReport, stacks: Mapping[int, str | None]) -> bool:
    """Whether ranks that all went silent are stuck where ``report`` says: ranks that
    disagree, every rank in one collective, or ranks waiting for one that is idle
    elsewhere; not for one that never entered it but is busy (an evaluation, a
    checkpoint of its own: the others wait for it as they should) or stopped in the
    debugger."""
    if report.kind not in NAMED:
        return False
    if report.kind is HangKind.ABSENT:
        return not any(
            busy_in(dump := stacks.get(rank)) or _DEBUGGER.search(dump or "")
            for rank in report.culprits
        )
    return True


def library_file(path: str) -> bool:
    """Whether a frame's file is Python's or an installed package's (as py-spy shows
    it, relative to its ``sys.path`` entry, or in full), not the user's code."""
    if path.startswith("<"):
        return False  # a cell, an exec'd string: the user's
    parts = path.split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    if path.startswith("/"):
        return _stdlib_path(path)
    top = parts[0].removesuffix(".py")
    return top in sys.stdlib_module_names or top in _installed()


def _stdlib_path(path: str) -> bool:
    import sysconfig

    return path.startswith(sysconfig.get_paths()["stdlib"] + "/")


@cache
def _installed() -> frozenset[str]:
    """The top-level names of the installed distributions."""
    from importlib.metadata import packages_distributions

    return frozenset(packages_distributions())
