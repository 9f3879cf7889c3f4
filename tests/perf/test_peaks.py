"""The peak table: what NVML calls a GPU finds its model, dense figures per data type,
and no peak (with the reason) for no GPU, a GPU we do not know, a dtype it lacks, or a
MIG slice."""

from __future__ import annotations

import pytest

from jupyter_air.gpu.peaks import TERA, Dtype, NoPeak, model_of, peak


@pytest.mark.parametrize(
    ("nvml_name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA A40", "A40"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_each_nvml_name_finds_its_model(nvml_name: str, model: str) -> None:
    assert model_of(nvml_name).name == model


@pytest.mark.parametrize(
    ("nvml_name", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.5),  # 1,979 with sparsity
        ("NVIDIA H100 80GB HBM3", "tf32", 494.5),
        ("NVIDIA H100 80GB HBM3", "fp32", 67),
        ("NVIDIA H100 80GB HBM3", "fp8", 1979),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H200", "fp16", 989.5),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156),
        ("NVIDIA L4", "bf16", 121),
        ("NVIDIA L40S", "bf16", 362.05),
        ("Tesla V100-SXM2-16GB", "fp16", 125),
        ("Tesla T4", "fp16", 65),
        ("NVIDIA B200", "bf16", 2250),
    ],
)
def test_the_peak_is_the_datasheet_s_dense_figure(
    nvml_name: str, dtype: str, tflops: float
) -> None:
    found = peak(nvml_name, dtype)
    assert found.flops == pytest.approx(tflops * TERA)
    assert found.dtype is Dtype(dtype)


def test_no_gpu_and_an_unknown_one_have_no_peak_and_say_so() -> None:
    with pytest.raises(NoPeak, match=r"^no GPU$"):
        peak(None, "bf16")
    with pytest.raises(NoPeak, match=r"^unknown GPU 'NVIDIA GeForce GTX 1080'$"):
        peak("NVIDIA GeForce GTX 1080", "fp32")
    with pytest.raises(NoPeak, match="unknown GPU 'Radeon'"):
        peak("Radeon", "bf16")


def test_a_dtype_the_gpu_has_no_tensor_cores_for_has_no_peak() -> None:
    with pytest.raises(NoPeak, match="the V100 SXM2 has no bf16 peak"):
        peak("Tesla V100-SXM2-16GB", "bf16")
    with pytest.raises(NoPeak, match="the A100 has no fp8 peak"):
        peak("NVIDIA A100-SXM4-40GB", "fp8")
    with pytest.raises(NoPeak, match="no peak for dtype 'fp64'"):
        peak("NVIDIA H100 80GB HBM3", "fp64")


@pytest.mark.parametrize(
    "nvml_name",
    [
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "NVIDIA H100 80GB HBM3 MIG",  # a rank given an index of a GPU in MIG mode
        "MIG-4f1a8a0c-4b3a-5e8f-9a61-0c5b3e3f1d2a",  # a rank given a slice's UUID
    ],
)
def test_a_mig_slice_has_no_peak_since_its_share_is_not_known(nvml_name: str) -> None:
    with pytest.raises(NoPeak, match=r"MIG slice .*share of the GPU's peak is not known"):
        peak(nvml_name, "bf16")


def test_the_peak_says_what_it_is() -> None:
    assert str(peak("NVIDIA H100 80GB HBM3", "bf16")) == (
        "the H100 SXM's dense bf16 peak (989.5 TFLOP/s)"
    )
