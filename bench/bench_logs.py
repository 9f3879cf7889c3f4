"""Log capture, query and follow benchmarks (issue 4; see docs/benchmarks.md).

Side by side in this one script, alternating rounds, medians kept:

1. ``--capture``: 4 ranks printing 1 M lines in total (~55-byte training-style lines
   with a counter, 1 in 10 on stderr, 1 in 10,000 a WARNING) under ``LocalRanks`` vs
   the same 4 processes writing to /dev/null; then the records stored are counted
   against the lines printed. The ranks get ``PYTHONUNBUFFERED=1``, as the supervisor's
   ``rank_env`` gives every rank (``--buffered`` removes it: block-buffered pipes;
   note that ``PYTHONUNBUFFERED=0`` would still mean unbuffered, any non-empty value
   does). ``--profile`` adds one cProfile'd run of the supervisor side; ``--prototype``
   adds a third arm with the batched capture proposed in docs/benchmarks.md. Then one
   64 MiB line without a newline fed to a ``StreamSplitter`` in 64 KiB reads, as from a
   pipe: CPU time and the records written.
2. ``--query``: rank + level + substring over those 1 M lines with ``read_all`` (and
   ``air logs``) vs ``grep`` (and ``rg`` if installed) over the same record files,
   with the same level condition as a regular expression on the record prefix; and
   the same needle as a regular expression (``regex=1``: RE2), and the catastrophic
   ``(a+)+b`` that way (matching nothing: RE2 is linear).
3. ``--follow``: a real job (``start_job``) whose rank prints its own clock every
   100 ms, followed by ``air logs ID --follow`` in a subprocess: arrival - printed.

Without a sub-benchmark flag all three run. Run:
``.venv/bin/python bench/bench_logs.py [--capture] [--query] [--follow] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import heapq
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.jobs.node import ranks as node_ranks  # noqa: E402
from jupyter_air.jobs.node.launch import RankSpec  # noqa: E402
from jupyter_air.jobs.node.ranks import LocalRanks  # noqa: E402
from jupyter_air.jobs.spec import JobKind, job_spec  # noqa: E402
from jupyter_air.jobs.store import JobStore  # noqa: E402
from jupyter_air.logs.capture import RankLog, StreamSplitter  # noqa: E402
from jupyter_air.logs.levels import NAMES  # noqa: E402
from jupyter_air.logs.query import LogFile, LogFilter, LogLine, log_files, read_all  # noqa: E402

#: What each rank prints: step lines on stdout; data-loader lines (1 in 10) and a
#: WARNING (1 in 10,000) on stderr, as a training script's print and logging do.
RANK = """
import sys
rank, n = int(sys.argv[1]), int(sys.argv[2])
loss = 2.5
for i in range(n):
    loss *= 0.99999
    if i % 10_000 == 9_999:
        print(f"WARNING rank {rank}: grad norm {loss * 40:.3f} clipped at step {i}",
              file=sys.stderr)
    elif i % 10 == 0:
        print(f"[rank {rank}] data: shard {i % 64:02d} batch {i:7d} read in {loss:.3f} ms",
              file=sys.stderr)
    else:
        print(f"step {i:7d} | loss {loss:.5f} | lr 3.0e-04 | tok/s {41000 + i % 997}")
"""

#: The follow benchmark's rank: its own clock, every 100 ms.
TICKER = """
import time
for i in range({n}):
    print(f"tick {{i}} {{time.time():.6f}}")
    time.sleep(0.1)
"""


def expected_counts(n: int) -> dict[str, int]:
    """Lines one rank of RANK prints, by stream and level."""
    warnings = sum(1 for i in range(n) if i % 10_000 == 9_999)
    err = sum(1 for i in range(n) if i % 10 == 0 or i % 10_000 == 9_999)
    return {"lines": n, "stderr": err, "warning": warnings}


def stored_counts(path: Path) -> dict[str, int]:
    """Records of one rank log, by stream and level (progress records are not lines)."""
    data = path.read_bytes()
    return {
        "lines": len(re.findall(rb"^\d+\t[OE]", data, re.M)),
        "stderr": len(re.findall(rb"^\d+\tE", data, re.M)),
        "warning": len(re.findall(rb"^\d+\t[OE]W", data, re.M)),
    }


def rank_env(buffered: bool) -> dict[str, str]:
    """This environment with PYTHONUNBUFFERED=1 (as rank_env gives ranks), or without it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if buffered:
        env.pop("PYTHONUNBUFFERED")
    return env


def devnull_run(ranks: int, per_rank: int, env: dict[str, str]) -> float:
    """The floor: the same processes, output thrown away by the kernel."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), str(per_rank)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in range(ranks)
    ]
    codes = [p.wait() for p in procs]
    assert codes == [0] * ranks, codes
    return time.perf_counter() - start


def air_run(store: JobStore, ranks: int, per_rank: int, env: dict[str, str]) -> tuple[float, Path]:
    """The same processes under LocalRanks, as attempt 1 of a job in ``store``."""
    argv = [sys.executable, "-c", RANK]
    job = store.create(job_spec(JobKind.COMMAND, command=argv, nproc_per_node=ranks))
    store.start_attempt(job.id, 1, None)
    store.update(job.id, status="RUNNING", started=time.time())
    attempt_dir = store.attempt_dir(job.id, 1)
    specs = [
        RankSpec(r, [*argv, str(r), str(per_rank)], env, attempt_dir / f"logs/node_0/rank_{r}.log")
        for r in range(ranks)
    ]
    start = time.perf_counter()
    outcome = LocalRanks(specs).run()
    took = time.perf_counter() - start
    assert outcome.status == "SUCCEEDED", outcome
    store.end_attempt(job.id, 1, outcome.status, outcome.exit_codes)
    store.update(job.id, status=outcome.status, ended=time.time())
    return took, attempt_dir


# -- the proposal, as a prototype (delete once capture.py batches) ----------------------

#: Every line LevelDetector could call a warning or an error, or that starts a traceback,
#: contains one of these words or starts like this; all other lines are info.
_WORDS = re.compile(rb"CRITICAL|FATAL|ERROR|WARN|Warning: |Traceback")
_STARTS = re.compile(rb"\n(?:[EFW]\d{4} |\[[EW] )")


class BatchedLog(RankLog):
    """A RankLog with a block-buffered file, flushed once per read from the pipe."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write_block(self, block: str) -> None:
        with self._lock:
            self._file.write(block)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()


class BatchedSplitter(StreamSplitter):
    """One timestamp, one decode and one write per read; only lines that may not be info
    (and lines with a carriage return, and traceback bodies) go through the per-line path.
    Writes the same records as StreamSplitter."""

    def feed(self, data: bytes) -> None:
        buffer = self._pending + data
        end = buffer.rfind(b"\n") + 1
        self._pending = b""
        if end:
            self._held_progress = None
            self._block(buffer[:end])
        super().feed(buffer[end:])  # the unterminated rest: progress, pending
        log = self._log
        assert isinstance(log, BatchedLog)
        log.flush()

    def _block(self, block: bytes) -> None:
        if b"\r" in block or self._levels._in_traceback:
            super().feed(block)
            return
        starts = {block.rfind(b"\n", 0, m.start()) + 1 for m in _WORDS.finditer(block)}
        starts.update(m.start() for m in _STARTS.finditer(b"\n" + block))
        pos = 0
        for start in sorted(starts):
            if start < pos:
                continue
            self._bulk(block[pos:start])
            pos = start
            while pos < len(block):  # this line, and a traceback's body after it
                newline = block.find(b"\n", pos)
                self._line(block[pos:newline].decode("utf-8", errors="replace"))
                pos = newline + 1
                if not self._levels._in_traceback:
                    break
        self._bulk(block[pos:])

    def _bulk(self, lines: bytes) -> None:
        if not lines:
            return
        prefix = f"{int(time.time() * 1000)}\t{self._line_kind}I\t"
        text = lines[:-1].decode("utf-8", errors="replace")
        log = self._log
        assert isinstance(log, BatchedLog)
        log.write_block(prefix + text.replace("\n", "\n" + prefix) + "\n")


@contextmanager
def batched_capture() -> Iterator[None]:
    """LocalRanks with the prototype's RankLog and StreamSplitter."""
    names = vars(node_ranks)  # the names LocalRanks._start looks up
    saved = names["RankLog"], names["StreamSplitter"]
    names["RankLog"], names["StreamSplitter"] = BatchedLog, BatchedSplitter
    try:
        yield
    finally:
        names["RankLog"], names["StreamSplitter"] = saved


def same_records(a: Path, b: Path) -> bool:
    """The two attempts' rank logs hold the same records of each stream, in the same order,
    timestamps aside (how stdout and stderr interleave depends on the reads)."""
    record = re.compile(rb"^\d+\t([OEoe].)\t(.*)$", re.M)
    for path in sorted((a / "logs/node_0").glob("rank_*.log")):
        mine = record.findall(path.read_bytes())
        theirs = record.findall((b / "logs/node_0" / path.name).read_bytes())
        for kind in b"OEoe":
            if [r for r in mine if r[0][0] == kind] != [r for r in theirs if r[0][0] == kind]:
                return False
    return True


def profile_supervisor(store: JobStore, ranks: int, per_rank: int, env: dict[str, str]) -> Any:
    """One capture run with the supervisor side under cProfile: the top functions."""
    profiler = cProfile.Profile()
    profiler.enable()
    took, _ = air_run(store, ranks, per_rank, env)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, tottime, _cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(filename).name}:{line}({name})" if line else name
        rows.append({"function": where, "calls": calls, "tottime_s": round(tottime, 2)})
    rows.sort(key=lambda r: -float(r["tottime_s"]))
    return {"wall_s_under_profiler": round(took, 2), "top": rows[:12]}


def bench_capture(store: JobStore, args: argparse.Namespace) -> tuple[dict[str, Any], Path]:
    """Alternating rounds of each arm; the last LocalRanks attempt's directory with it."""
    env = rank_env(args.buffered)
    per_rank = args.lines // args.ranks
    arms: dict[str, Callable[[], float]] = {}
    last: dict[str, Path] = {}

    def air() -> float:
        took, last["air"] = air_run(store, args.ranks, per_rank, env)
        return took

    def prototype() -> float:
        with batched_capture():
            took, last["prototype"] = air_run(store, args.ranks, per_rank, env)
        return took

    arms["devnull"] = lambda: devnull_run(args.ranks, per_rank, env)
    arms["air"] = air
    if args.prototype:
        arms["prototype"] = prototype
    times: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}  # this process: the supervisor side
    ranks_cpu: dict[str, list[float]] = {k: [] for k in arms}  # the ranks (waited children)
    names = list(arms)
    for i in range(args.rounds):  # alternate the order, so drift hits every arm alike
        for name in names if i % 2 == 0 else names[::-1]:
            before = os.times()
            times[name].append(arms[name]())
            after = os.times()
            cpu[name].append(after.user + after.system - before.user - before.system)
            ranks_cpu[name].append(
                after.children_user
                + after.children_system
                - before.children_user
                - before.children_system
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    expected = expected_counts(per_rank)
    stored = {
        p.stem: stored_counts(p) for p in sorted((last["air"] / "logs/node_0").glob("rank_*.log"))
    }
    result: dict[str, Any] = {
        "ranks": args.ranks,
        "lines_printed": per_rank * args.ranks,
        "rank_env": "buffered (no PYTHONUNBUFFERED)" if args.buffered else "PYTHONUNBUFFERED=1",
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_s": {k: round(v, 2) for k, v in med.items()},
        "supervisor_cpu_s_median": {
            k: round(statistics.median(v), 2) for k, v in cpu.items() if k != "devnull"
        },
        "ranks_cpu_s_median": {k: round(statistics.median(v), 2) for k, v in ranks_cpu.items()},
        "ratio_air_vs_devnull": round(med["air"] / med["devnull"], 2),
        "lines_stored": sum(c["lines"] for c in stored.values()),
        "stored_equals_printed": all(c == expected for c in stored.values()),
        "per_rank_expected": expected,
    }
    if not result["stored_equals_printed"]:
        result["per_rank_stored"] = stored
    if args.prototype:
        result["ratio_prototype_vs_devnull"] = round(med["prototype"] / med["devnull"], 2)
        result["prototype_same_records"] = same_records(last["air"], last["prototype"])
    if args.profile:
        result["profile"] = profile_supervisor(store, args.ranks, per_rank, env)
    result["long_line"] = bench_long_line(store.home / "long-line.log")
    return result, last["air"]


def bench_long_line(path: Path, mib: int = 64) -> dict[str, Any]:
    """One line of ``mib`` MiB without a newline, fed as a pipe gives it (64 KiB reads)."""
    read = b"x" * (1 << 16)
    log = RankLog(path)
    splitter = StreamSplitter(log, "out")
    start = time.process_time()
    for _ in range(mib * 16):
        splitter.feed(read)
    splitter.feed(b"\n")
    took = time.process_time() - start
    log.close()
    sizes = [len(line) for line in path.read_bytes().splitlines()]
    return {
        "line_mib": mib,
        "cpu_ms": round(took * 1000, 1),
        "records": len(sizes),
        "largest_record_bytes": max(sizes),
    }


# -- the query proposal, as a prototype --------------------------------------------------

#: Bytes scanned at once: small enough to stay in the CPU's cache (8 MB chunks do not).
SCAN_CHUNK = 256 << 10


def prototype_read_all(attempt_dir: Path, flt: LogFilter) -> Iterator[LogLine]:
    """read_all as proposed: each file streamed once in cache-sized chunks (no pages, no
    copies but the read), and for a plain-text search only the lines holding the
    case-folded needle (``bytes.lower`` + ``bytes.find``) go through the record pattern.
    Yields the same lines as read_all."""
    streams = [_file_lines(f, flt) for f in log_files(attempt_dir, flt)]
    return heapq.merge(*streams, key=lambda line: (line.t, line.node, line.rank))


def _file_lines(f: LogFile, flt: LogFilter) -> Iterator[LogLine]:
    pattern = flt.pattern()
    needle = flt.search.encode().lower() if flt.search and not flt.regex else None
    offset, size = 0, SCAN_CHUNK
    with f.path.open("rb", buffering=0) as fh:
        while True:
            fh.seek(offset)
            chunk = fh.read(size)
            end = chunk.rfind(b"\n") + 1
            if not end:  # the end of the file, or a line longer than the chunk
                if len(chunk) < size:
                    return
                size *= 2
                continue
            if needle is None:
                hits = pattern.finditer(chunk, 0, end)
            else:
                hits = _hits(chunk, end, needle, pattern)
            for m in hits:
                ts = int(m.group(1)) / 1000.0
                if (flt.since is not None and ts < flt.since) or (
                    flt.until is not None and ts > flt.until
                ):
                    continue
                stream = "out" if m.group(2) == b"O" else "err"
                text = m.group(4).decode("utf-8", errors="replace")
                yield LogLine(ts, f.node, f.rank, stream, NAMES[m.group(3).decode()], text)
            offset, size = offset + end, SCAN_CHUNK


def _hits(
    chunk: bytes, end: int, needle: bytes, pattern: re.Pattern[bytes]
) -> Iterator[re.Match[bytes]]:
    """Record matches among the lines of ``chunk[:end]`` that contain ``needle``, any case
    (bytes patterns fold ASCII only, as ``bytes.lower`` does)."""
    folded = chunk.lower()
    at = folded.find(needle, 0, end)
    while at >= 0:
        start = chunk.rfind(b"\n", 0, at) + 1
        stop = chunk.find(b"\n", at)
        m = pattern.match(chunk, start, stop)
        if m:
            yield m
        at = folded.find(needle, stop, end)


# -- query ------------------------------------------------------------------------------


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    """Seconds ``fn`` took, and what it returned."""
    start = time.perf_counter()
    count = fn()
    return time.perf_counter() - start, count


def count_output(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Lines a command writes, through a pipe (grep stops early when writing to /dev/null)."""
    out = subprocess.run(argv, stdout=subprocess.PIPE, check=False, env=env).stdout
    return out.count(b"\n")


def ere_escape(text: str) -> str:
    """``text`` as a POSIX extended regular expression matching it literally."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def query_arms(
    attempt_dir: Path,
    job_id: str,
    path: Path,
    flt: LogFilter,
    codes: str,
    env: dict[str, str],
    prototype: bool,
) -> dict[str, Callable[[], int]]:
    """The same filter, each way: the number of lines it yields. ``codes``: the level
    codes the filter keeps, as a bracket expression on the record prefix."""
    assert flt.search is not None
    needle = flt.search
    cli = [sys.executable, "-m", "jupyter_air.cli", "logs", job_id, "--rank", str(flt.rank)]
    cli += ["--level", flt.level, "--search", needle]
    pcre = rf"^\d+\t[OE]{codes}\t.*(?i:{re.escape(needle)})"
    ere = f"^[0-9]+\t[OE]{codes}\t.*{ere_escape(needle)}"  # a real tab: ERE has no \t
    as_regex = dataclasses.replace(flt, regex=True)
    arms: dict[str, Callable[[], int]] = {
        "read_all": lambda: sum(1 for _ in read_all(attempt_dir, flt)),
        "read_all regex=1": lambda: sum(1 for _ in read_all(attempt_dir, as_regex)),
        "air logs (CLI process)": lambda: count_output(cli, env),
        "grep -P": lambda: count_output(["grep", "-P", pcre, str(path)]),
        "grep -iE": lambda: count_output(["grep", "-iE", ere, str(path)]),
    }
    if prototype:
        arms["prototype read_all"] = lambda: sum(1 for _ in prototype_read_all(attempt_dir, flt))
    rg = shutil.which("rg")
    if rg:
        arms["rg"] = lambda: count_output([rg, "--no-filename", pcre, str(path)])
    return arms


def bench_query(store: JobStore, attempt_dir: Path, rounds: int, prototype: bool) -> dict[str, Any]:
    """read_all and ``air logs`` vs grep / rg on the rank's record file, same filter."""
    job_id = attempt_dir.parent.name
    path = attempt_dir / "logs/node_0/rank_1.log"
    cases = {  # name: (level, search, the record-prefix level codes)
        "warning + 'GRAD NORM' (1 in 10,000 lines)": ("warning", "GRAD NORM", "[WE]"),
        "info + 'TOK/S 410' (~9 % of lines)": ("info", "TOK/S 410", "[IWE]"),
    }
    rg = shutil.which("rg")
    env = {**os.environ, "AIR_HOME": str(store.home)}
    out: dict[str, Any] = {
        "file": f"rank_1.log, {path.stat().st_size / 1e6:.1f} MB, the record files themselves",
        "cases": {},
    }
    for case, (level, needle, codes) in cases.items():
        flt = LogFilter(rank=1, level=level, search=needle)
        arms = query_arms(attempt_dir, job_id, path, flt, codes, env, prototype)
        times: dict[str, list[float]] = {k: [] for k in arms}
        counts: dict[str, int] = {}
        names = list(arms)
        for i in range(rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                took, counts[name] = timed(arms[name])
                times[name].append(took)
        med = {k: statistics.median(v) for k, v in times.items()}
        fastest_grep = min(v for k, v in med.items() if k.startswith(("grep", "rg")))
        out["cases"][case] = {
            "median_ms": {k: round(v * 1000, 1) for k, v in med.items()},
            "matches": counts,
            "same_matches": len(set(counts.values())) == 1,
            "ratio_read_all_vs_fastest_grep": round(med["read_all"] / fastest_grep, 2),
            "ratio_regex_vs_fastest_grep": round(med["read_all regex=1"] / fastest_grep, 2),
            "ratio_cli_vs_fastest_grep": round(med["air logs (CLI process)"] / fastest_grep, 2),
        }
        if prototype:
            same = list(read_all(attempt_dir, flt)) == list(prototype_read_all(attempt_dir, flt))
            out["cases"][case]["prototype_same_lines"] = same
            out["cases"][case]["ratio_prototype_vs_fastest_grep"] = round(
                med["prototype read_all"] / fastest_grep, 2
            )
    catastrophic = LogFilter(rank=1, search="(a+)+b", regex=True)
    took = [timed(lambda: sum(1 for _ in read_all(attempt_dir, catastrophic))) for _ in range(3)]
    out["catastrophic (a+)+b regex=1, info"] = {
        "median_ms": round(statistics.median(t for t, _ in took) * 1000, 1),
        "matches": took[0][1],
    }
    out["rg"] = rg or "not installed"
    return out


# -- follow -----------------------------------------------------------------------------

_FOLLOWED = re.compile(r"^(\S+)Z node \d+ rank \d+ \w+ tick (\d+) ([\d.]+)$")


def bench_follow(store: JobStore, work: Path, ticks: int) -> dict[str, Any]:
    """A real job through start_job, followed by ``air logs ID --follow``."""
    from mlflow import MlflowClient

    from jupyter_air.jobs import cancel
    from jupyter_air.jobs.submit import start_job

    uri = f"sqlite:///{work}/mlflow.db"
    mlflow = MlflowClient(uri)
    experiment = mlflow.create_experiment(
        f"bench-follow-{time.time_ns()}", artifact_location=str(work / "mlruns")
    )
    run_id = mlflow.create_run(experiment).info.run_id
    workload = job_spec(
        JobKind.COMMAND,
        command=[sys.executable, "-c", TICKER.format(n=ticks)],
        background=True,
    ).with_tracking(tracking_uri=uri, experiment_id=experiment, first_run_id=run_id)
    job = start_job(store, workload, None)
    deadline = time.monotonic() + 60
    while not store.attempts(job.id):  # `air logs` wants an attempt to read
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.02)
    follower = subprocess.Popen(
        [sys.executable, "-m", "jupyter_air.cli", "logs", job.id, "--follow"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "AIR_HOME": str(store.home)},
    )
    assert follower.stdout is not None
    seen: list[tuple[float, float, float]] = []  # printed, captured, arrived
    for line in follower.stdout:
        arrived = time.time()
        m = _FOLLOWED.match(line.rstrip("\n"))
        if m:
            stamp = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
            seen.append((float(m.group(3)), stamp.timestamp(), arrived))
    follower.wait(timeout=30)
    job = cancel.wait(store, job.id, 60)
    # Lines printed before the follower showed its first one came with its start-up.
    first_arrival = seen[0][2] if seen else 0.0
    steady = [s for s in seen if s[0] > first_arrival]
    total = [arrived - printed for printed, _, arrived in steady]
    capture = [captured - printed for printed, captured, _ in steady]
    shown = [arrived - captured for _, captured, arrived in steady]

    def pct(values: list[float], q: int) -> float:
        return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000, 1)

    return {
        "job_status": job.status,
        "lines_printed": ticks,
        "lines_followed": len(seen),
        "follower_exit": follower.returncode,
        "measured_lines": len(steady),
        "latency_ms": {
            "p50": pct(total, 50),
            "p95": pct(total, 95),
            "max": round(max(total) * 1000, 1),
        },
        "print_to_record_ms": {"p50": pct(capture, 50), "p95": pct(capture, 95)},
        "record_to_follower_ms": {"p50": pct(shown, 50), "p95": pct(shown, 95)},
    }


def main() -> None:
    """Run the chosen benchmarks in a temporary AIR_HOME and print their figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", action="store_true", help="capture vs /dev/null")
    parser.add_argument("--query", action="store_true", help="read_all vs grep")
    parser.add_argument("--follow", action="store_true", help="air logs --follow latency")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (capture)")
    parser.add_argument("--query-rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines in total")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--buffered", action="store_true", help="ranks without -u")
    parser.add_argument("--profile", action="store_true", help="cProfile one capture run")
    parser.add_argument("--prototype", action="store_true", help="add the batched arm")
    parser.add_argument("--ticks", type=int, default=100, help="lines the followed rank prints")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    if not (args.capture or args.query or args.follow):
        args.capture = args.query = args.follow = True
    work = Path(tempfile.mkdtemp(prefix="air-bench-logs-"))
    os.environ["AIR_HOME"] = str(work / "air")
    os.environ["AIR_SYSTEM_METRICS_INTERVAL"] = "10"
    store = JobStore()
    results: dict[str, Any] = {"work": str(work)}
    try:
        attempt_dir: Path | None = None
        if args.capture:
            results["capture"], attempt_dir = bench_capture(store, args)
        if args.query:
            if attempt_dir is None:  # the lines to query, not timed
                env = rank_env(args.buffered)
                _, attempt_dir = air_run(store, args.ranks, args.lines // args.ranks, env)
            results["query"] = bench_query(store, attempt_dir, args.query_rounds, args.prototype)
        if args.follow:
            results["follow"] = bench_follow(store, work, args.ticks)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
