"""A profile on demand: its files in the attempt's perf folder, how it is asked for,
waited on and finished (merged, summed up, kept on the run).

::

    perf/profiles/request.json           the profile asked for now: {"id", "steps", "until"}
    perf/profiles/<id>/profile.json      who asked, when, for how many ranks, and the run
    perf/profiles/<id>/start.json        the step the ranks start at (the first to look)
    perf/profiles/<id>/rank-R.json       rank R's trace (``torch.profiler``'s Chrome trace)
    perf/profiles/<id>/rank-R.done.json  rank R's answer: its steps, host, or its error
    perf/profiles/<id>/merged.json.gz    every rank's trace on one clock (``traces.merge``)
    perf/profiles/<id>/summary.txt|json  what they say (``traces.summarize``)
    perf/profiles/<id>/finished.json     the profile finished: its summary, its artifacts

The ranks (``perf.profiler``) look for ``request.json`` at step boundaries; whoever asked
(``air profile``, the server) waits for every rank's answer, then ``finish``es it once
(under a lock: the CLI and the server may both try), its files then also artifacts of
the attempt's run under ``profile/<id>/``. This folder is how a request reaches the
ranks: on a cluster it must be on a disk the nodes share with the machine that asks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..job_dir import JobDir, read_json, replace_json
from ..paths import private_opener, write_private

DEFAULT_STEPS = 5
MAX_STEPS = 100
#: Seconds a request waits for the ranks by default: later, they leave it be.
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3600.0

#: The profiles' folder in the attempt's perf folder (``AttemptDir.perf``), and its files.
PROFILES = "profiles"
REQUEST = "request.json"
PROFILE = "profile.json"
START = "start.json"
MERGED = "merged.json.gz"
SUMMARY_TEXT = "summary.txt"
SUMMARY_JSON = "summary.json"
FINISHED = "finished.json"
LOCK = ".lock"
#: What a profile's id looks like (``new_id``): safe in a path and in a URL.
PROFILE_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


class ProfileState(StrEnum):
    WAITING = "waiting"  # some rank has not answered yet, and may still
    DONE = "done"  # every rank answered
    INCOMPLETE = "incomplete"  # its time ran out (or the job ended) before every rank did


class Busy(RuntimeError):
    """Another profile of the attempt is under way."""


class BadRequest(ValueError):
    """Steps or a timeout out of range."""


def profiles_dir(perf_dir: Path) -> Path:
    return perf_dir / PROFILES


def request_file(perf_dir: Path) -> Path:
    return profiles_dir(perf_dir) / REQUEST


def rank_trace(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank}.json"


def rank_answer(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank}.done.json"


def new_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


@dataclass(frozen=True)
class Profile:
    """One profile asked of an attempt's ranks."""

    id: str
    folder: Path
    steps: int
    ranks: int
    requested: float
    until: float
    by: str
    job_id: str
    attempt: int
    run_id: str | None
    tracking_uri: str | None

    def answers(self) -> dict[int, dict[str, Any]]:
        """Each rank's answer so far (its steps and host, or its error)."""
        found = {}
        for rank in range(self.ranks):
            doc = read_json(rank_answer(self.folder, rank))
            if isinstance(doc, dict):
                found[rank] = doc
        return found

    def state(self, ended: bool = False, now: float | None = None) -> ProfileState:
        """``ended``: the job runs no more (no rank will answer now)."""
        if len(self.answers()) == self.ranks:
            return ProfileState.DONE
        late = (now or time.time()) > self.until
        return ProfileState.INCOMPLETE if ended or late else ProfileState.WAITING

    def finished(self) -> dict[str, Any] | None:
        doc = read_json(self.folder / FINISHED)
        return doc if isinstance(doc, dict) else None

    def to_json(self, ended: bool = False) -> dict[str, Any]:
        """The API's profile (docs/api.md)."""
        answers = self.answers()
        done = self.finished()
        return {
            "id": self.id,
            "job": self.job_id,
            "attempt": self.attempt,
            "steps": self.steps,
            "ranks": self.ranks,
            "requested": self.requested,
            "by": self.by,
            "state": self.state(ended).value,
            "answered": sorted(answers),
            "errors": {str(r): a["error"] for r, a in answers.items() if a.get("error")},
            "finished": done,
        }


def request(
    perf_dir: Path,
    *,
    steps: int,
    ranks: int,
    by: str,
    job_id: str,
    attempt: int,
    run_id: str | None,
    tracking_uri: str | None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Profile:
    """Ask the attempt's ranks to profile their next ``steps`` steps; ``Busy`` while an
    earlier profile still waits for its ranks."""
    if not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise BadRequest(f"steps must be 1 to {MAX_STEPS}, got {steps!r}")
    if not 0 < timeout <= MAX_TIMEOUT:
        raise BadRequest(f"the timeout must be more than 0 and at most {MAX_TIMEOUT:g} s")
    root = profiles_dir(perf_dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(root):
        current = read_json(root / REQUEST)
        if isinstance(current, dict) and isinstance(current.get("id"), str):
            earlier = read(root / current["id"])
            if earlier is not None and earlier.state() is ProfileState.WAITING:
                raise Busy(
                    f"a profile of job {job_id} is under way (asked by {earlier.by} at "
                    f"{_clock(earlier.requested)}, {len(earlier.answers())} of "
                    f"{earlier.ranks} ranks done): wait for it"
                )
        now, name = time.time(), new_id()
        profile = Profile(
            id=name,
            folder=root / name,
            steps=steps,
            ranks=ranks,
            requested=now,
            until=now + timeout,
            by=by,
            job_id=job_id,
            attempt=attempt,
            run_id=run_id,
            tracking_uri=tracking_uri,
        )
        profile.folder.mkdir(mode=0o700)
        replace_json(profile.folder / PROFILE, _record(profile))
        replace_json(root / REQUEST, {"id": profile.id, "steps": steps, "until": profile.until})
    return profile


def _record(p: Profile) -> dict[str, Any]:
    return {
        "id": p.id,
        "steps": p.steps,
        "ranks": p.ranks,
        "requested": p.requested,
        "until": p.until,
        "by": p.by,
        "job": p.job_id,
        "attempt": p.attempt,
        "run_id": p.run_id,
        "tracking_uri": p.tracking_uri,
    }


def read(folder: Path) -> Profile | None:
    """The profile of that folder, None when it is none."""
    doc = read_json(folder / PROFILE)
    if not isinstance(doc, dict) or not PROFILE_ID.fullmatch(str(doc.get("id"))):
        return None
    try:
        return Profile(
            id=doc["id"],
            folder=folder,
            steps=int(doc["steps"]),
            ranks=int(doc["ranks"]),
            requested=float(doc["requested"]),
            until=float(doc["until"]),
            by=str(doc["by"]),
            job_id=str(doc["job"]),
            attempt=int(doc["attempt"]),
            run_id=doc.get("run_id"),
            tracking_uri=doc.get("tracking_uri"),
        )
    except (KeyError, TypeError, ValueError):
        return None


def of_attempt(perf_dir: Path) -> list[Profile]:
    """The attempt's profiles, oldest first."""
    root = profiles_dir(perf_dir)
    if not root.is_dir():
        return []
    found = [read(p) for p in sorted(root.iterdir()) if PROFILE_ID.fullmatch(p.name)]
    return [p for p in found if p is not None]


def of_job(job_dir: Path) -> list[Profile]:
    """Every profile of a job (its attempts', a session's cells'), oldest first."""
    found = []
    for attempt in JobDir(job_dir).attempts():
        for place in (attempt, *attempt.late_cells()):
            found.extend(of_attempt(place.perf))
    return sorted(found, key=lambda p: p.requested)


def wait(
    profile: Profile, ended: Callable[[], bool], poll: float = 0.2, ended_every: float = 1.0
) -> ProfileState:
    """Wait until every rank answered, the profile's time ran out or the job ended
    (``ended()``, asked every ``ended_every`` seconds); its state then."""
    asked = 0.0
    while True:
        state = profile.state()
        if state is not ProfileState.WAITING:
            return state
        if time.monotonic() - asked >= ended_every:
            asked = time.monotonic()
            if ended():
                return profile.state(ended=True)
        time.sleep(poll)


def finish(profile: Profile) -> dict[str, Any]:
    """Merge the ranks' traces, sum them up and keep both, with each rank's trace, on the
    attempt's run (once: a second call, or one waiting for the first, reads what the
    first did). The ranks that did not answer are said."""
    with _locked(profile.folder):
        done = profile.finished()
        if done is not None:
            return done
        from . import traces

        answers = profile.answers()
        files: dict[int, tuple[Path, str]] = {}
        notes = []
        for rank in range(profile.ranks):
            answer = answers.get(rank)
            if answer is None:
                notes.append(f"rank {rank} did not answer (no step marked in time)")
            elif answer.get("error"):
                notes.append(f"rank {rank}: {answer['error']}")
            else:
                files[rank] = (rank_trace(profile.folder, rank), str(answer.get("host", "?")))
        loaded = []
        for rank, (path, host) in sorted(files.items()):
            try:
                loaded.append(traces.RankTrace(rank, host, traces.load(path)))
            except traces.BadTrace as err:
                notes.append(f"rank {rank}: {err}")
        doc: dict[str, Any] = {"ranks": sorted(t.rank for t in loaded), "notes": notes}
        if loaded:
            clocks = traces.align(loaded)
            traces.write_merged(traces.merge(loaded, clocks), profile.folder / MERGED)
            summary = traces.summarize(loaded, clocks)
            summary.notes.extend(notes)
            text = summary.text()
            doc.update(summary=summary.to_json(), text=text, merged=MERGED)
            replace_json(profile.folder / SUMMARY_JSON, summary.to_json())
            write_private(profile.folder / SUMMARY_TEXT, text)
            kept = [rank_trace(profile.folder, t.rank) for t in loaded]
            kept += [profile.folder / MERGED, profile.folder / SUMMARY_TEXT]
            kept.append(profile.folder / SUMMARY_JSON)
            doc["artifacts"] = _keep_on_run(profile, kept)
        else:
            doc.update(summary=None, text="no rank's trace to show\n" + "\n".join(notes))
        doc["time"] = time.time()
        replace_json(profile.folder / FINISHED, doc)
        return doc


def artifact_path(profile: Profile) -> str:
    return f"profile/{profile.id}"


def _keep_on_run(profile: Profile, files: list[Path]) -> dict[str, Any]:
    """The files as artifacts of the attempt's run; what went wrong, if anything (the
    files stay in the attempt's folder either way)."""
    where = artifact_path(profile)
    if not profile.run_id:
        return {"run_id": None, "path": where, "error": "the attempt has no MLflow run"}
    from ..tracking.targets import bound_requests, default_tracking_uri

    bound_requests()  # a server that does not answer fails in seconds, not minutes
    try:
        from mlflow import MlflowClient

        client = MlflowClient(profile.tracking_uri or default_tracking_uri())
        for path in files:
            client.log_artifact(profile.run_id, str(path), where)
    except Exception as err:  # MLflow's own, the network's, the artifact store's
        first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        return {"run_id": profile.run_id, "path": where, "error": first[:300]}
    return {"run_id": profile.run_id, "path": where, "error": None}


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / LOCK, "a", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")
