"""The Prometheus collector on the fake NVML driver, with jobs of two users; the usage
counters' arithmetic; the metrics token file's checks."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from jupyter_air.gpu.sampler import GpuSampler
from jupyter_air.identity import os_identity, os_user
from jupyter_air.jobs.service import JobService
from jupyter_air.jobs.store import JobStore
from jupyter_air.metrics.collector import EXPORTED, AirCollector
from jupyter_air.metrics.settings import AirMetrics, TokenError, bearer_matches, read_token
from jupyter_air.metrics.usage import GpuUsage, Holder
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario, h100_mig_slices
from tests.metrics.conftest import ENERGY_MJ, TwoUsers

ALICE = Holder("alice", "job-a", "")
BOB = Holder("bob", "job-b", "bob/tune.ipynb")


@pytest.fixture
def sampler() -> Iterator[GpuSampler]:
    made = GpuSampler(interval=3600.0)  # no thread: the tests sample when they say
    yield made
    made.stop()


def scrape(collector: AirCollector) -> list[Sample]:
    text = generate_latest(collector.registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def find(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s.name == name and labels.items() <= s.labels.items()]


def test_gpu_gauges_carry_dcgm_names_units_and_the_holder_of_each_gpu(
    scenario: WriteScenario, two_users: TwoUsers, store: JobStore, sampler: GpuSampler
) -> None:
    scenario(two_users.scenario())
    collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
    samples = scrape(collector)

    (util0,) = find(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert util0.value == 80
    assert util0.labels == {
        "gpu": "0",
        "UUID": "GPU-fa4e0000-0000-4000-8000-000000000000",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": socket.gethostname(),
        "GPU_I_ID": "",  # a whole GPU, not a MIG slice
        "GPU_I_PROFILE": "",
        "user": "alice",
        "air_job": two_users.alice_job,
        "notebook": "",
    }
    (bob_util,) = find(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="1")
    assert (bob_util.labels["user"], bob_util.labels["air_job"]) == ("bob", two_users.bob_job)
    assert bob_util.labels["notebook"] == "bob/tune.ipynb"
    (free,) = find(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="2")
    assert (free.labels["user"], free.labels["air_job"], free.labels["notebook"]) == ("", "", "")
    assert find(samples, "DCGM_FI_DEV_FB_USED", gpu="0")[0].value == 30 * 1024  # MiB
    assert find(samples, "DCGM_FI_DEV_FB_FREE", gpu="0")[0].value == 50 * 1024
    assert find(samples, "DCGM_FI_DEV_POWER_USAGE", gpu="0")[0].value == 400.0  # W
    assert find(samples, "DCGM_FI_DEV_GPU_TEMP", gpu="1")[0].value == 35  # C
    (energy,) = find(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")  # bob's GPU has none
    assert (energy.labels["gpu"], energy.labels["user"]) == ("0", "alice")
    assert energy.value in ENERGY_MJ  # mJ, the counter's latest reading
    assert {s.name for s in samples} <= EXPORTED
    jobs = {(s.labels["state"], s.labels["user"]): s.value for s in find(samples, "air_jobs")}
    assert jobs == {("PENDING", "alice"): 1, ("PENDING", "bob"): 1}


def test_a_mig_gpus_slices_have_memory_series_with_instance_labels_and_holders(
    scenario: WriteScenario, two_users: TwoUsers, store: JobStore, sampler: GpuSampler
) -> None:
    """An H100 in MIG mode with three slices, alice's job on the 3g.40gb one: as
    dcgm-exporter labels a MIG device's series (GPU_I_ID, GPU_I_PROFILE)."""
    mig = FakeGpu(mig=True, mig_devices=h100_mig_slices(two_users.pids[0]))
    scenario(Scenario(gpus=[mig]))
    collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
    samples = scrape(collector)

    (busy,) = find(samples, "DCGM_FI_DEV_FB_USED", GPU_I_PROFILE="3g.40gb")
    assert busy.value == 12 * 1024  # MiB
    assert busy.labels["GPU_I_ID"] == "1"
    assert (busy.labels["user"], busy.labels["air_job"]) == ("alice", two_users.alice_job)
    (free,) = find(samples, "DCGM_FI_DEV_FB_FREE", GPU_I_PROFILE="1g.10gb")
    assert free.value == 10 * 1024
    assert (free.labels["GPU_I_ID"], free.labels["user"]) == ("13", "")
    profiles = {s.labels["GPU_I_PROFILE"] for s in find(samples, "DCGM_FI_DEV_FB_USED")}
    assert profiles == {"3g.40gb", "2g.20gb", "1g.10gb"}  # the GPU's memory is theirs
    (whole,) = find(samples, "DCGM_FI_DEV_POWER_USAGE", GPU_I_ID="")
    assert whole.labels["user"] == "alice"  # the GPU is held by whoever holds a slice
    assert not find(samples, "DCGM_FI_DEV_GPU_UTIL")  # NVML has none for a MIG GPU


def test_gpu_seconds_are_charged_to_each_holder_and_idle_ones_counted(
    scenario: WriteScenario, two_users: TwoUsers, store: JobStore, sampler: GpuSampler
) -> None:
    scenario(two_users.scenario())
    collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
    first = scrape(collector)
    assert not find(first, "air_gpu_allocated_seconds_total"), "the past is nobody's"
    start = collector.usage.counted_until
    sampler.sample_now()
    sampler.sample_now()
    samples = scrape(collector)
    assert start is not None
    assert collector.usage.counted_until is not None
    held = collector.usage.counted_until - start

    def counter(name: str, user: str) -> float:
        (found,) = find(samples, name, user=user)
        return found.value

    assert counter("air_gpu_allocated_seconds_total", "alice") == pytest.approx(held)
    assert counter("air_gpu_idle_seconds_total", "alice") == 0  # at 80 %
    assert counter("air_gpu_allocated_seconds_total", "bob") == pytest.approx(held)
    assert counter("air_gpu_idle_seconds_total", "bob") == pytest.approx(held)  # at 0 %
    (bob,) = find(samples, "air_gpu_idle_seconds_total", user="bob")
    assert bob.labels == {
        "Hostname": socket.gethostname(),
        "user": "bob",
        "air_job": two_users.bob_job,
        "notebook": "bob/tune.ipynb",
    }


def test_a_job_the_viewer_may_not_see_shows_its_process_user_and_id_only(
    scenario: WriteScenario, two_users: TwoUsers, store: JobStore, sampler: GpuSampler
) -> None:
    scenario(two_users.scenario())
    stranger = JobService(store, os_identity().__class__("mallory"))
    samples = scrape(AirCollector(sampler, stranger, AirMetrics()))
    (bob,) = find(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="1")
    assert bob.labels["user"] == os_user()  # who runs the rank, not the job's owner
    assert bob.labels["air_job"] == two_users.bob_job
    assert bob.labels["notebook"] == ""  # nothing read from a job mallory may not view
    assert not find(samples, "air_jobs")


def test_a_gpu_that_comes_between_two_scrapes_has_its_series_and_its_holder(
    scenario: WriteScenario, two_users: TwoUsers, store: JobStore, sampler: GpuSampler
) -> None:
    """The collector keeps the sampler's GPUs between scrapes (their names and UUIDs are
    sent only when they change) and each process's job (read once in its life)."""
    gpus = two_users.scenario().gpus
    scenario(Scenario(gpus=gpus[:1]))
    collector = AirCollector(sampler, JobService(store, os_identity()), AirMetrics())
    assert [s.labels["gpu"] for s in find(scrape(collector), "DCGM_FI_DEV_GPU_UTIL")] == ["0"]
    scenario(Scenario(gpus=gpus))
    sampler.sample_now()
    utils = {s.labels["gpu"]: s.labels for s in find(scrape(collector), "DCGM_FI_DEV_GPU_UTIL")}
    assert sorted(utils) == ["0", "1", "2"]
    assert (utils["0"]["user"], utils["1"]["user"]) == ("alice", "bob")
    assert utils["2"]["modelName"] == "NVIDIA A100-SXM4-40GB"


def test_usage_splits_a_shared_gpu_caps_a_gap_and_counts_each_sample_once() -> None:
    usage = GpuUsage(idle_threshold=5.0, forget_after=3600.0)
    both = frozenset({ALICE, BOB})
    usage.charge([100.0], [[50.0]], [both], interval=10.0)  # starts the count only
    usage.charge([100.0, 110.0, 120.0], [[50.0, 50.0, 2.0]], [both], interval=10.0)
    usage.charge([120.0, 500.0], [[2.0, None]], [frozenset({ALICE})], interval=10.0)
    found = {u.holder: (u.allocated, u.idle) for u in usage.usages(now=500.0)}
    # 110 and 120 shared (5 s each of 10 s); 500 after a 380 s pause: one interval.
    assert found == {ALICE: (20.0, 5.0), BOB: (10.0, 5.0)}


def test_usage_forgets_a_holder_unseen_for_forget_after() -> None:
    usage = GpuUsage(idle_threshold=5.0, forget_after=60.0)
    usage.charge([0.0], [[90.0]], [frozenset({ALICE})], interval=10.0)
    usage.charge([10.0], [[90.0]], [frozenset({ALICE})], interval=10.0)
    assert [u.holder for u in usage.usages(now=70.0)] == [ALICE]
    assert list(usage.usages(now=70.1)) == []


def test_read_token_refuses_a_file_open_to_others_or_a_short_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("x" * 40)
    path.chmod(0o640)
    with pytest.raises(TokenError, match=r"open to others \(mode 640\): run `chmod 600"):
        read_token(path)
    path.chmod(0o600)
    assert read_token(path) == "x" * 40
    path.write_text("short\n")
    with pytest.raises(TokenError, match="5 characters, fewer than 32"):
        read_token(path)
    with pytest.raises(TokenError, match="No such file"):
        read_token(tmp_path / "absent")
    link = tmp_path / "link"
    os.symlink(path, link)
    with pytest.raises(TokenError):
        read_token(link)


def test_bearer_matches_the_exact_token_only() -> None:
    token = "t" * 40
    assert bearer_matches(f"Bearer {token}", token)
    assert bearer_matches(f"bearer {token}", token)
    assert not bearer_matches(f"token {token}", token)
    assert not bearer_matches(f"Bearer {token}x", token)
    assert not bearer_matches(f"Bearer {token[:-1]}", token)
    assert not bearer_matches(None, token)
    assert not bearer_matches("Bearer ", token)
