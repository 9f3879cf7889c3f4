"""The environment contract of a rank: what torchrun gives its workers, and ours."""

from __future__ import annotations

from jupyter_air.jobs.env import RankPlace, rank_env, visible_gpus

TORCHRUN_VARIABLES = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
}  # fmt: skip


def env_of(
    place: RankPlace, base: dict[str, str] | None = None, **kwargs: object
) -> dict[str, str]:
    options: dict[str, object] = {
        "master_addr": "10.0.0.1",
        "master_port": 29511,
        "job_id": "20261129-083012-a1b2c3",
        "attempt": 2,
        "max_restarts": 3,
        "gpus": None,
    }
    options.update(kwargs)
    return rank_env(base or {"PATH": "/usr/bin"}, place, **options)  # type: ignore[arg-type]


def test_every_torchrun_variable_is_set_as_torchrun_sets_it() -> None:
    env = env_of(RankPlace(rank=5, local_rank=1, node_rank=1, nproc_per_node=4, nnodes=2))
    assert set(env) >= TORCHRUN_VARIABLES
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["ROLE_RANK"]) == (
        "5",
        "1",
        "1",
        "5",
    )
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("8", "4", "2")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29511")
    assert env["TORCHELASTIC_RUN_ID"] == "20261129-083012-a1b2c3"
    assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("1", "3")
    assert (env["AIR_JOB_ID"], env["AIR_ATTEMPT"]) == ("20261129-083012-a1b2c3", "2")
    assert env["PATH"] == "/usr/bin"


def test_omp_threads_is_one_when_ranks_share_a_node_and_the_user_set_none() -> None:
    shared = RankPlace(0, 0, 0, nproc_per_node=2, nnodes=1)
    assert env_of(shared)["OMP_NUM_THREADS"] == "1"
    assert env_of(shared, {"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8"
    assert "OMP_NUM_THREADS" not in env_of(RankPlace(0, 0, 0, nproc_per_node=1, nnodes=1))


def test_one_gpu_per_rank_from_the_visible_ones() -> None:
    place = RankPlace(rank=1, local_rank=1, node_rank=0, nproc_per_node=2, nnodes=1)
    assert env_of(place, gpus=["2", "5"])["CUDA_VISIBLE_DEVICES"] == "5"
    assert "CUDA_VISIBLE_DEVICES" not in env_of(place, gpus=[])


def test_visible_gpus_follow_the_kernels_cuda_visible_devices() -> None:
    assert visible_gpus({}, 2) == ["0", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}, 8) == ["3", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 8) == []
