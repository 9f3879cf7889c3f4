"""The environment of a rank: what ``torch.distributed.run`` gives its workers, and ours.

Lightning, Accelerate and the HF Trainer look for TORCHELASTIC_RUN_ID and friends to
decide that an elastic launcher already started the workers, so they do not spawn
processes of their own. Who submits from inside a job (``submitting_job``) makes a
child of it.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..perf import marks
from . import autoresume, guard_hook
from .node.rank_debugger import HOOK

#: The job a process without ``AIR_JOB_ID`` works for: a scheduled notebook's kernel
#: (whose cells must not look like ranks) sets it to its task's job.
PARENT_ENV = "AIR_PARENT_JOB_ID"


def submitting_job() -> str | None:
    """The job this process belongs to, if any: a rank's own, else the one it was
    started for."""
    return os.environ.get("AIR_JOB_ID") or os.environ.get(PARENT_ENV) or None


def job_free_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less what ties a process to a job: for one that outlives it and submits
    jobs of its own (the scheduler, started by whichever kernel scheduled first)."""
    return {k: v for k, v in env.items() if k not in ("AIR_JOB_ID", PARENT_ENV)}


@dataclass(frozen=True)
class RankPlace:
    """Where one rank sits in the job."""

    rank: int
    local_rank: int
    node_rank: int
    nproc_per_node: int
    nnodes: int

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


def rank_env(
    base: Mapping[str, str],
    place: RankPlace,
    *,
    master_addr: str,
    master_port: int,
    job_id: str,
    attempt: int,
    max_restarts: int,
    gpus: Sequence[str] | None,
    extra: Mapping[str, str] = {},
) -> dict[str, str]:
    """The full environment of one rank process."""
    env = dict(base)
    env.update(extra)
    env.update(
        {
            "RANK": str(place.rank),
            "LOCAL_RANK": str(place.local_rank),
            "GROUP_RANK": str(place.node_rank),
            "ROLE_RANK": str(place.rank),
            "ROLE_NAME": "default",
            "WORLD_SIZE": str(place.world_size),
            "LOCAL_WORLD_SIZE": str(place.nproc_per_node),
            "GROUP_WORLD_SIZE": str(place.nnodes),
            "ROLE_WORLD_SIZE": str(place.world_size),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "TORCHELASTIC_RUN_ID": job_id,
            "TORCHELASTIC_RESTART_COUNT": str(attempt - 1),
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
            # Rank 0 hosts the TCPStore itself: there is no launcher-side store.
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "AIR_JOB_ID": job_id,
            "AIR_ATTEMPT": str(attempt),
            "PYTHONUNBUFFERED": "1",
            # A native crash prints the Python frame it happened in (``death``).
            "PYTHONFAULTHANDLER": env.get("PYTHONFAULTHANDLER") or "1",
            # breakpoint() stops where the job is followed, or says why not (``debugger``)
            "PYTHONBREAKPOINT": env.get("PYTHONBREAKPOINT") or HOOK,
        }
    )
    if (
        place.nproc_per_node > 1
        and "OMP_NUM_THREADS" not in base
        and "OMP_NUM_THREADS" not in extra
    ):
        env["OMP_NUM_THREADS"] = "1"  # as torchrun: several ranks share the node's cores
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[place.local_rank % len(gpus)]
    # The HF Trainer and Lightning mark their steps (``perf.hooks``), resume by
    # themselves on a retry and answer the job's guards (``guard_hook``), with no change
    # to a script's code.
    if marks.enabled(env) or autoresume.wanted(env) or guard_hook.wanted(env):
        env["PYTHONPATH"] = autoresume.site_path(env)
    return env


def visible_gpus(base: Mapping[str, str], count: int) -> list[str]:
    """GPUs a job may use: the kernel's CUDA_VISIBLE_DEVICES if set, else all NVML sees."""
    configured = base.get("CUDA_VISIBLE_DEVICES")
    if configured is not None:
        return [g.strip() for g in configured.split(",") if g.strip() and g.strip() != "-1"]
    return [str(i) for i in range(count)]


#: Where MASTER_PORT is looked for: below the kernel's ephemeral ports.
PORT_FLOOR = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host``, for ranks to bind a moment later.

    torchrun asks the kernel for any free port (``bind(0)``), which comes from the
    ephemeral range: until the rank binds it, any process binding port 0 or opening an
    outgoing connection may take it (a busy machine then fails ``init_process_group``
    with EADDRINUSE). So it is looked for below that range, where nobody gets a port
    without asking for it; the ephemeral way only when that range is all taken."""
    low = _ephemeral_low()
    candidates = random.sample(range(PORT_FLOOR, low), min(64, max(0, low - PORT_FLOOR)))
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default, 32768, when
    unknown)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def inherited_env() -> dict[str, str]:
    """The kernel's environment minus what must not leak into ranks."""
    env = dict(os.environ)
    for name in ("MLFLOW_RUN_ID", "JPY_PARENT_PID", "JPY_SESSION_NAME", "PYDEVD_USE_FRAME_EVAL"):
        env.pop(name, None)
    return env


def gpu_count() -> int:
    """GPUs NVML sees on this machine (0 without a driver)."""
    from ..gpu.nvml import Nvml

    nvml = Nvml()
    try:
        return len(nvml.inventory())
    finally:
        nvml.shutdown()
