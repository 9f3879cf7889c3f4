"""Where a notebook task keeps its executed notebook, and finding it again.

Each attempt of the task's job writes its executed copy, outputs and all, into its own
attempt directory (``<AIR_HOME>/jobs/<job>/attempt-<n>/notebook/<name>.ipynb``), beside
its logs: private to the schedule's owner (0600 in a 0700 home), outside the Jupyter
server's root, and gone when the job's files expire. The server serves it under the
task's job's own access check (``GET jupyter-air/jobs/<job>/notebook``), so that a
user with no grant on the job reads nothing of it; ``air schedule runs`` prints its
path. The same copy is an artifact of the attempt's MLflow run (``notebook/<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..jobs.store import JobStore, UnknownJob
from ..paths import private_dir, write_private

#: The folder of an attempt's directory that holds its executed notebook.
FOLDER = "notebook"


@dataclass(frozen=True)
class Executed:
    """One attempt's executed notebook."""

    job_id: str
    attempt: int
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


def keep(jobs: JobStore, job_id: str, attempt: int, name: str, text: str) -> Path:
    """Write ``text`` as attempt ``attempt``'s executed notebook ``name``; its path."""
    folder = private_dir(jobs.attempt_dir(job_id, attempt) / FOLDER)
    path = folder / Path(name).name
    write_private(path, text)
    return path


def latest(jobs: JobStore, job_id: str) -> Executed | None:
    """The newest attempt's executed notebook that exists (a retry still running shows
    the one before it); None when no attempt kept one, or the job's files expired."""
    try:
        attempts = sorted((a.attempt for a in jobs.attempts(job_id)), reverse=True)
    except UnknownJob:
        return None
    for number in attempts:
        folder = jobs.attempt_dir(job_id, number) / FOLDER
        found = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
        if found:
            return Executed(job_id, number, found[0])
    return None
