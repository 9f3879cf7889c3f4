"""One step's FLOPs of a rank, counted once by PyTorch's FlopCounterMode: exactly the
matmuls of a small GPT (within 2 % of 6ND), the dtype they ran in, 6ND where the counter
sees nothing, and the marks' ``flops`` line with the rank's GPU from the fake NVML
driver, or the reason there is none."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from jupyter_air.perf import flops
from jupyter_air.perf.flops import Count, Stage, StepFlops
from jupyter_air.perf.marks import Marks, Source
from jupyter_air.perf.mfu import of_job
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario, env_for
from tests.perf.gpt import CONTEXT, Gpt, batch, parameters, train_step

H100 = "NVIDIA H100 80GB HBM3"
MIG = "MIG-4f1a8a0c-4b3a-5e8f-9a61-0c5b3e3f1d2a"


def counted_step(model: torch.nn.Module, size: int = 4) -> flops.Result:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ids = batch(size, torch.Generator().manual_seed(0))
    count = Count()
    train_step(model, optimizer, ids)
    return count.stop()


def test_a_gpt_step_counts_its_matmuls_forward_and_backward_within_2_percent_of_6nd() -> None:
    width, layers, size = 256, 2, 4
    result = counted_step(Gpt(width, layers, heads=4), size)
    tokens = size * CONTEXT
    weights = layers * 12 * width * width + width * 256  # the blocks' matmuls and the head
    attention = layers * 2 * 2 * size * CONTEXT * CONTEXT * width  # q @ k^T and a @ v
    assert result.flops == 3 * (2 * tokens * weights + attention)  # backward: twice forward
    six_nd = 6 * parameters(Gpt(width, layers, heads=4)) * tokens
    assert abs(result.flops / six_nd - 1) < 0.03
    assert (result.dtype, result.on_cpu) == ("fp32", True)
    assert result.parameters == parameters(Gpt(width, layers, heads=4))


def test_the_bench_s_gpt_is_within_2_percent_of_6nd() -> None:
    model = Gpt()
    result = counted_step(model, size=2)
    assert abs(result.flops / (6 * parameters(model) * 2 * CONTEXT) - 1) < 0.02


def test_the_dtype_is_the_one_most_flops_ran_in() -> None:
    model = Gpt(64, 1, heads=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    count = Count()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        train_step(model, optimizer, batch(2))
    assert count.stop().dtype == "bf16"


@torch.library.custom_op("air_test::opaque_linear", mutates_args=())
def opaque_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A kernel the counter cannot look into, as a fused CUDA or Triton kernel."""
    return x @ w.t()


@torch.library.custom_op("air_test::opaque_linear_backward", mutates_args=())
def opaque_linear_backward(
    grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return grad @ w, grad.flatten(0, -2).t() @ x.flatten(0, -2)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return opaque_linear_backward(grad, *ctx.saved_tensors)  # type: ignore[no-any-return]


opaque_linear.register_autograd(
    _backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs)
)


class Opaque(torch.nn.Module):
    """A byte model whose one matmul is opaque to the counter."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, 32)
        self.w = torch.nn.Parameter(torch.randn(256, 32))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return opaque_linear(self.embed(ids), self.w)


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: WriteScenario) -> Marks:
    """A rank's marks with the fake driver's T4 and H100, the rank given the H100."""
    scenario(Scenario(gpus=[FakeGpu(name="Tesla T4"), FakeGpu(name=H100)]))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    folder = tmp_path / "perf"
    folder.mkdir()
    return Marks(str(folder), rank=0)


def lines(folder: str) -> list[dict[str, Any]]:
    text = (Path(folder) / "rank-0.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def flops_lines(folder: str) -> list[dict[str, Any]]:
    return [line for line in lines(folder) if "flops" in line]


def listen(marks: Marks) -> StepFlops:
    counter = StepFlops(marks)
    marks.on_step(counter.at_mark)
    return counter


def train(marks: Marks, model: torch.nn.Module, steps: range, tokens: int | None = None) -> None:
    """Train ``model`` up to each of ``steps`` in turn, marking each (a loop that marks
    every few steps: range(2, 10, 2))."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    for step in steps:
        for _ in range(step - done):
            train_step(model, optimizer, batch(2))
        done = step
        marks.step(Source.STEP, step, samples=2, tokens=tokens)


def test_the_second_step_is_counted_once_with_the_rank_s_gpu(marks: Marks) -> None:
    counter = listen(marks)
    train(marks, Gpt(64, 1, heads=2), range(1, 6), tokens=2 * CONTEXT)
    (line,) = flops_lines(marks.folder)
    expected = counted_step(Gpt(64, 1, heads=2), size=2).flops
    assert line["flops"] == expected
    assert {k: line[k] for k in ("how", "dtype", "gpu", "cpu")} == {
        "how": "counted",
        "dtype": "fp32",
        "gpu": H100,
        "cpu": True,
    }
    assert [entry.get("s") for entry in lines(marks.folder)] == [1, 2, None, 3, 4, 5]
    assert counter.stage is Stage.DONE
    mfu = of_job(Path(marks.folder), step_time_s=0.01)
    assert mfu.value == pytest.approx(expected / (0.01 * 67e12))


def test_a_loop_marked_every_few_steps_gives_one_step_s_flops(marks: Marks) -> None:
    listen(marks)
    train(marks, Gpt(64, 1, heads=2), range(2, 10, 2))
    (line,) = flops_lines(marks.folder)
    assert line["flops"] == counted_step(Gpt(64, 1, heads=2), size=2).flops


def test_a_model_the_counter_cannot_see_is_estimated_by_6nd_with_the_step_s_tokens(
    marks: Marks,
) -> None:
    marks.on_step(lambda s: marks.note(cs={"backward": 0.1}, s=s))  # another kind's line
    listen(marks)
    train(marks, Opaque(), range(1, 4), tokens=2 * CONTEXT)
    (line,) = flops_lines(marks.folder)
    assert (line["flops"], line["how"]) == (6 * (256 * 32 * 2) * 2 * CONTEXT, "6nd")
    assert "6 x parameters x tokens" in of_job(Path(marks.folder), 1.0).why


def test_without_the_tokens_a_model_the_counter_cannot_see_has_no_flops_and_says_why(
    marks: Marks,
) -> None:
    listen(marks)
    train(marks, Opaque(), range(1, 4))
    (line,) = flops_lines(marks.folder)
    assert line["flops"] is None
    assert line["gpu"] == H100
    assert of_job(Path(marks.folder), 1.0).why == (
        "FLOPs not counted: the FLOP counter saw none (compiled or custom kernels?) and the "
        "batch's tokens are unknown (give them: jupyter_air.step(tokens=...))"
    )


def test_a_rank_without_a_gpu_counts_nothing_and_says_so_at_its_first_mark(
    marks: Marks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    counter = listen(marks)
    train(marks, Gpt(64, 1, heads=2), range(1, 2))
    assert counter.stage is Stage.DONE
    (line,) = flops_lines(marks.folder)
    assert line == {**line, "flops": None, "how": None, "gpu": None, "why": "no GPU"}
    assert of_job(Path(marks.folder), 1.0).why == "no GPU"


def test_nvml_failing_costs_the_figure_not_the_rank(
    marks: Marks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flops, "rank_gpu", lambda: 1 / 0)
    listen(marks)
    train(marks, Gpt(64, 1, heads=2), range(1, 2))
    assert of_job(Path(marks.folder), 1.0).why == (
        "the rank's GPU could not be read: ZeroDivisionError('division by zero')"
    )


def test_a_warm_session_s_next_cell_is_counted_in_its_own_folder(
    marks: Marks, tmp_path: Path
) -> None:
    listen(marks)
    train(marks, Gpt(64, 1, heads=2), range(1, 2))  # a cell ends while its step is counted
    assert torch._C._len_torch_dispatch_stack() == 1
    (tmp_path / "cell2").mkdir()
    marks._target(str(tmp_path / "cell2"))  # what marks.current() does for the next cell
    train(marks, Gpt(64, 2, heads=2), range(1, 4))
    assert torch._C._len_torch_dispatch_stack() == 0
    assert flops_lines(str(tmp_path / "perf")) == []
    (line,) = flops_lines(str(tmp_path / "cell2"))
    assert line["flops"] == counted_step(Gpt(64, 2, heads=2), size=2).flops


@pytest.mark.parametrize(
    ("visible", "gpu", "why"),
    [
        ("1", H100, ""),
        ("GPU-fa4e0000-0000-4000-8000-000000000000", "Tesla T4", ""),  # by UUID
        ("", None, "no GPU"),
        ("-1", None, "no GPU"),
        ("7", None, "no GPU: CUDA_VISIBLE_DEVICES=7 is none of NVML's"),
        (
            "MIG-4f1a8a0c-4b3a-5e8f-9a61-0c5b3e3f1d2a",
            "MIG-4f1a8a0c-4b3a-5e8f-9a61-0c5b3e3f1d2a",
            "",
        ),
        (None, H100, ""),  # unset: LOCAL_RANK's
    ],
)
def test_the_rank_s_gpu_is_its_first_visible_device(
    marks: Marks,
    monkeypatch: pytest.MonkeyPatch,
    visible: str | None,
    gpu: str | None,
    why: str,
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert flops.rank_gpu() == (gpu, why)


def test_a_gpu_in_mig_mode_is_named_as_a_slice_and_no_driver_is_no_gpu(
    marks: Marks, scenario: WriteScenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    scenario(Scenario(gpus=[FakeGpu(name="NVIDIA A100-SXM4-40GB", mig=True)]))
    assert flops.rank_gpu() == ("NVIDIA A100-SXM4-40GB MIG", "")
    scenario(Scenario(init_error="DRIVER_NOT_LOADED"))
    gpu, why = flops.rank_gpu()
    assert gpu is None
    assert why.startswith("no GPU (")


def test_the_counter_is_imported_at_the_first_mark_and_installed_once(
    tmp_path: Path, fake_nvml_dir: Path
) -> None:
    scenario = Scenario(gpus=[FakeGpu(name=H100)]).write(tmp_path / "scenario")
    (tmp_path / "perf").mkdir()
    script = f"""
        import sys, torch
        from jupyter_air.perf import flops
        from jupyter_air.perf.marks import Marks, Source
        marks = Marks({str(tmp_path / "perf")!r}, rank=0)
        flops.install(marks)
        flops.install(marks)
        assert "torch.utils.flop_counter" not in sys.modules
        for step in range(3):
            torch.ones(2, 2) @ torch.ones(2, 2)
            marks.step(Source.STEP)
            assert "torch.utils.flop_counter" in sys.modules  # from the first mark on
    """
    env = {**env_for(fake_nvml_dir, scenario), "CUDA_VISIBLE_DEVICES": "0", "RANK": "0"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (line,) = flops_lines(str(tmp_path / "perf"))
    assert (line["flops"], line["gpu"]) == (16, H100)
