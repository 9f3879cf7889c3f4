"""Several writers at once: two kernels and the CLI submit and read jobs together."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jupyter_air.jobs import cancel
from jupyter_air.jobs.store import JobStore
from jupyter_air.logs.query import LogFilter, read_all
from tests.kernel.conftest import Execution, Kernel
from tests.kernel.test_distributed_magic import job_id_of
from tests.waits import supervised_until_its_end

LINES = 2000
CELL = (
    "%%air_distributed -n 2\n"
    "import os\n"
    "for i in range({n}):\n"
    "    print(f\"{{os.environ['RANK']}} line {{i}}\")\n"
)


@pytest.mark.slow
def test_two_kernels_and_the_cli_at_once_lose_nothing(
    kernel_env: dict[str, str], air_home: Path, tmp_path: Path
) -> None:
    kernels = [Kernel(kernel_env, cwd=tmp_path) for _ in range(2)]
    results: list[Execution] = []
    try:
        for k in kernels:
            assert k.run("%load_ext jupyter_air").error is None
        workload = tmp_path / "w.yaml"
        script = "import os\nfor i in range(2000): print(os.environ['RANK'], 'line', i)\n"
        (tmp_path / "emit.py").write_text(script)
        workload.write_text(
            f"experiment_name: concurrent\ncommand: {sys.executable} emit.py\n"
            "compute:\n  nproc_per_node: 2\n"
        )
        cli_env = {**kernel_env}
        threads = [
            threading.Thread(target=lambda k=k: results.append(k.run(CELL.format(n=LINES))))
            for k in kernels
        ]
        for t in threads:
            t.start()
        cli = subprocess.run(
            [sys.executable, "-m", "jupyter_air.cli", "run", "-f", str(workload), "--watch"],
            capture_output=True,
            text=True,
            env=cli_env,
            cwd=tmp_path,
            timeout=300,
        )
        readers = [
            subprocess.run(
                [sys.executable, "-m", "jupyter_air.cli", "list", "--all-status"],
                capture_output=True,
                text=True,
                env=cli_env,
                timeout=60,
            )
            for _ in range(3)
        ]
        for t in threads:
            t.join(timeout=300)
    finally:
        for k in kernels:
            k.shutdown()

    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert all(r.returncode == 0 for r in readers)
    assert len(results) == 2
    store = JobStore(air_home)
    job_ids = [job_id_of(r) for r in results] + [cli.stdout.split()[1]]
    for job_id in job_ids:  # --watch ends with the outcome, before its run's tail is done
        job = cancel.wait(store, job_id, 60)
        assert job.status == "SUCCEEDED"
        supervised_until_its_end(job)  # it logs what went wrong on the MLflow side until then
        lines = list(read_all(store.attempt_dir(job_id, 1), LogFilter()))
        assert len(lines) == 2 * LINES, f"job {job_id} lost lines"
        for rank in (0, 1):
            numbers = [int(x.text.rsplit(" ", 1)[1]) for x in lines if x.rank == rank]
            assert numbers == list(range(LINES))
    everything = (
        "".join((store.job_dir(j) / "supervisor.log").read_text() for j in job_ids)
        + cli.stderr
        + "".join(r.stderr for r in readers)
        + "".join(r.stderr for r in results)
    )
    assert "database is locked" not in everything
