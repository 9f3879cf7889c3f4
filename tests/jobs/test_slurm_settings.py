"""The slurm backend without a cluster: its settings as Slurm's options, the
environment each process gets, and Slurm's words read back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jupyter_air.jobs.backends.settings import checked, from_pairs
from jupyter_air.jobs.backends.slurm import SlurmBackend
from jupyter_air.jobs.backends.slurm.commands import (
    QueueState,
    allocation,
    clean_env,
    rank_env,
    said,
)
from jupyter_air.jobs.backends.slurm.settings import SlurmSettings
from jupyter_air.jobs.workload_file import Submission

INHERITED = {
    "PATH": "/usr/bin",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "SLURM_JOB_ID": "4242",
    "SLURM_NTASKS": "8",
    "SLURMD_NODENAME": "gpu-12",
    "SBATCH_PARTITION": "gpu",
    "PMI_RANK": "0",
    "CUDA_VISIBLE_DEVICES": "2,3",
}


def test_each_setting_is_the_srun_option_of_its_name_and_cpus_are_per_rank() -> None:
    settings = SlurmSettings.model_validate(
        {"partition": "gpu", "time": "2:00:00", "gpus_per_node": 4, "cpus_per_task": 8,
         "mem": "64G", "constraint": "a100&ib", "args": "--exclusive --comment='air job'"}
    )  # fmt: skip
    assert settings.srun_args(nproc_per_node=4) == [
        "--partition=gpu",
        "--time=2:00:00",
        "--gpus-per-node=4",
        "--mem=64G",
        "--constraint=a100&ib",
        "--cpus-per-task=32",  # the node's one task holds its 4 ranks
        "--exclusive",
        "--comment=air job",
    ]
    assert SlurmSettings().srun_args(nproc_per_node=2) == ["--cpus-per-task=2"]
    as_yaml_reads_it = SlurmSettings.model_validate({"time": 30, "gpus_per_node": 2})
    assert as_yaml_reads_it.srun_args(1)[:2] == ["--time=30", "--gpus-per-node=2"]


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"args": ["--nodes=3"]}, "--nodes is set by jupyter_air"),
        ({"args": ["-N3"]}, "-N is set by jupyter_air"),
        ({"args": ["--job-name=x"]}, "--job-name is set by jupyter_air"),
        ({"args": ["--expo=NONE"]}, r"--expo \(--export\) is set by jupyter_air"),
        ({"args": ["exclusive"]}, "is not an option"),
        ({"partition": "gpu --qos=high"}, "should match pattern"),
        ({"cpus_per_task": 0}, "greater than or equal to 1"),
        ({"partiton": "gpu"}, "Extra inputs are not permitted"),
    ],
)
def test_settings_that_would_change_the_job_s_shape_or_smuggle_options_are_refused(
    fields: dict[str, object], refused: str
) -> None:
    with pytest.raises(ValidationError, match=refused):
        SlurmSettings.model_validate(fields)


def test_the_magic_s_pairs_become_settings() -> None:
    pairs = ["partition=gpu", "gpus-per-node=2", "cpus_per_task=4", "args=--exclusive",
             "args=--comment=x", "new_allocation=true"]  # fmt: skip
    assert checked(SlurmBackend(), from_pairs("--slurm", pairs, SlurmSettings)) == {
        "partition": "gpu", "gpus_per_node": "2", "cpus_per_task": 4,
        "args": ["--exclusive", "--comment=x"], "new_allocation": True}  # fmt: skip
    with pytest.raises(ValueError, match="--slurm 'gpu': expected KEY=VALUE"):
        from_pairs("--slurm", ["gpu"], SlurmSettings)


def test_a_workload_file_s_slurm_block_is_for_the_slurm_backend_only() -> None:
    submission = Submission.model_validate(
        {"backend": "slurm", "compute": {"nnodes": 2}, "slurm": {"partition": "gpu"}}
    )
    assert submission.backend_settings == {"partition": "gpu"}
    with pytest.raises(ValidationError, match="slurm is for 'backend: slurm'"):
        Submission.model_validate({"backend": "local", "slurm": {"partition": "gpu"}})


def test_outside_an_allocation_srun_sees_no_inherited_slurm_variable_but_the_config() -> None:
    assert clean_env(INHERITED, keep_allocation=False) == {
        "PATH": "/usr/bin",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "PMI_RANK": "0",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }
    assert clean_env(INHERITED, keep_allocation=True) == INHERITED
    assert allocation(INHERITED) == "4242"
    assert allocation({"PATH": "/usr/bin"}) is None


def test_ranks_see_no_slurm_or_pmi_variable_and_keep_their_gpus() -> None:
    assert rank_env(INHERITED) == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "2,3"}


def test_slurm_s_last_error_is_said_in_one_line_without_the_command_s_prefix() -> None:
    output = (
        "srun: job 12 queued and waiting for resources\n"
        "srun: error: invalid partition specified: nope\n"
        "allocation failure: Invalid partition name specified\n"
    )
    assert said(output) == "invalid partition specified: nope"
    assert (
        said("srun: Job allocation 12 has been revoked\n") == "Job allocation 12 has been revoked"
    )
    assert said("") == ""


def test_the_queue_s_word_names_the_reason_and_the_slurm_job() -> None:
    assert (
        QueueState("4242", "PENDING", "Resources").line() == "PENDING (Resources), Slurm job 4242"
    )
    assert QueueState("7", "PENDING", "None").line() == "PENDING, Slurm job 7"
    assert QueueState("7", "PENDING", "Priority").waiting
    assert QueueState("7", "CONFIGURING", "None").waiting, "nodes still booting"
    assert not QueueState("7", "RUNNING", "None").waiting
