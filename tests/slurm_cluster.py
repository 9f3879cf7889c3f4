"""A real Slurm cluster on this machine for the tests: one ``slurmctld`` and two
``slurmd`` (named apart with ``-N``), loopback only, everything under one temporary
directory, with a ``munged`` of its own (its own socket and key). Debian's
``slurm-wlm`` and ``munge`` (scripts/install-system-deps.sh). Up in about a second.

The commands find it through ``SLURM_CONF``; ``SlurmCluster.env`` is what a test passes
to a process (the kernel, a supervisor) that must reach it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from jupyter_air.jobs.backends.slurm.agent import MAIN
from jupyter_air.jobs.env import free_port
from tests.waits import log_tail, until

NODES = ("air-n1", "air-n2")
#: CPUs each simulated node declares (more than this machine has: the tests ask for
#: allocations, not for cycles).
CPUS = 4


def available() -> bool:
    return all(shutil.which(c) for c in ("munged", "slurmctld", "slurmd", "srun", "squeue"))


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: Each node's ``slurmd``, by node name (also in ``processes``).
    slurmd: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return subprocess.run(
            argv, env={**env, **self.env}, capture_output=True, text=True, check=check, timeout=60
        )

    def start(self, *argv: str) -> subprocess.Popen[bytes]:
        """A Slurm command against this cluster, left running (a job that holds nodes)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return subprocess.Popen(
            argv,
            env={**env, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def queue(self) -> list[str]:
        """The jobs Slurm has, as ``ID|STATE|NAME|REASON`` lines."""
        out = self.run("squeue", "-h", "-o", "%i|%T|%j|%r").stdout
        return [line for line in out.splitlines() if line.strip()]

    def node_state(self, node: str) -> str:
        """``idle``, ``down*``, ...: as ``sinfo`` shows it (once, though the node may be in
        several partitions)."""
        out = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").stdout.split()
        return out[0] if out else ""

    def kill_slurmd(self, node: str) -> None:
        """The node's ``slurmd`` killed outright, as when its host stops answering; what
        it started (a job's ``slurmstepd`` and tasks) runs on."""
        slurmd = self.slurmd[node]
        slurmd.kill()
        slurmd.wait()

    def start_slurmd(self, node: str) -> None:
        """The node's ``slurmd`` started again (after ``kill_slurmd``)."""
        self.slurmd[node] = self._daemon(["slurmd", "-D", "-N", node])

    def _daemon(self, argv: list[str]) -> subprocess.Popen[bytes]:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, **self.env}
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        self.processes.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        self.run("scancel", "--user", getpass.getuser(), check=False)
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._end_step_daemons()

    def _end_step_daemons(self) -> None:
        """The ``slurmstepd`` of a job step whose ``slurmd`` was killed (``kill_slurmd``)
        waits for it for ever: it goes with the cluster. (It rewrites its command line
        over its environment's start: the environment is read raw.)"""
        ours = f"SLURM_CONF={self.conf}".encode()
        found = []
        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"].startswith("slurmstepd") and ours in Path(
                    f"/proc/{proc.pid}/environ"
                ).read_bytes().split(b"\0"):
                    found.append(proc)
            except (psutil.Error, OSError):
                continue
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(found, timeout=10)


def _config(root: Path, user: str, ports: dict[str, int], changed: Mapping[str, str]) -> str:
    nodes = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[n]} "
        f"CPUs={CPUS} RealMemory=2000 State=UNKNOWN"
        for n in NODES
    )
    config = f"""\
ClusterName=air
MessageTimeout=10
MailProg=/bin/true
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports["ctld"]}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=1
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=2
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
PartitionName=small Nodes={NODES[0]} MaxTime=10 State=UP
"""
    for key, value in changed.items():
        config, found = re.subn(rf"^{key}=.*$", f"{key}={value}", config, flags=re.M)
        if not found:
            raise KeyError(f"no {key} in the test cluster's slurm.conf to change")
    return config


@contextmanager
def slurm_cluster(
    root: Path, timeout: float = 60.0, changed: Mapping[str, str] | None = None
) -> Iterator[SlurmCluster]:
    """Start the cluster under ``root``; stop it (and cancel every job) on exit.
    ``changed``: settings of slurm.conf given other values (``SlurmdTimeout``, to see a
    silent node set DOWN sooner), for a module that starts a cluster of its own."""
    user = getpass.getuser()
    for sub in ("munge", "state", "run", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ports = {"ctld": free_port("127.0.0.1"), **{n: free_port("127.0.0.1") for n in NODES}}
    conf = root / "slurm.conf"
    conf.write_text(_config(root, user, ports, changed or {}))
    cluster = SlurmCluster(root, conf)
    munge = root / "munge"
    cluster._daemon(
        [
            "munged", "--foreground", "--force",
            f"--socket={munge}/munge.sock", f"--key-file={key}",
            f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
            f"--seed-file={munge}/munged.seed",
        ]
    )  # fmt: skip
    try:
        until(
            lambda: (munge / "munge.sock").exists(),
            "the test Slurm cluster's munged socket",
            timeout,
            step=0.1,
            seen=lambda: log_tail(munge / "munged.log"),
        )
        cluster._daemon(["slurmctld", "-D", "-i"])
        for node in NODES:
            cluster.start_slurmd(node)
        until(
            lambda: _idle(cluster),
            "both nodes of the test Slurm cluster idle",
            timeout,
            step=0.1,
            seen=lambda: (_states(cluster), cluster.log("slurmctld.log")[-3000:]),
        )
        yield cluster
    finally:
        cluster.stop()


def _states(cluster: SlurmCluster) -> dict[str, str]:
    result = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
    return dict(line.split() for line in result.stdout.splitlines() if line.strip())


def _idle(cluster: SlurmCluster) -> bool:
    states = _states(cluster)
    return all(states.get(n) == "idle" for n in NODES)


def agents_of(job_id: str) -> list[psutil.Process]:
    """The node agents (the ``srun`` tasks) of job ``job_id``'s first attempt still running
    on this machine, on either node: not those of another test's cluster."""
    name = f"air-{job_id}-1"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if MAIN in " ".join(proc.info["cmdline"] or []) and (
                proc.environ().get("SLURM_JOB_NAME") == name and proc.status() != "zombie"
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found
