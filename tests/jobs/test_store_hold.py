"""A job store keeps its hold on the database however many stores of it a process makes:
making one must not drop the POSIX locks of the connections already open (SQLite's
"last connection" would then be decided wrongly in another process, which deletes the
WAL under them and corrupts the database)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jupyter_air.jobs.store import JobStore

LAST_CONNECTION = (
    "import sqlite3, sys\n"
    "db = sqlite3.connect(sys.argv[1])\n"
    "db.execute('SELECT count(*) FROM jobs').fetchone()\n"
    "db.close()  # the last connection to a WAL database checkpoints and deletes the WAL\n"
)


def test_a_second_store_in_a_process_keeps_the_first_ones_hold(tmp_path: Path) -> None:
    first = JobStore(tmp_path)
    assert first.wal
    JobStore(tmp_path)  # another store of the same database, in the same process
    database = str(tmp_path / "jobs.db")
    subprocess.run([sys.executable, "-c", LAST_CONNECTION, database], check=True)
    assert (tmp_path / "jobs.db-wal").exists(), "another process took itself for the last"
