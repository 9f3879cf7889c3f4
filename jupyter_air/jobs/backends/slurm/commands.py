"""The Slurm commands we run (``srun``, ``squeue``, ``scancel``, ``scontrol``), with
the environment each needs: only Slurm's own commands, so nothing to install on a
cluster that has them (no pyslurm to build against its exact Slurm version).

Outside an allocation every SLURM_* variable but ``SLURM_CONF`` is removed first: one
inherited from the notebook's own job (a server started by ``sbatch``) makes ``srun``
believe it runs in that job's allocation (submitit's "Invalid gres" and CPU-binding
reports). Inside one, they are what places the steps there.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

#: Seconds a query or a cancel may take: slurmctld answers in milliseconds when well.
COMMAND_TIMEOUT = 30.0
#: The variables that name an allocation this process runs in.
ALLOCATION_ENV = "SLURM_JOB_ID"
INSTALL_HINT = (
    "the Slurm commands (srun, squeue, scancel) are not on PATH here: run the notebook "
    "on a login node or in an allocation of the cluster"
)


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is what Slurm said, on one line."""


def clean_env(env: Mapping[str, str], *, keep_allocation: bool) -> dict[str, str]:
    """``env`` for a Slurm command: without the variables of an allocation this
    process inherited, unless it must run in that allocation."""
    if keep_allocation:
        return dict(env)
    return {k: v for k, v in env.items() if not _slurm_var(k) or k == "SLURM_CONF"}


def rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """A node agent's environment for its ranks: no SLURM_* (Lightning's
    ``SLURMEnvironment`` and submitit take any SLURM_NTASKS for their own launch), no
    PMI (MPI libraries would join Slurm's step); ``CUDA_VISIBLE_DEVICES`` stays."""
    return {k: v for k, v in env.items() if not (_slurm_var(k) or k.startswith(("PMI_", "PMIX_")))}


def _slurm_var(name: str) -> bool:
    return name.startswith(("SLURM_", "SLURMD_", "SBATCH_", "SALLOC_", "SRUN_"))


def allocation(env: Mapping[str, str]) -> str | None:
    """The job id of the allocation this process runs in, if any."""
    return env.get(ALLOCATION_ENV) or env.get("SLURM_JOBID") or None


def allocation_nodes(env: Mapping[str, str]) -> int:
    return int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1")


def require() -> None:
    if shutil.which("srun") is None:
        raise SlurmError(INSTALL_HINT)


def run(argv: list[str], env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT) -> str:
    """A Slurm command's output; ``SlurmError`` with its last error line if it fails."""
    try:
        done = subprocess.run(
            argv,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer in {timeout:g} s") from None
    except OSError as err:
        raise SlurmError(f"{argv[0]}: {err.strerror}") from None
    if done.returncode != 0:
        raise SlurmError(said(done.stderr) or f"{argv[0]} exited with {done.returncode}")
    return done.stdout


def said(output: str) -> str:
    """What Slurm's commands said last, on one line, without their ``srun: error:``."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    if not errors:
        return ""
    return re.sub(r"^(srun|sbatch|salloc|squeue|scancel): (error: )?", "", errors[-1])


def test_only(options: list[str], env: Mapping[str, str]) -> None:
    """Slurm's own check of a request, submitting nothing (``srun --test-only``)."""
    run(["srun", "--test-only", *options, "true"], env)


def controller(env: Mapping[str, str]) -> str:
    """slurmctld's address (``host:port``), from the cluster's configuration."""
    config = run(["scontrol", "show", "config"], env)
    host = re.search(r"^SlurmctldHost\[0\]\s*=\s*(\S+)", config, re.M)
    port = re.search(r"^SlurmctldPort\s*=\s*(\d+)", config, re.M)
    if host is None:
        raise SlurmError("scontrol show config names no SlurmctldHost")
    name = host.group(1)
    address = re.search(r"\((.+)\)$", name)  # host(address)
    return f"{address.group(1) if address else name}:{port.group(1) if port else 6817}"


@dataclass(frozen=True)
class QueueState:
    """A Slurm job as ``squeue`` shows it."""

    job_id: str
    state: str
    reason: str

    @property
    def waiting(self) -> bool:
        """Not running yet: queued, or its nodes still booting (CONFIGURING)."""
        return self.state in ("PENDING", "CONFIGURING")

    def line(self) -> str:
        """``PENDING (Resources), Slurm job 4242``: what the job's status says."""
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"{self.state}{why}, Slurm job {self.job_id}"


def queue_state(name: str, env: Mapping[str, str]) -> QueueState | None:
    """The user's Slurm job of this name, as squeue shows it now; None if it has none."""
    user = pwd.getpwuid(os.getuid()).pw_name  # not $USER: a spawner may leave another's
    out = run(["squeue", "-h", "-u", user, "-n", name, "-o", "%i|%T|%r"], env)
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            return QueueState(*parts)
    return None


#: Node states (``sinfo``'s, lower case) in which Slurm took a node from its jobs or
#: keeps new ones off it: a job of such a node was ended by it, or will be.
LOST_STATES = ("down", "drain", "fail", "maint", "reboot", "power_down", "powering_down")
#: What ``sinfo`` appends to a state: ``*`` not responding, the rest power and reboot.
STATE_FLAGS = "*~#!%$@^-"


@dataclass(frozen=True)
class NodeState:
    """A node as ``sinfo`` shows it: ``down*``, ``Not responding``."""

    name: str
    state: str
    reason: str

    @property
    def taken(self) -> bool:
        """Slurm took the node away (down, drained, failing, ...)."""
        return self.state.rstrip(STATE_FLAGS).startswith(LOST_STATES)

    @property
    def silent(self) -> bool:
        """The node's slurmd does not answer slurmctld (Slurm's ``*``)."""
        return "*" in self.state

    def words(self) -> str:
        """``down: bad gpu``; ``mixed, not responding``."""
        said = self.state.rstrip(STATE_FLAGS)
        if self.silent and "not responding" not in self.reason.lower():
            said += ", not responding"
        return f"{said}: {self.reason}" if self.reason else said


def node_states(nodes: list[str], env: Mapping[str, str], timeout: float) -> dict[str, NodeState]:
    """The nodes' states and Slurm's reasons, as ``sinfo`` shows them now."""
    out = run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E"], env, timeout)
    found: dict[str, NodeState] = {}
    for line in out.splitlines():
        name, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if name and state:  # a node in several partitions is listed once for each
            found.setdefault(
                name, NodeState(name, state.lower(), "" if reason == "none" else reason)
            )
    return found


#: Job states in which Slurm itself ended a job, and the reasons that say so while it
#: is still completing (``scontrol`` then shows COMPLETING).
ENDED_STATES = ("CANCELLED", "PREEMPTED", "TIMEOUT", "DEADLINE", "NODE_FAIL", "BOOT_FAIL")
ENDED_REASONS = {"TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL", "Deadline": "DEADLINE"}


def ended_job(job_id: str, env: Mapping[str, str], timeout: float) -> str | None:
    """How Slurm ended the job, in its words (``PREEMPTED``, ``NODE_FAIL (NodeDown)``),
    or None while it runs or when it ended by itself."""
    out = run(["scontrol", "-o", "show", "job", job_id], env, timeout)
    state = re.search(r"\bJobState=(\S+)", out)
    why = re.search(r"\bReason=(\S+)", out)
    reason = why.group(1) if why and why.group(1) != "None" else None
    name = state.group(1) if state else None
    if name not in ENDED_STATES:
        name = ENDED_REASONS.get(reason or "")
    if name is None:
        return None
    return f"{name} ({reason})" if reason else name


#: What slurmstepd writes to a step's output as it ends it: ``*** STEP 42.0 ON gpu-1
#: CANCELLED AT 2026-12-06T00:56:14 DUE TO PREEMPTION ***`` (no DUE TO for ``scancel``).
_STEP_CANCELLED = re.compile(
    r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z][A-Z ]*[A-Z]))?"
)


def step_cancelled(output: str) -> str | None:
    """Why Slurm cancelled the step, as its slurmstepd said in the step's output
    (``CANCELLED due to preemption``); None if it did not say."""
    said = list(_STEP_CANCELLED.finditer(output))
    if not said:
        return None
    why = said[-1].group("why")
    return f"CANCELLED due to {why.lower()}" if why else "CANCELLED"


def cancel(target: str, env: Mapping[str, str]) -> None:
    """``scancel`` a job or a step (``4242.1``); one already gone is no error."""
    try:
        run(["scancel", target], env)
    except SlurmError as err:
        if "invalid job id" not in str(err).lower():
            raise
