"""A cell that checkpoints with ``jupyter_air.checkpoint`` and loses a rank to SIGKILL
resumes on its retry (``--max-retries 1``), in a real kernel; ``--resume JOB`` starts a
cell from an earlier cell's checkpoint; ``@distributed(checkpoint_dir=...)`` names the
place. Bad values are refused in one line, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel
from tests.kernel.test_distributed_magic import job_id_of

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

PLOTLY = "application/vnd.plotly.v1+json"

TRAIN = """\
import os, signal
import torch, torch.distributed as dist
from jupyter_air import checkpoint, log_metrics

dist.init_process_group("gloo")
state, done = checkpoint.load() or ({"w": 0}, 0)
print(f"attempt {os.environ['AIR_ATTEMPT']} starts at step {done}")
w = state["w"]
for step in range(done, 8):
    w += 1
    dist.all_reduce(torch.zeros(1))
    log_metrics({"w": float(w)}, step=step + 1)
    checkpoint.save({"w": w}, step + 1)
    dist.barrier()
    if os.environ["AIR_ATTEMPT"] == "1" and step + 1 == 5 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()  # no rank leaves while another still connects (a resumed run may have no step left)
w
"""


def test_a_cell_retried_after_a_killed_rank_resumes_and_a_later_cell_resumes_from_it(
    kernel: Kernel, air_home: Path
) -> None:
    first = kernel.run(f"%%air_distributed -n 2 --max-retries 1\n{TRAIN}", timeout=240)

    assert first.error is None, first.traceback
    assert first.value() == "8", "the state went on from step 5"
    assert "[rank 0] attempt 1 starts at step 0" in first.stdout
    assert "[rank 0] attempt 2 starts at step 5" in first.stdout, first.stdout
    earlier = job_id_of(first)
    chart = next(d[PLOTLY] for d in reversed(first.displays) if PLOTLY in d)
    traces = {t["name"]: t for t in chart["data"]}
    assert traces["w"]["x"] == [1, 2, 3, 4, 5]
    assert traces["w (attempt 2)"]["x"] == [6, 7, 8], "the retry's curve goes on from step 5"
    ((mark,),) = [chart["layout"]["shapes"]]
    assert (mark["x0"], mark["line"]["dash"]) == (5, "dash"), "the restart is marked"
    labels = [a["text"] for a in chart["layout"]["annotations"]]
    assert "attempt 2 resumed at step 5" in labels

    again = kernel.run(f"%%air_distributed -n 2 --resume {earlier}\n{TRAIN}", timeout=240)

    assert again.error is None, again.traceback
    assert "[rank 0] attempt 1 starts at step 8" in again.stdout, again.stdout


def test_a_function_names_its_checkpoint_place(kernel: Kernel, tmp_path: Path) -> None:
    place = tmp_path / "ckpts"
    kernel.run(
        "import os\n"
        "from jupyter_air import distributed, checkpoint\n"
        f"@distributed(nproc_per_node=1, checkpoint_dir={str(place)!r})\n"
        "def where():\n"
        "    checkpoint.save({'w': 1}, 3)\n"
        "    return os.environ['AIR_CHECKPOINT_DIR']\n"
    )
    assert kernel.run("where.distributed()").value() == repr(str(place))
    assert (place / "step-000000003" / "air-checkpoint.json").is_file()


def test_bad_resume_and_checkpoint_dir_are_refused_before_anything_starts(
    kernel: Kernel, air_home: Path, tmp_path: Path
) -> None:
    done = kernel.run("%%air_distributed -n 1\nprint('no checkpoint here')", timeout=120)
    assert done.error is None, done.traceback
    plain = job_id_of(done)
    before = len(JobStore(air_home).jobs())

    nothing = kernel.run(f"%%air_distributed -n 1 --resume {plain}\nprint('never')")
    assert nothing.stderr.startswith(
        f"UsageError: --resume: job {plain} has no complete checkpoint in "
    ), nothing.stderr
    typo = kernel.run("%%air_distributed -n 1 --resume yesterday\nprint('never')")
    assert typo.stderr.startswith("UsageError: --resume: 'yesterday' is not a job id"), typo.stderr
    (tmp_path / "a-file").write_text("")
    unwritable = kernel.run(
        f"%%air_distributed -n 1 --checkpoint-dir {tmp_path / 'a-file' / 'x'}\nprint('never')"
    )
    assert unwritable.stderr.startswith(
        f"UsageError: --checkpoint-dir: {tmp_path / 'a-file'} is not writable"
    ), unwritable.stderr
    assert len(JobStore(air_home).jobs()) == before, "nothing started"
