"""What one node of an attempt runs, and the ranks it makes of it: one place for every
backend (the local backend's in-process node and each cluster node's agent)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ...job_dir import JobDir
from ..env import RankPlace, gpu_count, inherited_env, rank_env, visible_gpus
from . import flight_recorder

RANK_MAIN = "jupyter_air.jobs.node.rank_main"


@dataclass
class RankSpec:
    """One rank as a process: its command, environment, log file and directory."""

    rank: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: str | None = None


@dataclass
class NodeLaunch:
    """What one node runs; everything else comes from the node itself."""

    job_id: str
    attempt: int
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    max_restarts: int
    #: The user's ``--env`` and the run's MLFLOW_* variables.
    env: dict[str, str]
    #: argv of a command workload; empty for a pickled cell or function (its payload
    #: file in the node's job directory).
    command: list[str] = field(default_factory=list)
    #: The pickled cell or function, for a node that may not see the job's directory.
    payload: bytes | None = None
    working_dir: str | None = None
    #: Each local rank's device, as its ``CUDA_VISIBLE_DEVICES`` (a MIG slice's UUID),
    #: where the job was placed on MIG slices; None: this node's visible GPUs by local rank.
    gpus: list[str] | None = None


def rank_argv(launch: NodeLaunch, files: JobDir) -> list[str]:
    """The command of every rank of the node: the workload's, or ``rank_main`` on the
    pickled cell, in this interpreter (the kernel's, the venv's)."""
    if launch.command:
        return list(launch.command)
    attempt = files.attempt(launch.attempt).path
    return [sys.executable, "-u", "-m", RANK_MAIN, str(files.payload), str(attempt)]


def in_this_python(command: list[str]) -> list[str]:
    """A command that runs one of this package's modules (``python -u -m jupyter_air.…``:
    a warm session's rank), in this node's interpreter: the submitter's may not exist
    here, and this node has the same version of the package (its agent said so)."""
    module = command[3] if command[1:3] == ["-u", "-m"] and len(command) > 3 else ""
    if module.split(".")[0] != "jupyter_air":
        return command
    return [sys.executable, *command[1:]]


def node_specs(
    launch: NodeLaunch, files: JobDir, *, cwd: str | None, ray_actor: bool = False
) -> list[RankSpec]:
    """The ranks of one node: global ranks ``node_rank * nproc_per_node + local_rank``,
    logging into ``files``' attempt directory, with this machine's GPUs (or the slices
    the job was placed on)."""
    base_env = inherited_env()
    if ray_actor:
        # Ray sets OMP_NUM_THREADS to the actor's CPUs (all of the node's ranks): the
        # ranks get torchrun's default instead (1 when several share the node).
        base_env.pop("OMP_NUM_THREADS", None)
        # Ray makes every worker's breakpoint() its remote pdb, which waits for `ray debug`
        # (the actor's, not the user's choice): the ranks' stops in the cell instead.
        base_env.pop("PYTHONBREAKPOINT", None)
    argv = rank_argv(launch, files)
    attempt = files.attempt(launch.attempt)
    gpus = launch.gpus if launch.gpus is not None else visible_gpus(os.environ, gpu_count())
    specs = []
    for local_rank in range(launch.nproc_per_node):
        place = RankPlace(
            launch.node_rank * launch.nproc_per_node + local_rank,
            local_rank,
            launch.node_rank,
            launch.nproc_per_node,
            launch.nnodes,
        )
        env = rank_env(
            base_env,
            place,
            master_addr=launch.master_addr,
            master_port=launch.master_port,
            job_id=launch.job_id,
            attempt=launch.attempt,
            max_restarts=launch.max_restarts,
            gpus=gpus,
            extra=launch.env,
        )
        env.pop("MLFLOW_EXPERIMENT_NAME", None)  # MLFLOW_EXPERIMENT_ID names the experiment
        env.update(flight_recorder.rank_env(env, attempt.flight))  # read when a job hangs
        log = attempt.rank_log(launch.node_rank, place.rank)
        specs.append(RankSpec(place.rank, argv, env, log, cwd))
    return specs
