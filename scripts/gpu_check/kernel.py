"""Step 3's notebook side: a real IPython kernel (jupyter_client), as JupyterLab runs
one, with jupyter_air loaded, and the cells the kit runs in it."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client.manager import start_new_kernel

#: The job's cell: one rank that joins an NCCL group (gloo without CUDA), all-reduces,
#: holds ``hold_mib`` of GPU memory and multiplies matrices until the kit writes
#: ``stop``, so that NVML, nvidia-smi, the sampler and MLflow all see a busy GPU.
LOAD_CELL = """%%air_distributed -n 1 --run-name air-gpu-check --env AIR_GPU_CHECK_DIR={dir}
import json, os, time
import torch, torch.distributed as dist

check_dir = os.environ["AIR_GPU_CHECK_DIR"]
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
ones = torch.ones(4, device=device) * (dist.get_rank() + 1)
dist.all_reduce(ones)
held = torch.ones({hold_mib} * 2**20, dtype=torch.uint8, device=device) if cuda else None
a = torch.randn(({side}, {side}), device=device)
ready = {{
    "pid": os.getpid(), "job": os.environ["AIR_JOB_ID"], "run_id": os.environ["MLFLOW_RUN_ID"],
    "backend": dist.get_backend(), "all_reduce": ones.tolist(), "cuda": cuda,
    "torch": torch.__version__, "torch_cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name(device) if cuda else None,
    "capability": list(torch.cuda.get_device_capability(device)) if cuda else None,
    "held_mib": {hold_mib} if cuda else 0,
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
}}
with open(os.path.join(check_dir, "ready.tmp"), "w") as f:
    json.dump(ready, f)
os.replace(os.path.join(check_dir, "ready.tmp"), os.path.join(check_dir, "ready.json"))
steps, deadline = 0, time.monotonic() + {limit}
while not os.path.exists(os.path.join(check_dir, "stop")) and time.monotonic() < deadline:
    b = a @ a
    steps += 1
    if cuda and steps % 20 == 0:
        torch.cuda.synchronize()
    elif not cuda:
        time.sleep(0.05)  # a CPU run keeps the shared cores free
dist.destroy_process_group()
stopped = os.path.exists(os.path.join(check_dir, "stop"))
{{"backend": ready["backend"], "steps": steps, "stopped": stopped}}
"""

#: More ranks than the machine has GPUs, without --oversubscribe: must be refused.
TOO_MANY_RANKS_CELL = "%%air_distributed -n {n}\nprint('this rank must never start')\n"


@dataclass
class Execution:
    text: str = ""
    result: str | None = None
    error: dict[str, Any] | None = None
    finished: bool = False


class Kernel:
    """One kernel, started with ``env`` in ``cwd``; ``start`` a cell, ``collect`` it."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.manager, self.client = start_new_kernel(
            startup_timeout=120, kernel_name="python3", env=env, cwd=str(cwd)
        )

    def start(self, code: str) -> str:
        return str(self.client.execute(code))

    def collect(self, msg_id: str, timeout: float, into: Execution | None = None) -> Execution:
        """The cell's output until it is done, or what came before ``timeout`` (added to
        ``into``, to follow a running cell a little at a time)."""
        out = into or Execution()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.client.get_iopub_msg(timeout=left)
            except queue.Empty:
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.text += content["text"]
            elif kind in ("display_data", "update_display_data"):
                out.text += content["data"].get("text/plain", "") + "\n"
            elif kind == "execute_result":
                out.result = content["data"].get("text/plain")
            elif kind == "error":
                out.error = {"ename": content["ename"], "evalue": content["evalue"]}
            elif kind == "status" and content["execution_state"] == "idle":
                out.finished = True
                break
        return out

    def run(self, code: str, timeout: float) -> Execution:
        return self.collect(self.start(code), timeout)

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
