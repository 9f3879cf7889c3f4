"""A job's and a schedule run's notifications, end to end: ``air run`` and a scheduler
start real supervisors, whose messages reach a real SMTP server (STARTTLS, login) and a
real webhook receiver on loopback; both are stopped mid-way to see the retries, the
account ``air get`` gives, and that nothing is sent twice."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.supervision.notifier import JobNotifier
from jupyter_air.notify.outbox import State
from jupyter_air.schedules.notices import post_runs
from jupyter_air.schedules.scheduler import stop
from jupyter_air.schedules.store import ScheduleStore
from jupyter_air.status import Outcome
from tests.air_cli import air
from tests.mlflow_store import fresh_store
from tests.notify_servers import SmtpServer, WebhookReceiver, self_signed
from tests.waits import until, wait_settled

#: Every test runs jobs (a supervisor and ranks each): left to make test.
pytestmark = pytest.mark.heavy

TRAIN = """
import os, sys, time
rank, attempt = os.environ["RANK"], os.environ["AIR_ATTEMPT"]
print(f"rank {rank} attempt {attempt} step 1 loss 0.9", flush=True)
time.sleep(float(os.environ.get("PAUSE", "0")))
while os.environ.get("GATE") and not os.path.exists(os.environ["GATE"]):
    time.sleep(0.1)  # held until the test opens the gate
if rank == "1" and int(attempt) <= int(os.environ.get("FAILING_ATTEMPTS", "0")):
    print("rank 1: loss is nan, giving up", flush=True)
    sys.exit(3)
"""


@pytest.fixture
def workdir(tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", fresh_store(mlflow_template, tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server here
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("AIR_LAB_URL", "https://hub.example.com/user/ada/")
    monkeypatch.setenv("AIR_NOTIFY_RETRY", "1")  # the courier's first retry after 1 s
    monkeypatch.chdir(tmp_path)
    return tmp_path


def workload(
    workdir: Path,
    notify: list[dict[str, Any]],
    failing: int = 1,
    retries: int = 0,
    pause: float = 0.0,
    gate: Path | None = None,
) -> Path:
    path = workdir / "w.yaml"
    doc = {
        "experiment_name": "notify-test",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
        "max_retries": retries,
        "env": {
            "FAILING_ATTEMPTS": str(failing),
            "PAUSE": str(pause),
            **({"GATE": str(gate)} if gate else {}),
        },
        "notify": notify,
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def run_job(path: Path) -> str:
    submitted = air("run", "-f", str(path))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    wait_settled(Path.cwd() / "air", job_id)
    return job_id


def test_a_failed_job_is_mailed_and_posted_once_with_its_last_lines_and_links(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(workdir)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    (workdir / "pw").write_text("s3cret\n")
    smtp = SmtpServer(tls=(cert, key), login=("ada", "s3cret")).start()
    hook = WebhookReceiver().start()
    monkeypatch.setenv("AIR_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("AIR_SMTP_PORT", str(smtp.port))
    monkeypatch.setenv("AIR_SMTP_USER", "ada")
    monkeypatch.setenv("AIR_SMTP_PASSWORD_FILE", str(workdir / "pw"))
    try:
        job_id = run_job(
            workload(
                workdir,
                [
                    {"email": "ada@example.com", "on": ["failure"]},
                    {"webhook": hook.url, "on": ["failure", "success"]},
                    {"jupyterlab": True, "on": ["failure"]},
                ],
            )
        )
        until(lambda: smtp.mails and hook.posts, "the mail and the webhook")
        (mail,) = smtp.mails
        assert mail["Subject"].strip().startswith(f"air job {job_id} (")
        assert "failed: rank 1 exited with code 3" in mail["Subject"]
        body = mail.get_content()
        assert "rank 1: loss is nan, giving up" in body, "the failing rank's last lines"
        assert f"Logs: https://hub.example.com/user/ada/lab?air-job={job_id}" in body
        assert f"In a terminal: air logs {job_id}" in body
        ((post, headers),) = hook.posts
        assert post["event"] == "failure"
        assert post["job_id"] == job_id
        assert post["lines"][-1] == "rank 1: loss is nan, giving up"
        assert headers["Idempotency-Key"] == f"job:{job_id}:end#1"

        store = JobStore(workdir / "air")
        (lab,) = store.outbox.for_lab(store.get(job_id).owner, 0)
        assert lab.message.title == post["title"]
        shown = air("get", job_id)
        assert "notified: email to ada@example.com (failure): sent" in shown.stdout
        assert "notified: webhook http://127.0.0.1/… (failure): sent" in shown.stdout
        assert "SECRET" not in shown.stdout, "a webhook's URL is never shown back"

        # A restarted supervisor tells of the same end again: nothing is sent twice.
        notifier = JobNotifier(store, job_id)
        notifier.ended(Outcome.FAILED)
        notifier.close(wait=30)
        assert len(smtp.mails) == 1
        assert len(hook.posts) == 1
    finally:
        smtp.stop()
        hook.stop()


def test_a_receiver_down_at_the_job_s_end_gets_it_when_back_and_a_gone_one_is_given_up(
    workdir: Path,
) -> None:
    down, gone = WebhookReceiver(), WebhookReceiver().start()
    gone.status = 404
    try:
        job_id = run_job(
            workload(workdir, [{"webhook": down.url}, {"webhook": gone.url}], failing=1)
        )
        store = JobStore(workdir / "air")

        def account() -> str:
            return air("get", job_id).stdout

        until(lambda: "not sent yet: connection refused" in account(), "the account of a try")
        assert "(failure): failed: HTTP 404 Not Found, 1 try" in account()
        assert job_id in air("list", "--all").stdout, "the job's outcome does not wait for it"
        assert store.get(job_id).status == "FAILED"

        down.start()
        until(lambda: down.posts, "the courier's next try", timeout=120)
        until(lambda: "(failure): sent" in account(), "its account")
        states = [r.state for r in store.outbox.records(job_ids=[job_id])]
        assert states == [State.SENT, State.FAILED]
        assert len(down.posts) == 1
        assert gone.posts == []
    finally:
        down.stop()
        gone.stop()


def test_a_retried_job_tells_of_its_start_its_retry_a_duration_passed_and_its_success(
    workdir: Path,
) -> None:
    hook = WebhookReceiver().start()
    try:
        on = ["start", "retry", "duration:3s", "success", "failure"]
        job_id = run_job(
            workload(workdir, [{"webhook": hook.url, "on": on}], failing=1, retries=1, pause=4)
        )
        until(lambda: len(hook.posts) >= 4, "four events")
        events = [post["event"] for post, _ in hook.posts]
        assert events[0] == "start"
        assert events[-1] == "success"
        assert sorted(events[1:3]) == ["duration", "retry"]
        retry = next(post for post, _ in hook.posts if post["event"] == "retry")
        assert "attempt 1 failed (rank 1 exited with code 3); attempt 2 starts" in retry["title"]
        assert retry["lines"][-1] == "rank 1: loss is nan, giving up"
        duration = next(post for post, _ in hook.posts if post["event"] == "duration")
        assert duration["title"].endswith("still running after 3s")
        assert all(post["job_id"] == job_id for post, _ in hook.posts)
    finally:
        hook.stop()


SCHEDULE = """\
name: nightly
schedule:
  cron: "0 3 * * *"
  pause_status: PAUSED
experiment_name: nightly
notify:
  - webhook: {url}
    on: [failure]
tasks:
  - task_key: train
    workload:
      command: {python} train.py
      compute: {{nproc_per_node: 2}}
      env: {{FAILING_ATTEMPTS: "1"}}
"""


def test_a_scheduled_task_that_fails_at_night_tells_the_schedule_the_task_the_run_and_why(
    workdir: Path,
) -> None:
    hook = WebhookReceiver().start()
    try:
        (workdir / "nightly.yaml").write_text(SCHEDULE.format(url=hook.url, python=sys.executable))
        assert air("schedule", "create", "-f", "nightly.yaml").returncode == 0
        assert air("schedule", "run-now", "nightly").returncode == 0
        until(lambda: hook.posts, "the schedule run's notification", timeout=180)
        ((post, _),) = hook.posts
        assert post["event"] == "failure"
        assert post["title"].startswith("schedule nightly: run ")
        assert "failed: train" in post["title"]
        facts = dict(post["facts"])
        assert facts["Schedule"] == "nightly"
        assert facts["Task train"].startswith("FAILED, job ")
        assert post["lines"][-1] == "rank 1: loss is nan, giving up"
        assert post["command"] == f"air logs {post['job_id']}"

        # A restarted scheduler that ends the same run again tells nobody twice.
        schedules = ScheduleStore(JobStore(workdir / "air"))
        (run,) = schedules.runs(post["schedule_id"], limit=10)
        post_runs(schedules, [run.id])
        assert len(hook.posts) == 1
    finally:
        stop(workdir / "air")
        hook.stop()


def test_the_owner_asks_a_running_job_to_tell_its_end(workdir: Path) -> None:
    hook = WebhookReceiver().start()
    try:
        gate = workdir / "gate"
        path = workload(workdir, [], failing=0, gate=gate)
        submitted = air("run", "-f", str(path))
        job_id = submitted.stdout.split()[1]
        added = air("notify", job_id, f"webhook:{hook.url} on:success")
        assert added.returncode == 0, added.stderr
        assert "webhook http://127.0.0.1/… on success" in added.stdout
        assert "SECRET" not in added.stdout
        gate.touch()  # the ranks end now
        wait_settled(workdir / "air", job_id)
        until(lambda: hook.posts, "the job's end")
        ((post, _),) = hook.posts
        assert post["event"] == "success"
        late = air("notify", job_id, "jupyterlab")
        assert late.returncode == 1
        assert f"job {job_id} already ended (succeeded)" in late.stderr
    finally:
        hook.stop()
