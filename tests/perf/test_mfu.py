"""A job's MFU from its ranks' ``flops`` lines and its step time, on marks files as ranks
write them: present with how it was had, or absent with the reason, never made up."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.gpu.peaks import TERA
from jupyter_air.job_dir import JobDir
from jupyter_air.perf import progress
from jupyter_air.perf.marks import rank_files
from jupyter_air.perf.mfu import Mfu, of_job
from tests.air_cli import air
from tests.fake_nvml import FakeGpu, Scenario, env_for
from tests.perf.gpt import CONTEXT
from tests.waits import wait_settled

H100 = "NVIDIA H100 80GB HBM3"


def write(perf_dir: Path, rank: int, *lines: dict[str, Any], tail: bytes = b"") -> None:
    """A rank's marks file: two steps, then ``lines`` (and ``tail``, a line cut short)."""
    perf_dir.mkdir(exist_ok=True)
    steps = [{"s": s, "t": 100.0 + s, "dt": 1.0, "n": 8, "k": 256, "src": "step"} for s in (1, 2)]
    text = "".join(json.dumps(line) + "\n" for line in [*steps, *lines])
    (perf_dir / f"rank-{rank}.jsonl").write_bytes(text.encode() + tail)


def counted(
    flops: float, gpu: str | None = H100, dtype: str = "bf16", **more: Any
) -> dict[str, Any]:
    return {"flops": flops, "how": "counted", "dtype": dtype, "gpu": gpu, "t": 103.0, **more}


def test_the_ranks_flops_over_their_gpus_peaks_in_the_step_time(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(400e12))
    write(tmp_path, 1, counted(400e12))
    mfu = of_job(tmp_path, step_time_s=2.0)
    assert mfu.value == pytest.approx(800e12 / (2.0 * 2 * 989.5 * TERA))
    assert mfu.why == (
        "400 TFLOP a step per rank (2 ranks), counted by PyTorch's FlopCounterMode, "
        "against the H100 SXM's dense bf16 peak (989.5 TFLOP/s)"
    )


def test_each_rank_s_own_gpu_and_dtype_give_its_peak(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(100e12, "NVIDIA H100 80GB HBM3", "bf16"))
    write(tmp_path, 1, counted(100e12, "NVIDIA A100-SXM4-80GB", "tf32"))
    mfu = of_job(tmp_path, step_time_s=1.0)
    assert mfu.value == pytest.approx(200e12 / ((989.5 + 156) * TERA))
    assert "H100 SXM's dense bf16" in mfu.why
    assert "A100's dense tf32" in mfu.why


def test_ranks_without_a_line_yet_are_left_out_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(300e12), tail=b'{"flops": 9e99, "how": "coun')
    write(tmp_path, 1)
    assert of_job(tmp_path, 1.0).value == pytest.approx(300e12 / (989.5 * TERA))


def test_an_estimate_by_6nd_says_so(tmp_path: Path) -> None:
    write(tmp_path, 0, {**counted(6 * 1e9 * 4096), "how": "6nd"})
    mfu = of_job(tmp_path, 0.1)
    assert mfu.value == pytest.approx(6 * 1e9 * 4096 / (0.1 * 989.5 * TERA))
    assert "estimated as 6 x parameters x tokens (the FLOP counter saw none" in mfu.why


def test_a_step_run_on_the_cpu_is_measured_and_said_to_be(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(1e9, dtype="fp32", cpu=True))
    mfu = of_job(tmp_path, 0.5)
    assert mfu.value == pytest.approx(1e9 / (0.5 * 67 * TERA))
    assert mfu.why.startswith("1 GFLOP a step, counted")
    assert mfu.why.endswith("; the step ran on the CPU, so the GPU's peak does not apply to it")


@pytest.mark.parametrize(
    ("lines", "step_time", "why"),
    [
        ([], 1.0, "FLOPs not counted yet (a rank counts its second step)"),
        ([counted(1e12)], None, "no step time yet"),
        ([{**counted(0), "flops": None, "gpu": None, "why": "no GPU"}], 1.0, "no GPU"),
        (
            [{**counted(0), "flops": None, "gpu": None, "why": "no GPU (Driver Not Loaded)"}],
            1.0,
            "no GPU (Driver Not Loaded)",
        ),
        ([counted(1e12, "NVIDIA GeForce GTX 1080")], 1.0, "unknown GPU 'NVIDIA GeForce GTX 1080'"),
        (
            [counted(1e12, "NVIDIA A100-SXM4-40GB MIG 1g.5gb")],
            1.0,
            "MIG slice 'NVIDIA A100-SXM4-40GB MIG 1g.5gb': "
            "a slice's share of the GPU's peak is not known",
        ),
        (
            [counted(1e12, "Tesla T4", "bf16")],
            1.0,
            "the T4 has no bf16 peak (no bf16 tensor cores)",
        ),
        (
            [{**counted(0), "flops": None, "why": "this rank does not use PyTorch"}],
            1.0,
            "FLOPs not counted: this rank does not use PyTorch",
        ),
    ],
)
def test_absent_with_the_reason(
    tmp_path: Path, lines: list[dict[str, Any]], step_time: float | None, why: str
) -> None:
    write(tmp_path, 0, *lines)
    assert of_job(tmp_path, step_time) == Mfu(None, why)


def test_one_rank_s_reason_names_the_rank(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(1e12))
    write(tmp_path, 3, counted(1e12, "NVIDIA Quadro P1000"))
    assert of_job(tmp_path, 1.0) == Mfu(None, "unknown GPU 'NVIDIA Quadro P1000' (rank 3)")


def test_more_than_the_peak_is_no_figure(tmp_path: Path) -> None:
    write(tmp_path, 0, counted(2000e12))
    mfu = of_job(tmp_path, 1.0)
    assert mfu.value is None
    assert mfu.why.startswith("202% of the peak, which cannot be: 2,000 TFLOP a step")


def test_no_folder_is_no_flops_yet(tmp_path: Path) -> None:
    assert of_job(tmp_path / "missing", 1.0).value is None


#: Two DDP ranks on gloo train the small GPT, marking each step with its tokens.
TRAIN = """\
import sys
sys.path.insert(0, {root!r})
import torch, torch.distributed as dist
import jupyter_air
from tests.perf.gpt import CONTEXT, Gpt, batch, train_step

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(Gpt(128, 2, heads=4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(8):
    train_step(model, optimizer, batch(4))
    jupyter_air.step(samples=4, tokens=4 * CONTEXT)
dist.destroy_process_group()
"""


@pytest.mark.heavy
@pytest.mark.slow
def test_a_two_rank_job_on_the_fake_h100s_has_its_mfu_from_its_counted_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_dir: Path
) -> None:
    scenario = Scenario(gpus=[FakeGpu(name=H100), FakeGpu(name=H100)]).write(tmp_path / "nvml")
    for name, value in env_for(fake_nvml_dir, scenario).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    (tmp_path / "train.py").write_text(TRAIN.format(root=root))
    workload = {
        "experiment_name": "mfu",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
    }
    (tmp_path / "w.yaml").write_text(json.dumps(workload))
    submitted = air("run", "-f", "w.yaml")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    job = wait_settled(tmp_path / "air", job_id, timeout=300)
    assert job.status == "SUCCEEDED", air("logs", job_id).stdout

    perf = JobDir.under(tmp_path / "air", job_id).attempt(1).perf
    lines = {
        rank: [json.loads(line) for line in path.read_text().splitlines()]
        for rank, path in rank_files(perf).items()
    }
    assert sorted(lines) == [0, 1]
    per_step = 3 * (2 * 4 * CONTEXT * (2 * 12 * 128**2 + 128 * 256) + 2 * 4 * 4 * CONTEXT**2 * 128)
    for rank_lines in lines.values():
        (flops,) = [line for line in rank_lines if "flops" in line]
        assert flops == {**flops, "flops": per_step, "how": "counted", "dtype": "fp32", "gpu": H100}
    read = progress.read(perf)
    assert read is not None
    step_time = read.step_time_s  # as the jobs API and the displays take it
    assert step_time is not None
    mfu = of_job(perf, step_time)
    assert mfu.value == pytest.approx(2 * per_step / (step_time * 2 * 67 * TERA))
    assert "(2 ranks), counted by PyTorch's FlopCounterMode" in mfu.why
