"""The cause of a rank's death (issue 26), named where the job's outcome is: a native
crash with the Python frame it happened in, an allocation past ``ulimit -v``, the
kernel's OOM killer enforcing a memory cgroup's limit, and an XID of the rank's GPU
(issue 39, played by the fake NVML driver). Real supervisors and ranks."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs.node.death import CGROUP_ROOT, MemoryWatch, crash_frame, explain
from jupyter_air.paths import air_home
from tests.fake_nvml import FakeGpu, Scenario, build_library, env_for
from tests.waits import until, wait_settled

SEGFAULT = """\
import ctypes, os


def read_nothing():
    return ctypes.string_at(0)


print("rank", os.environ["RANK"], "starting", flush=True)
if os.environ["RANK"] == "1":
    read_nothing()
"""
#: Each rank says it is up, then waits for the word; rank 1 then aborts (its GPU fell
#: off the bus), rank 0 waits to be stopped.
ABORTS = """\
import os, pathlib, time
rank = os.environ["RANK"]
pathlib.Path("up-" + rank).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
while not pathlib.Path("go").exists():
    time.sleep(0.05)
if rank == "1":
    os.abort()
time.sleep(120)
"""
GREEDY = """\
import time
hoard = []
while True:  # 16 MiB more every 50 ms: past the limit in about a second
    hoard.append(bytearray(16 << 20))
    time.sleep(0.05)
"""


@pytest.fixture
def workdir(tmp_path: Path, in_module_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "segfault.py").write_text(SEGFAULT)
    (tmp_path / "greedy.py").write_text(GREEDY)
    (tmp_path / "aborts.py").write_text(ABORTS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def submit(workdir: Path, command: str, ranks: int = 1) -> str:
    """The id of the job ``air run`` submitted."""
    (workdir / "w.yaml").write_text(
        json.dumps(
            {"experiment_name": "deaths", "command": command, "compute": {"nproc_per_node": ranks}}
        )
    )
    submitted = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.split()[1]


def run(workdir: Path, command: str, ranks: int = 1) -> str:
    """The job's end message, once it ended."""
    return outcome(workdir, submit(workdir, command, ranks))


def outcome(workdir: Path, job_id: str) -> str:
    """The end message of a job that failed, once it ended; ``air get`` says it too."""
    job = wait_settled(air_home(), job_id)
    assert job.status == "FAILED"
    assert job.message is not None
    shown = subprocess.run(
        [sys.executable, "-m", "jupyter_air.cli", "get", job.id],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert job.message in shown, "air get says it too"
    return job.message


@pytest.mark.heavy
def test_a_segfault_names_the_signal_and_the_python_frame_it_happened_in(workdir: Path) -> None:
    message = run(workdir, f"{sys.executable} segfault.py", ranks=2)
    assert re.fullmatch(
        r"rank 1 crashed: SIGSEGV \(a segmentation fault, in native code\) "
        r"at segfault\.py:5 in read_nothing \(in string_at, ctypes/__init__\.py:\d+\)",
        message,
    ), message


@pytest.mark.heavy
def test_an_allocation_past_ulimit_v_is_said_to_be_out_of_memory(workdir: Path) -> None:
    message = run(
        workdir, f"sh -c 'ulimit -v 400000; exec {sys.executable} -c \"bytearray(1 << 30)\"'"
    )
    assert message == "rank 0 ran out of memory (MemoryError), exit code 1"


@pytest.fixture
def limited_cgroup() -> Iterator[Path]:
    """A memory cgroup of 192 MiB, made by the test (it needs the right to; else skip)."""
    v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
    parent = CGROUP_ROOT if v2 else CGROUP_ROOT / "memory"
    where = parent / f"air-test-{os.getpid()}"
    try:
        where.mkdir()
        (where / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(192 << 20))
        if not v2:
            (where / "memory.memsw.limit_in_bytes").exists()  # swap may be counted apart
    except OSError as err:
        if where.exists():
            where.rmdir()
        pytest.skip(f"this machine lets the tests make no memory cgroup: {err}")
    yield where
    with contextlib.suppress(OSError):  # a process of it may still be exiting
        where.rmdir()


@pytest.mark.heavy
def test_the_oom_killer_of_a_memory_cgroup_is_named_with_the_limit(
    workdir: Path, limited_cgroup: Path
) -> None:
    join = f"echo $$ > {limited_cgroup / 'cgroup.procs'}"
    message = run(workdir, f"sh -c '{join} && exec {sys.executable} greedy.py'")
    assert message.startswith("rank 0 was killed by the out-of-memory killer (SIGKILL): ")
    assert "limit 192.0 MiB" in message
    assert f"cgroup /{limited_cgroup.name}: oom_kill 0 -> 1" in message


def test_a_plain_exit_and_a_kill_are_said_as_before() -> None:
    watch = MemoryWatch()
    assert explain(2, 3, ["Traceback ...", "ValueError: bad"], watch) == (
        "rank 2 exited with code 3"
    )
    assert explain(2, -15, [], watch) == "rank 2 was killed by SIGTERM"
    assert explain(2, -9, [], watch) == "rank 2 was killed by SIGKILL", "no OOM seen: no guess"
    assert crash_frame(["no report here"]) is None


def test_the_crash_is_placed_in_the_thread_faulthandler_calls_current() -> None:
    """A rank has other threads (the flight recorder's listener): faulthandler lists
    them first; the crash is in the current thread's frames."""
    report = [
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f0000000001 (most recent call first):",
        f'  File "{threading.__file__}", line 331 in wait',
        '  File "/x/jupyter_air/jobs/node/flight_recorder.py", line 151 in _listen',
        "",
        "Current thread 0x00007f0000000002 (most recent call first):",
        f'  File "{ctypes.__file__}", line 519 in string_at',
        '  File "/work/segfault.py", line 5 in read_nothing',
        '  File "/work/segfault.py", line 10 in <module>',
        "",
        "Extension modules: numpy (total: 1)",
    ]
    assert crash_frame(report) == (
        "segfault.py:5 in read_nothing (in string_at, ctypes/__init__.py:519)"
    )


@pytest.mark.heavy
def test_an_xid_of_the_dying_ranks_gpu_is_named_as_its_cause(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_gpus = Scenario(gpus=[FakeGpu(), FakeGpu()])
    path = two_gpus.write(workdir / "nvml.txt")
    for name, value in env_for(build_library(), path).items():
        monkeypatch.setenv(name, value)
    job_id = submit(workdir, f"{sys.executable} aborts.py", ranks=2)
    until(lambda: (workdir / "up-1").exists(), "rank 1 up", 120)
    assert (workdir / "up-1").read_text() == "1", "rank 1 holds GPU 1"

    at = time.time()  # GPU 0's XID of long ago is no cause; GPU 1's now is
    Scenario(gpus=[FakeGpu(xids=[(13, at - 600)]), FakeGpu(xids=[(79, at)])]).write(path)
    (workdir / "go").touch()

    message = outcome(workdir, job_id)
    assert re.fullmatch(
        r"rank 1 exited -6 \(SIGABRT\); GPU 1 reported XID 79 \(fallen off the bus\) "
        r"at \d\d:\d\d:\d\d",
        message,
    ), message
