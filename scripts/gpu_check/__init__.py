"""The real-GPU check kit (``scripts/gpu-check``): every GPU-facing claim of jupyter_air
checked against a real NVIDIA driver in one short run, with one report.

Run on a machine with an NVIDIA GPU and a CUDA build of PyTorch; on a machine without
one (the fake NVML driver of tests/fake_nvml, a CPU torch) the same run goes end to
end, and what needs a GPU is reported as skipped, by name. docs/gpu-check.md says how.
"""
