"""A node's samples (``tracking.sampling.SampleLoop``, and the one a run's tail takes
for a short job) as the charts read them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jupyter_air.job_dir import AttemptDir
from jupyter_air.tracking import journal
from jupyter_air.tracking.sampling import CPU_PERCENT, Sample, SampleLoop
from jupyter_air.tracking.system_metrics import last_sample
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario
from tests.waits import until


def test_the_first_sample_gives_the_cpu_since_the_loop_started_not_psutils_zero(
    scenario: WriteScenario,
) -> None:
    """psutil's first ``cpu_percent()`` on a thread has nothing to compare with and says
    0.0: the cell's CPU chart began at 0 % whatever the job did."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    samples: list[Sample] = []
    loop = SampleLoop(3600, samples.append)
    loop.start()
    try:
        busy = time.process_time() + 0.3  # the job's work: CPU the first sample must show
        while time.process_time() < busy:
            pass
        loop.sample_now()
        until(lambda: samples, "a first sample (it loads MLflow's monitors)")
    finally:
        loop.finish(last=False)
    assert samples[0].metrics["cpu_utilization_percentage"] > 0.0


def test_a_short_jobs_sample_taken_after_it_has_no_cpu_figure(
    scenario: WriteScenario, tmp_path: Path
) -> None:
    """The run's tail samples a job that ended before its first sample, from a process that
    started after it: its CPU % would be psutil's meaningless first 0.0, not the job's."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    files = AttemptDir(tmp_path).make()
    last_sample(files, "run")
    ((points, _),) = journal.read(files.metrics_journal, 0)
    keys = {point.key for point in points}
    assert "system/cpu_utilization_percentage" not in keys
    assert {"system/system_memory_usage_percentage", "system/gpu_0_utilization_percentage"} <= keys


def nice() -> int:
    """The calling thread's nice value (a Linux thread has its own)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_loop_samples_at_the_lowest_priority_and_never_lowers_a_caller_s_thread(
    scenario: WriteScenario,
) -> None:
    """The supervisor's thread that takes a sample itself (a job that ended before the
    loop's first) starts the next attempt's ranks: they would inherit a lowered nice."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    mine = nice()
    taken_at: list[int] = []
    loop = SampleLoop(3600, lambda sample: taken_at.append(nice()))
    loop.take()  # on this thread: it loads the sampler here
    assert (taken_at, nice()) == ([mine], mine)
    loop.start()
    try:
        loop.sample_now()
        until(lambda: len(taken_at) == 2, "a sample on the loop's thread")
    finally:
        loop.finish(last=False)
    assert taken_at[1] == 19
    assert nice() == mine


def burn_cpu(seconds: float) -> None:
    """The job's work: CPU a sample must show."""
    until_then = time.process_time() + seconds
    while time.process_time() < until_then:
        pass


def test_the_last_sample_gives_the_cpu_since_the_one_before(scenario: WriteScenario) -> None:
    """The last sample, taken as the job ends, is read on the loop's thread: on another,
    psutil compares with nothing and says 0.0 (the chart's end point fell to 0 %)."""
    scenario(Scenario(gpus=[FakeGpu(util=40)]))
    samples: list[Sample] = []
    loop = SampleLoop(3600, samples.append)
    loop.start()
    loop.sample_now()
    until(lambda: samples, "a first sample (it loads MLflow's monitors)")
    burn_cpu(0.3)
    ending = threading.Thread(target=loop.finish)  # as the supervisor's, which reads no CPU
    ending.start()
    ending.join()
    assert [s.step for s in samples] == [0, 1]
    assert samples[1].metrics[CPU_PERCENT] > 0.0
