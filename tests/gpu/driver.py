"""Whether a real NVIDIA driver answers here: asked in a fresh interpreter, so that this
process never loads NVML (the fake is loaded in-process by other tests, and one process
holds one ``libnvidia-ml.so.1``)."""

from __future__ import annotations

import functools
import subprocess
import sys

PROBE = """
import pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as err:
    print("NVML:", err)
else:
    if hasattr(pynvml.nvmlLib, "fake_nvml_call_count"):
        print("the NVML library found is the fake of tests/fake_nvml")
    elif pynvml.nvmlDeviceGetCount() == 0:
        print("NVML reports no GPU")
"""


@functools.cache
def no_real_driver() -> str | None:
    """None when a real driver with a GPU answers; else why not, in one line."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        return f"probing NVML failed: {proc.stderr.strip().splitlines()[-1:]}"
    return proc.stdout.strip() or None
