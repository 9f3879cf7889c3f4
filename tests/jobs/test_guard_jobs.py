"""A guard on a real job (issue 39, item 2): ``air run`` starts a real supervisor whose
rank logs a NaN loss at step 4,210 and trains on; the guard ``loss: nan -> notify, stop``
stops it within seconds, the job's outcome and its run say why, it is not retried, and
a real webhook receiver on loopback gets the guard's notification and the failure.
(``checkpoint`` with the HF Trainer and Lightning: tests/jobs/test_resume.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.paths import air_home
from jupyter_air.tracking.journal import read
from jupyter_air.tracking.targets import default_tracking_uri
from tests.air_cli import air
from tests.jobs import test_resume
from tests.notify_servers import WebhookReceiver
from tests.waits import until, wait_settled

#: A job with a supervisor and its rank.
pytestmark = pytest.mark.heavy

#: The resume tests' working directory per test, in the module's home (tests/homes.py).
workdir = test_resume.workdir

#: Steps 1 to 4,209 log a falling loss, 4,210 a NaN; the training goes on until stopped.
NAN_AT_4210 = """\
import math, time
from jupyter_air import log_metrics

for step in range(1, 4210):
    log_metrics({"loss": 1 / step}, step=step)
log_metrics({"loss": math.nan}, step=4210)
print("loss is nan, training on", flush=True)
for step in range(4211, 10**6):
    time.sleep(0.05)
    log_metrics({"loss": math.nan}, step=step)
"""


def test_a_nan_loss_stops_the_job_says_why_and_notifies_its_targets(workdir: Path) -> None:
    hook = WebhookReceiver().start()
    try:
        (workdir / "train.py").write_text(NAN_AT_4210)
        workload = {
            "experiment_name": "guards",
            "command": f"{sys.executable} train.py",
            "max_retries": 1,
            "notify": [{"webhook": hook.url, "on": ["failure"]}],
            "guard": ["loss: nan -> notify, stop", "loss: > 100 -> notify"],
        }
        (workdir / "w.yaml").write_text(json.dumps(workload))
        submitted = air("run", "-f", "w.yaml")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1]
        job = wait_settled(air_home(), job_id, timeout=180)
        until(lambda: len(hook.posts) >= 2, "the guard's and the failure's posts", 60)
    finally:
        hook.stop()

    why = "guard 'loss: nan' at step 4,210 (loss = nan)"
    store = JobStore(air_home())
    assert (job.status, job.message) == ("FAILED", why), air("logs", job_id).stdout
    (attempt,) = store.attempts(job_id)  # a stop is not retried
    assert attempt.message == why
    shown = air("get", job_id).stdout
    assert shown.startswith(f"Job {job_id}: FAILED ({why})"), shown
    assert "\n  guards:   loss: nan -> notify, stop; loss: > 100 -> notify\n" in shown

    titles = [post["title"] for post, _ in hook.posts]
    assert len(titles) == 2, titles
    assert titles[0].endswith(f"(python train.py): {why}"), "the guard's own notification"
    assert titles[1].endswith(f"(python train.py): failed: {why}"), "then the job's end"

    from mlflow.tracking import MlflowClient

    tags = MlflowClient(default_tracking_uri()).get_run(str(attempt.run_id)).data.tags
    assert tags["air.failure"] == why
    journal = store.attempt_dir(job_id, 1) / "metrics.jsonl"
    (nan_at,) = [
        p.timestamp / 1000
        for points, _ in read(journal, 0, 1 << 30)
        for p in points
        if p.step == 4210
    ]
    assert job.ended is not None
    assert job.ended - nan_at < 15, "stopped within seconds of the NaN (the bench: < 2 s)"
