"""Nothing a test starts outlives the suite (a plugin of tests/conftest.py).

A process points into a test's temporary folder when its environment or its command line
names a path under pytest's base temporary folder of this session (an ``AIR_HOME``, a job
store, a lab's runtime directory): only a test could have started it, and nothing may
use it once its test is over. Two rules, both matching paths under that folder only, so
the developer's own Jupyter and another pytest run are never touched:

- at the end of each test that used ``tmp_path``, once its fixtures are torn down, what
  still points into its ``tmp_path`` is ended (a courier retrying, a tail process idling,
  a supervisor its test did not wait for): the one teardown that every test's processes
  share, said in a line of the summary;
- at the end of the session (of each xdist worker, for its own folder; then of the
  controller, for all of them), what still points into the base folder is listed with
  the test that made the folder it points into and the test it was started during,
  ended, and the run fails: a module's or the session's fixture that did not end what it
  started. Such a fixture calls ``end_processes_in(folder)`` in its teardown.

Ending a process: at its test's end, SIGKILL (its whole group when it leads one of its
own): nothing may use it any more, and a graceful exit (a tail process's MLflow teardown,
a supervisor waiting for its ranks) only costs the run time. A fixture's teardown gives
SIGTERM first, a wait, then SIGKILL. A process is known by its pid and its start time,
so a reused pid is never signalled.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from collections.abc import Generator, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

#: Seconds a process has to leave after SIGTERM, then after SIGKILL.
TERM_GRACE = 10.0
KILL_GRACE = 5.0

_CURRENT = b"PYTEST_CURRENT_TEST="
_tmp_path_key = pytest.StashKey[Path]()
_folders_before_key = pytest.StashKey[set[str]]()


@dataclass(frozen=True)
class Leftover:
    """A process that points into a test's temporary folder."""

    pid: int
    #: Clock ticks after boot at which it started (``/proc/PID/stat``): the same pid
    #: with another start time is another process.
    started: int
    pgid: int
    command: str
    #: What pointed into the folder: ``AIR_HOME=/tmp/...`` or ``command line``.
    why: str
    #: The folder directly under the base temporary folder that it points into.
    folder: str
    #: The test running when it (or the process that started it) was started: pytest's
    #: ``PYTEST_CURRENT_TEST``, which children inherit, where it was kept.
    started_in: str = ""
    #: The test that made that folder, where known.
    test: str = ""

    def line(self) -> str:
        made = f", a folder made during {self.test}" if self.test else ""
        started = f"\n    started during {self.started_in}" if self.started_in else ""
        return (
            f"pid {self.pid}: {self.command}\n    {self.why}: points into {self.folder}{made}"
            f"{started}"
        )


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """State, parent pid, process group and start time of ``pid``; None once gone."""
    try:
        fields = _read(f"/proc/{pid}/stat").decode(errors="replace").rsplit(") ", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors() -> set[int]:
    """This process and those above it: never ours to end."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        stat = _stat(pid)
        if stat is None:
            break
        pid = stat[1]
    return found


def _pattern(roots: Sequence[Path]) -> re.Pattern[str]:
    """A root, as a whole path component, and the first folder under it."""
    spelled = {str(root) for root in roots} | {os.path.realpath(root) for root in roots}
    either = "|".join(re.escape(s) for s in sorted(spelled, key=len, reverse=True))
    return re.compile(rf"(?:{either})(?:/([^/\s:;,'\"]+)|(?=[\s:;,'\"]|$))")


def scan(roots: Sequence[Path]) -> list[Leftover]:
    """This user's processes whose environment or command line names a path under one
    of ``roots`` (this process and its ancestors left out)."""
    if not all(root.is_absolute() for root in roots):  # "" would be the working directory
        raise ValueError(f"not absolute: {[str(root) for root in roots]}")
    pattern = _pattern(roots)
    spare = _ancestors()
    uid = os.getuid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in spare:
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != uid:
                continue
            cmdline = _read(f"/proc/{pid}/cmdline").split(b"\0")
            environ = _read(f"/proc/{pid}/environ").split(b"\0")
        except OSError:  # gone meanwhile, or not readable
            continue
        stat = _stat(pid)
        if stat is None or stat[0] in "ZX":
            continue
        command = " ".join(a.decode(errors="replace") for a in cmdline if a)
        hit = pattern.search(command)
        why = "command line"
        if hit is None:
            for var in environ:
                text = var.decode(errors="replace")
                if (hit := pattern.search(text)) is not None:
                    why = text
                    break
        if hit is None:
            continue
        folder = hit.group(1) or ""
        started_in = next(
            (
                v[len(_CURRENT) :].decode(errors="replace")
                for v in environ
                if v.startswith(_CURRENT)
            ),
            "",
        )
        found.append(Leftover(pid, stat[3], stat[2], command[:300], why[:300], folder, started_in))
    return found


def _same(leftover: Leftover) -> bool:
    """Whether the process still runs (a zombie has ended)."""
    stat = _stat(leftover.pid)
    return stat is not None and stat[0] not in "ZX" and stat[3] == leftover.started


def _signal(found: Iterable[Leftover], signum: int) -> None:
    leaders = {p.pid for p in found}
    for p in found:
        if not _same(p):
            continue
        try:
            if p.pgid == p.pid and p.pgid in leaders and p.pgid != os.getpgrp():
                os.killpg(p.pgid, signum)  # it leads a group of its own: its children too
            else:
                os.kill(p.pid, signum)
        except (ProcessLookupError, PermissionError):
            continue


def _wait_gone(found: Sequence[Leftover], seconds: float) -> list[Leftover]:
    deadline = time.monotonic() + seconds
    while (left := [p for p in found if _same(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def end(found: Sequence[Leftover], gently: bool = True) -> list[Leftover]:
    """SIGTERM, a wait, then SIGKILL (not ``gently``: SIGKILL alone); those still there
    after it all (none, unless the kernel could not end them)."""
    left = list(found)
    if gently:
        _signal(found, signal.SIGTERM)
        left = _wait_gone(found, TERM_GRACE)
    _signal(left, signal.SIGKILL)
    return _wait_gone(left, KILL_GRACE)


def end_processes_in(*folders: Path, rounds: int = 3, gently: bool = True) -> list[Leftover]:
    """End every process pointing into ``folders``, and those that ending them started
    (a supervisor that hands its last notice to a courier as it leaves): for a fixture's
    teardown whose folder outlives one test. What was ended. A folder outside this
    session's base temporary folder is refused: nothing else is a test's to end."""
    basetemp = _basetemp(_config) if _config is not None else None
    for folder in folders:
        if basetemp is None or basetemp.resolve() not in Path(folder).resolve().parents:
            raise ValueError(f"{folder} is not a folder of this session's tests ({basetemp})")
    ended: list[Leftover] = []
    for _ in range(rounds):
        found = scan(folders)
        if not found:
            break
        end(found, gently)
        ended += found
    return ended


def _basetemp(config: pytest.Config) -> Path | None:
    """The base temporary folder of this session (of this worker under xdist), once a
    test made one."""
    factory = getattr(config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    return basetemp if isinstance(basetemp, Path) else None


def _folders(config: pytest.Config) -> set[str]:
    basetemp = _basetemp(config)
    if basetemp is None:
        return set()
    try:
        return {entry.name for entry in os.scandir(basetemp)}
    except OSError:
        return set()


class Guard:
    """The two rules, and what they found for the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: Folder under the base temporary folder -> the test during which it was made.
        self.made_by: dict[str, str] = {}
        self.ended_with_test: Counter[str] = Counter()
        #: "test: kind, kind" for each test whose end ended something (shown with -v).
        self.ended_by_test: list[str] = []
        #: Seconds the tests' teardowns spent ending what they left (it adds to the run).
        self.ending_seconds = 0.0
        self.left: list[dict[str, Any]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        item.stash[_folders_before_key] = _folders(item.config)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            yield
        finally:
            tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
            if isinstance(tmp_path, Path):
                item.stash[_tmp_path_key] = tmp_path

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            yield
        finally:
            before = item.stash.get(_folders_before_key, set[str]())
            for name in _folders(item.config) - before:
                self.made_by.setdefault(name, item.nodeid)
            tmp_path = item.stash.get(_tmp_path_key, None)
            if tmp_path is not None:
                began = time.monotonic()
                ended = end_processes_in(tmp_path, gently=False)
                self.ending_seconds += time.monotonic() - began if ended else 0.0
                self.ended_with_test.update(_kind(p.command) for p in ended)
                if ended:
                    kinds = ", ".join(_kind(p.command) for p in ended)
                    self.ended_by_test.append(f"{item.nodeid}: {kinds}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """After the session's fixtures are torn down (``trylast``): what is left."""
        basetemp = _basetemp(self.config)
        roots = [basetemp] if basetemp is not None else []
        for _ in range(3):  # and what ending them started (a supervisor's last courier)
            found = [_named(p, self.made_by) for p in scan(roots)] if roots else []
            if not found:
                break
            still = {p.pid for p in end(found)}
            self.left += [{**asdict(p), "still": p.pid in still} for p in found]
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: its controller tells and fails
            workeroutput["air_leftovers"] = self.left
            workeroutput["air_ended_with_test"] = dict(self.ended_with_test)
            workeroutput["air_ended_by_test"] = self.ended_by_test
            workeroutput["air_ending_seconds"] = self.ending_seconds
            return
        passing = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        if self.left and session.exitstatus in passing:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._tell()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker's findings, for the controller to tell."""
        output = getattr(node, "workeroutput", None) or {}
        self.left += output.get("air_leftovers", [])
        self.ended_with_test.update(output.get("air_ended_with_test", {}))
        self.ended_by_test += output.get("air_ended_by_test", [])
        self.ending_seconds += output.get("air_ending_seconds", 0.0)

    def _tell(self) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not (self.ended_with_test or self.left):
            return
        reporter.line("")  # xdist's progress leaves the line open
        if self.ended_with_test:
            kinds = ", ".join(f"{kind} {n}" for kind, n in self.ended_with_test.most_common())
            reporter.write_line(
                f"processes ended at their test's end ({self.ending_seconds:.0f} s): {kinds}"
            )
            for line in self.ended_by_test if self.config.option.verbose > 0 else []:
                reporter.write_line(f"    {line}")
        if not self.left:
            return
        reporter.write_sep("=", "processes left running after the tests", red=True, bold=True)
        for p in self.left:
            reporter.write_line(Leftover(**{k: v for k, v in p.items() if k != "still"}).line())
            reporter.write_line(
                "    still running after SIGKILL" if p["still"] else "    ended now", red=True
            )
        reporter.write_line(
            f"{len(self.left)} process(es) outlived their test: end what a fixture starts in "
            "its teardown, and wait for it to be gone.",
            red=True,
        )


def _named(p: Leftover, made_by: dict[str, str]) -> Leftover:
    test = made_by.get(p.folder, "")
    return Leftover(**{**asdict(p), "test": test}) if test else p


def _kind(command: str) -> str:
    """A short name for a command: ``python -m jupyter_air.notify.courier`` ->
    ``jupyter_air.notify.courier``."""
    words = command.split()
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return os.path.basename(words[0]) if words else "?"


#: This session's configuration, for ``end_processes_in``'s check.
_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config
    config.pluginmanager.register(Guard(config), "air-leftovers")
