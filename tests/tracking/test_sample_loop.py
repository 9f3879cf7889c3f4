"""A node's sample loop (``tracking.sampling.SampleLoop``) as the charts read it."""

from __future__ import annotations

import time

from jupyter_air.tracking.sampling import Sample, SampleLoop
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
