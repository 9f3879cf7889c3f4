"""Each rank's PyTorch Flight Recorder: on in every rank, read from beside it when asked.

PyTorch records a rank's collectives when ``TORCH_FR_BUFFER_SIZE`` is set (gloo's too,
since 2.13): by process group, each call's sequence number, op, shapes and dtypes,
whether it is done, and the Python frames it was called from. Which collective a hung
job waits in, and which rank never came to it, is read from them (``jobs.hangs``).

A rank stuck in a collective is blocked in its main thread, so the recorder is read by
a small thread of the rank (``start``, from ``perf.hooks.install``, which every rank
entry point runs: cells, functions, ``air run`` scripts through the rank's
``sitecustomize``, warm sessions). It says that it answers (a mark in the node's
flight folder), then looks at the folder's request every ``CHECK_EVERY`` seconds (one
``stat``) and writes its recorder under the request's name. The node side (``gather``,
called with the stacks, ``stacks.dump_ranks``) writes the request and reads the answers
of the ranks that said they answer. No listener, no signal: nothing reaches a rank from
outside its user's files, a rank never waits on a reader, and a rank whose Python is
stuck holding the GIL answers nothing and is said so. The dump releases the GIL; its
first call spends about a second of CPU, at a low priority.

``AIR_FLIGHT_RECORDER`` (the job's ``--env``, or the environment the job starts from):
the entries each rank keeps (default ``DEFAULT_ENTRIES``); ``0`` turns the recorder off.
The folder is the node's attempt directory's, private to the user, as are its files.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import pickle
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...job_dir import (
    FLIGHT_REQUEST,
    FLIGHT_TIMEOUT_DUMP,
    read_json,
    recorder_file,
    recorder_ready,
    replace_json,
)
from ...paths import private_dir, write_private

log = logging.getLogger(__name__)

ENV = "AIR_FLIGHT_RECORDER"
#: The node's flight folder, in each rank's environment.
FOLDER_ENV = "AIR_FLIGHT_DIR"
#: Entries each rank's recorder keeps (all its process groups together).
DEFAULT_ENTRIES = 200
#: Seconds between two looks of a rank at its node's request.
CHECK_EVERY = 0.5
#: Seconds a rank's exit waits for an answer under way.
STOP_WAIT = 1.0
#: Seconds the node side waits for the ranks' answers.
ANSWER_WAIT = 15.0
#: The latest entries of each process group, and the innermost frames of each, that a
#: rank's answer keeps: what names a hang, not the whole ring.
KEEP_ENTRIES = 32
KEEP_FRAMES = 12
#: Tensors of one entry whose shapes are kept (an all_gather of 64 tensors: 8, and 64).
KEEP_TENSORS = 8
#: PyTorch's own settings, left as the user set them.
TORCH_BUFFER = "TORCH_FR_BUFFER_SIZE"
TORCH_DUMP = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")

REQUEST_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
OFF = "no flight recorder in this rank (AIR_FLIGHT_RECORDER=0, or a Python without jupyter_air)"
#: A rank that runs no process group (yet): it has no collective to tell.
NO_GROUP = "no process group in this rank (yet)"


def entries(environ: Mapping[str, str]) -> int:
    """``AIR_FLIGHT_RECORDER``'s entries: 0 is off; unset, or not a whole number, the
    default (said in the log)."""
    value = environ.get(ENV, "").strip()
    if not value:
        return DEFAULT_ENTRIES
    try:
        return max(int(value), 0)
    except ValueError:
        log.warning("%s=%r is not a number of entries: %d kept", ENV, value, DEFAULT_ENTRIES)
        return DEFAULT_ENTRIES


def rank_env(environ: Mapping[str, str], folder: Path) -> dict[str, str]:
    """What a rank's environment gets for its recorder to be on and read from ``folder``
    (the node's attempt's), or off with ``AIR_FLIGHT_RECORDER=0`` (PyTorch 2.13 records
    2000 entries when ``TORCH_FR_BUFFER_SIZE`` is unset). A timeout's own dump (NCCL's
    watchdog) lands in ``folder`` too, not in ``/tmp``. A ``TORCH_FR_BUFFER_SIZE`` the
    user set is kept."""
    kept = entries(environ)
    if kept == 0:
        return {} if environ.get(TORCH_BUFFER) else {TORCH_BUFFER: "0"}
    from ..autoresume import SITE, site_path  # an ``air run`` script starts the listener

    env = {TORCH_BUFFER: environ.get(TORCH_BUFFER) or str(kept), FOLDER_ENV: str(folder)}
    if not any(environ.get(name) for name in TORCH_DUMP):
        env[TORCH_DUMP[0]] = str(folder / FLIGHT_TIMEOUT_DUMP)
    if str(SITE) not in environ.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = site_path(dict(environ))
    return env


# -- the rank's side --------------------------------------------------------------------

_started: list[threading.Thread] = []


def start(environ: Mapping[str, str] = os.environ) -> None:
    """Answer for this rank's recorder while it runs (once a process; a no-op outside a
    job, or with the recorder off)."""
    folder = environ.get(FOLDER_ENV)
    if not folder or entries(environ) == 0 or _started:
        return
    rank = int(environ.get("RANK", "0"))
    stop = threading.Event()
    thread = threading.Thread(
        target=_listen, args=(Path(folder), rank, stop), name="air-flight-recorder", daemon=True
    )
    _started.append(thread)
    thread.start()
    atexit.register(_stop, stop, thread)


def _stop(stop: threading.Event, thread: threading.Thread) -> None:
    """At the rank's exit: the thread ends before the interpreter does (a daemon thread
    still running then is stopped in its tracks, wherever it is)."""
    stop.set()
    thread.join(STOP_WAIT)


def _listen(folder: Path, rank: int, stop: threading.Event, every: float = CHECK_EVERY) -> None:
    try:
        private_dir(folder)
        write_private(folder / recorder_ready(rank), str(os.getpid()))
    except OSError as err:
        print(f"[air] the flight recorder cannot be read: {err}", file=sys.stderr, flush=True)
        return
    with contextlib.suppress(OSError):  # this thread only: the training comes first
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    seen: tuple[int, int] | None = None
    done: set[str] = set()
    while not stop.wait(every):
        try:
            st = os.stat(folder / FLIGHT_REQUEST)
        except OSError:
            continue
        if (st.st_mtime_ns, st.st_ino) == seen:
            continue
        seen = (st.st_mtime_ns, st.st_ino)
        doc = read_json(folder / FLIGHT_REQUEST)
        name = doc.get("id") if isinstance(doc, dict) else None
        until = doc.get("until") if isinstance(doc, dict) else None
        if (
            not isinstance(name, str)
            or not REQUEST_ID.fullmatch(name)
            or name in done
            or not isinstance(until, int | float)
            or until < time.time()
        ):
            continue
        done.add(name)
        try:
            answer(folder / name, rank)
        except Exception as err:  # the next request may do better; the rank runs on
            print(f"[air] the flight recorder was not read: {err!r}", file=sys.stderr, flush=True)


def answer(where: Path, rank: int) -> None:
    """This rank's recorder, or why there is none, in the request's folder ``where``
    (unless its asker gave up meanwhile: its folder is gone)."""
    doc: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "time": time.time()}
    try:
        doc["trace"] = own_trace()
    except NoRecorder as err:
        doc["error"] = str(err)
    except Exception as err:
        doc["error"] = f"the recorder could not be read: {err!r}"
    if where.is_dir():
        replace_json(where / recorder_file(rank), doc)


class NoRecorder(RuntimeError):
    """This process runs no process group (yet): it has no collectives to tell."""


def own_trace() -> dict[str, Any]:
    """This process's recorder, its latest entries by process group (``slim``)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        raise NoRecorder(NO_GROUP)
    c10d = importlib.import_module("torch._C._distributed_c10d")  # untyped: private
    # collectives, their Python frames, done ones too
    return slim(pickle.loads(c10d._dump_fr_trace(True, True, False)))


def slim(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A recorder as JSON: each process group's status and its latest ``KEEP_ENTRIES``
    entries, each with its innermost ``KEEP_FRAMES`` frames."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for entry in raw.get("entries") or []:
        by_group.setdefault(str(entry.get("pg_id")), []).append(entry)
    kept = [e for group in by_group.values() for e in group[-KEEP_ENTRIES:]]
    status = {
        str(pg): {key: _int(value) for key, value in values.items()}
        for pg, values in (raw.get("pg_status") or {}).items()
    }
    return {
        "version": str(raw.get("version", "")),
        "pg_status": status,
        "entries": [_entry(e) for e in sorted(kept, key=lambda e: e.get("record_id", 0))],
    }


def _entry(e: Mapping[str, Any]) -> dict[str, Any]:
    inputs = list(e.get("input_sizes") or [])
    frames = list(e.get("frames") or [])[:KEEP_FRAMES]
    return {
        "record_id": _int(e.get("record_id")),
        "pg_id": _int(e.get("pg_id")),
        "process_group": [str(p) for p in e.get("process_group") or ()],
        "collective_seq_id": _int(e.get("collective_seq_id")),
        "p2p_seq_id": _int(e.get("p2p_seq_id")),
        "is_p2p": bool(e.get("is_p2p")),
        "profiling_name": str(e.get("profiling_name", "")),
        "inputs": len(inputs),
        "input_sizes": [[_int(d) for d in shape] for shape in inputs[:KEEP_TENSORS]],
        "input_dtypes": [str(d) for d in list(e.get("input_dtypes") or [])[:KEEP_TENSORS]],
        "state": str(e.get("state", "")),
        "retired": bool(e.get("retired")),
        "time_created_ns": _int(e.get("time_created_ns")),
        "timeout_ms": _int(e.get("timeout_ms")),
        "frames": [
            {
                "name": str(f.get("name")),
                "file": str(f.get("filename")),
                "line": _int(f.get("line")),
            }
            for f in frames
        ],
    }


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


# -- the node's side --------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One rank's recorder (``slim``'s), or why there is none."""

    trace: dict[str, Any] | None
    error: str | None = None


_locks: dict[Path, threading.Lock] = {}
_locks_lock = threading.Lock()


def folder_of(pids: Iterable[int]) -> Path | None:
    """The flight folder these ranks answer in (their ``AIR_FLIGHT_DIR``); None when
    their recorder is off (or none can be read: gone, not this user's)."""
    import psutil

    for pid in pids:
        try:
            env = psutil.Process(pid).environ()
        except psutil.Error:
            continue
        if env.get(FOLDER_ENV) and entries(env) > 0:
            return Path(env[FOLDER_ENV])
    return None


def gather(pids: Mapping[int, int], wait: float = ANSWER_WAIT) -> dict[int, Recorded]:
    """The recorders of the ranks ``{rank: pid}`` of one node, asked for at once; those
    that said they answer are waited for ``wait`` seconds at most. Never raises."""
    try:
        folder = folder_of(pids.values())
        if folder is None:
            return {rank: Recorded(None, OFF) for rank in pids}
        with _lock(folder):
            answers, ready = _ask(folder, set(pids), wait)
    except Exception as err:
        return {rank: Recorded(None, f"not asked: {err!r}") for rank in pids}
    found = {}
    for rank in pids:
        doc = answers.get(rank)
        if rank not in ready:
            found[rank] = Recorded(None, OFF)
        elif doc is None:
            found[rank] = Recorded(None, f"no answer in {wait:g} s (its Python is busy in C?)")
        elif isinstance(doc.get("trace"), dict):
            found[rank] = Recorded(doc["trace"])
        else:
            found[rank] = Recorded(None, str(doc.get("error") or "no recorder in its answer"))
    return found


def _lock(folder: Path) -> threading.Lock:
    """One request at a time in a folder: a second would replace the first's."""
    with _locks_lock:
        return _locks.setdefault(folder, threading.Lock())


def _ask(folder: Path, ranks: set[int], wait: float) -> tuple[dict[int, dict[str, Any]], set[int]]:
    ready = {rank for rank in ranks if (folder / recorder_ready(rank)).exists()}
    if not ready:
        return {}, ready
    name = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(4).hex()
    where = private_dir(folder / name)
    answers: dict[int, dict[str, Any]] = {}
    try:
        replace_json(folder / FLIGHT_REQUEST, {"id": name, "until": time.time() + wait})
        deadline = time.monotonic() + wait
        while True:
            for rank in ready - answers.keys():
                doc = read_json(where / recorder_file(rank))
                if isinstance(doc, dict):
                    answers[rank] = doc
            if ready <= answers.keys() or time.monotonic() > deadline:
                return answers, ready
            time.sleep(0.1)
    finally:
        shutil.rmtree(where, ignore_errors=True)
