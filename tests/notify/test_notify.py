"""Notifications (issue 27): targets as users write them, the sent-once outbox, and
delivery to a real SMTP server (STARTTLS, login) and a real webhook receiver, both
stopped mid-way to see the retries and the account of a failure."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from jupyter_air.jobs.request import Program
from jupyter_air.jobs.spec import JobSpec
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.workload_file import Submission
from jupyter_air.notify import courier, delivery, outbox
from jupyter_air.notify.message import Link, Message, text, webhook_body
from jupyter_air.notify.outbox import Notice, State
from jupyter_air.notify.settings import AirNotify, load
from jupyter_air.notify.targets import BadTarget, Channel, Event, WebhookFormat, parse, parse_all
from jupyter_air.status import Outcome
from tests.factories import job_spec
from tests.notify_servers import SmtpServer, WebhookReceiver, self_signed
from tests.waits import until

SECRET_HOOK = "https://hooks.example.com/T000/B000/XXXXSECRET"


# -- targets ------------------------------------------------------------------------


def test_a_target_is_read_from_a_file_s_mapping_or_a_flag_s_words() -> None:
    from_file = parse({"email": "me@example.com", "on": ["failure", "duration:2h"]})
    from_flag = parse("email:me@example.com on:failure,duration:2h")
    assert from_file == from_flag
    assert from_file.channel is Channel.EMAIL
    assert from_file.durations == [7200.0]
    assert from_file.wants(Event.FAILURE)
    assert not from_file.wants(Event.SUCCESS)
    assert parse("jupyterlab").on == parse({"jupyterlab": True}).on, "default: its end"
    assert parse('"email:me@example.com on:failure,duration:2h"') == from_file, "a magic's"
    as_pyyaml_reads_it = yaml.safe_load("email: me@example.com\non: [failure, duration:2h]")
    assert parse(as_pyyaml_reads_it) == from_file, "YAML 1.1 reads the key on as true"
    assert {str(t) for t in parse("jupyterlab").on} == {"success", "failure", "cancelled"}


def test_a_webhook_s_shape_follows_its_host_unless_said() -> None:
    assert (
        parse({"webhook": "https://hooks.slack.com/services/T/B/X"}).format is WebhookFormat.SLACK
    )
    teams = "https://prod-00.westeurope.logic.azure.com/workflows/abc"
    assert parse({"webhook": teams}).format is WebhookFormat.TEAMS
    assert parse({"webhook": SECRET_HOOK}).format is WebhookFormat.GENERIC
    assert parse(f"webhook:{SECRET_HOOK} format:slack").format is WebhookFormat.SLACK


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"email": "not-an-address"}, "email: 'not-an-address' is not an email address"),
        ({"webhook": "ftp://hooks.example.com/x"}, "webhook: ftp://hooks.example.com/… is not an"),
        ({"email": "me@example.com", "on": ["finished"]}, "on: unknown event 'finished'"),
        ({"email": "me@example.com", "on": ["duration"]}, "duration needs a threshold"),
        ({"email": "me@example.com", "on": ["duration:soon"]}, "expected a time like 90s"),
        ({"email": "me@example.com", "webhook": SECRET_HOOK}, "say one of"),
        ({"slack": SECRET_HOOK}, "say one of jupyterlab, email: ADDRESS or webhook: URL"),
        ({"jupyterlab": True, "format": "slack"}, "format is for a webhook"),
        ("email:me@example.com when:failure", "expected on:EVENT"),
        ({"webhook": "https://hooks.example.com/T0/XXXX SECRET"}, "holds a space or a control"),
    ],
)
def test_a_bad_target_is_refused_in_one_line(value: object, said: str) -> None:
    with pytest.raises(BadTarget) as refused:
        parse(value)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)
    assert "SECRET" not in str(refused.value), "a webhook's URL is never said back"


def test_a_webhook_s_url_is_a_secret_never_shown_back() -> None:
    target = parse({"webhook": SECRET_HOOK})
    assert target.shown() == "webhook https://hooks.example.com/…"
    with pytest.raises(BadTarget) as refused:
        parse({"webhook": "hooks.example.com/T000/XXXXSECRET"})
    assert "XXXXSECRET" not in str(refused.value)


def test_a_job_s_targets_are_stored_with_its_spec_and_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIR_SMTP_HOST", "127.0.0.1")
    targets = parse_all([{"email": "me@example.com", "on": ["failure"]}, "jupyterlab"])
    spec = job_spec(command=["true"], notify=targets)
    assert JobSpec.from_json(spec.to_json()).notify == targets


def test_an_email_target_without_an_smtp_server_is_refused_at_submission(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AIR_SMTP_HOST", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="no SMTP server to send it"):
        Submission.model_validate({"notify": [{"email": "me@example.com"}]})


def test_the_user_s_defaults_come_from_the_config_file_and_a_job_s_own_replace_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    out_of_the_box = Submission().targets(unwatched=True)
    assert [t.channel for t in out_of_the_box] == [Channel.JUPYTERLAB]
    (tmp_path / "jupyter_air_config.py").write_text(
        f"c.AirNotify.defaults = [{{'webhook': {SECRET_HOOK!r}, 'on': ['failure']}}]\n"
    )
    assert [t.address for t in Submission().targets(unwatched=True)] == [SECRET_HOOK]
    turned_off = Submission.model_validate({"notify": []})
    assert turned_off.targets(unwatched=True) == (), "notify: [] turns them off"


def test_a_bad_default_is_said_and_refuses_no_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    (tmp_path / "jupyter_air_config.py").write_text("c.AirNotify.defaults = [{'pager': 1}]\n")
    with pytest.warns(UserWarning, match=r"c.AirNotify.defaults: say one of .*: none used"):
        assert Submission().targets(unwatched=True) == ()
    assert Submission().targets(unwatched=False) == (), "a watched call does not read them"


# -- the outbox ---------------------------------------------------------------------


def message(event: Event = Event.FAILURE) -> Message:
    return Message(
        event=event,
        title="air job 20261204-000000-abcdef (train.py): failed: rank 1 exited with code 1",
        level="error",
        owner="ada",
        facts=(("Job", "20261204-000000-abcdef"), ("Duration", "12m 30s")),
        lines=("Traceback (most recent call last):", "RuntimeError: CUDA error: out of memory"),
        links=(Link("Logs", "http://lab.example.com/lab?air-job=20261204-000000-abcdef"),),
        command="air logs 20261204-000000-abcdef",
        job_id="20261204-000000-abcdef",
    )


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "air")


def test_a_notice_posted_twice_is_recorded_once(store: JobStore) -> None:
    notice = Notice("job:X:end#0", "ada", parse({"webhook": SECRET_HOOK}), message())
    assert store.outbox.post([notice]) != []
    assert store.outbox.post([notice]) == [], "a restarted poster adds nothing"
    lab = Notice("job:X:end#1", "ada", parse("jupyterlab"), message())
    store.outbox.post([lab])
    assert [r.key for r in store.outbox.for_lab("ada", 0)] == ["job:X:end#1"]
    assert store.outbox.for_lab("bob", 0) == [], "another user's tabs never get it"
    claimed = store.outbox.claim()
    assert claimed is not None
    assert claimed.key == "job:X:end#0", "JupyterLab's are not sent"
    assert store.outbox.claim() is None, "one try holds its row"


def test_a_failing_delivery_backs_off_then_is_given_up_with_its_reason(store: JobStore) -> None:
    store.outbox.post([Notice("k", "ada", parse({"webhook": SECRET_HOOK}), message())])
    now = time.time()
    tries = []
    for _ in range(3):
        record = store.outbox.claim(now=now)
        assert record is not None
        state = store.outbox.failed(
            record, "connection refused", permanent=False, max_tries=3, now=now
        )
        tries.append(state)
        now += outbox.MAX_WAIT + 1
    assert tries == [State.PENDING, State.PENDING, State.FAILED]
    assert store.outbox.next_due() is None, "given up: nothing due"
    record = _by_key(store, "k")
    assert record.line().endswith(": failed: connection refused, 3 tries"), record.line()
    assert "XXXXSECRET" not in record.line()


def test_a_try_whose_process_died_is_tried_again_when_its_lease_ends(store: JobStore) -> None:
    store.outbox.post([Notice("k", "ada", parse({"webhook": SECRET_HOOK}), message())])
    now = time.time()
    assert store.outbox.claim(now=now) is not None  # and its process dies
    assert store.outbox.claim(now=now + 1) is None
    again = store.outbox.claim(now=now + outbox.LEASE + 1)
    assert again is not None
    assert again.tries == 2


def _by_key(store: JobStore, key: str) -> outbox.Record:
    with store.connect() as db:
        row = db.execute("SELECT * FROM notifications WHERE key = ?", (key,)).fetchone()
    return outbox._record(row)


# -- delivery to real servers -------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # this process, and what it starts, trust it
    return cert, key


def settings_for(smtp: SmtpServer, tls: str, **more: object) -> AirNotify:
    return AirNotify(smtp_host="127.0.0.1", smtp_port=smtp.port, smtp_tls=tls, timeout=10, **more)


def test_a_mail_goes_through_starttls_with_a_login_whose_password_is_read_from_a_file(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    smtp = SmtpServer(tls=certificate, login=("ada", "s3cret")).start()
    try:
        (tmp_path / "pw").write_text("s3cret\n")
        settings = settings_for(
            smtp, "starttls", smtp_user="ada", smtp_password_file=str(tmp_path / "pw")
        )
        settings.smtp_from = "air@example.com"
        delivery.send_mail("me@example.com", message(), "job:X:end#0", settings)
        (mail,) = smtp.mails
        subject = mail["Subject"].strip()
        assert subject.startswith("air job 20261204-000000-abcdef (train.py): failed")
        assert mail["X-Envelope-To"] == "me@example.com"
        assert "X.end#0" in mail["Message-ID"], "the same id on a try sent again"
        body = mail.get_content()
        assert "RuntimeError: CUDA error: out of memory" in body
        assert "In a terminal: air logs 20261204-000000-abcdef" in body
        assert "Logs: http://lab.example.com/lab?air-job=20261204-000000-abcdef" in body

        settings.smtp_password_file = str(tmp_path / "missing")
        with pytest.raises(delivery.Failed, match="SMTP password file") as refused:
            delivery.send_mail("me@example.com", message(), "k2", settings)
        assert refused.value.permanent
    finally:
        smtp.stop()


def test_a_mail_goes_over_tls_from_the_first_byte_and_in_plain_to_a_local_relay(
    certificate: tuple[Path, Path],
) -> None:
    smtps = SmtpServer(tls=certificate, implicit=True).start()
    relay = SmtpServer().start()
    try:
        delivery.send_mail("me@example.com", message(), "k1", settings_for(smtps, "tls"))
        delivery.send_mail("me@example.com", message(), "k2", settings_for(relay, "none"))
        assert len(smtps.mails) == len(relay.mails) == 1
        with pytest.raises(delivery.Failed) as no_tls:  # STARTTLS asked of a plain relay
            delivery.send_mail("me@example.com", message(), "k3", settings_for(relay, "starttls"))
        assert no_tls.value.permanent, "no retry makes a server speak TLS"
    finally:
        smtps.stop()
        relay.stop()


def test_a_wrong_password_is_a_failure_no_retry_mends(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    smtp = SmtpServer(tls=certificate, login=("ada", "s3cret")).start()
    monkeypatch.setenv("AIR_SMTP_PASSWORD", "wrong")
    try:
        settings = settings_for(smtp, "starttls", smtp_user="ada")
        with pytest.raises(delivery.Failed, match="login refused") as refused:
            delivery.send_mail("me@example.com", message(), "k", settings)
        assert refused.value.permanent
        assert smtp.mails == []
    finally:
        smtp.stop()


def test_webhooks_get_our_json_or_slack_s_or_teams_shape() -> None:
    receiver = WebhookReceiver().start()
    try:
        for fmt in WebhookFormat:
            target = parse({"webhook": receiver.url, "format": fmt.value})
            delivery.post_webhook(target, message(), f"job:X:end#{fmt.value}", timeout=10)
        (ours, ours_headers), (slack, _), (teams, _) = receiver.posts
        assert ours["event"] == "failure"
        assert ours["job_id"] == "20261204-000000-abcdef"
        assert ours["lines"][-1] == "RuntimeError: CUDA error: out of memory"
        assert ours["command"] == "air logs 20261204-000000-abcdef"
        assert ours_headers["Idempotency-Key"] == "job:X:end#generic"
        assert slack["text"] == message().title
        assert any("out of memory" in json.dumps(b) for b in slack["blocks"])
        card = teams["attachments"][0]["content"]
        assert card["type"] == "AdaptiveCard"
        assert card["actions"][0]["url"].endswith("air-job=20261204-000000-abcdef")
        assert webhook_body(message(), WebhookFormat.GENERIC)["text"] == text(message())
    finally:
        receiver.stop()


def test_a_webhook_that_is_down_busy_or_gone_says_which(tmp_path: Path) -> None:
    receiver = WebhookReceiver()  # not started: nothing listens
    target = parse({"webhook": receiver.url})
    with pytest.raises(delivery.Failed, match="connection refused") as down:
        delivery.post_webhook(target, message(), "k", timeout=10)
    assert not down.value.permanent
    receiver.start()
    try:
        receiver.status = 503
        with pytest.raises(delivery.Failed, match="HTTP 503") as busy:
            delivery.post_webhook(target, message(), "k", timeout=10)
        assert not busy.value.permanent
        receiver.status = 404
        with pytest.raises(delivery.Failed, match="HTTP 404") as gone:
            delivery.post_webhook(target, message(), "k", timeout=10)
        assert gone.value.permanent
        assert "SECRET" not in str(gone.value)
    finally:
        receiver.stop()


def test_what_a_down_receiver_did_not_take_the_courier_delivers_once_it_is_back(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIR_HOME", str(store.home))
    monkeypatch.setenv("AIR_NOTIFY_RETRY", "1")
    monkeypatch.setattr(outbox, "FIRST_WAIT", 1.0)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    receiver = WebhookReceiver()
    notice = Notice("job:X:end#0", "ada", parse({"webhook": receiver.url}), message())
    courier.send(store.outbox, [notice], load())  # tried at once: refused
    record = _by_key(store, "job:X:end#0")
    assert record.state is State.PENDING
    assert "not sent yet: connection refused, 1 try; next try" in record.line()
    receiver.start()
    try:
        until(lambda: _by_key(store, "job:X:end#0").state is State.SENT, "the courier sent it")
        assert len(receiver.posts) == 1
        courier.send(store.outbox, [notice], load())  # the same event, posted again
        until(lambda: not (store.home / courier.LOCK).exists() or _courier_gone(store), "idle")
        assert len(receiver.posts) == 1, "nothing is sent twice"
    finally:
        receiver.stop()


def test_a_courier_whose_store_is_deleted_leaves_at_once_not_at_its_next_try(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import shutil

    from jupyter_air.procs import alive
    from tests.leftovers import scan

    monkeypatch.setenv("AIR_HOME", str(store.home))
    monkeypatch.setenv("AIR_NOTIFY_RETRY", "600")  # its next try, in the courier too
    monkeypatch.setattr(outbox, "FIRST_WAIT", 600.0)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    down = WebhookReceiver()  # never started: refused
    courier.send(
        store.outbox, [Notice("job:X:end#0", "ada", parse({"webhook": down.url}), message())]
    )
    until(lambda: not _courier_gone(store), "the courier, sleeping until its next try")
    (process,) = until(lambda: scan([store.home]), "the courier's process")
    shutil.rmtree(store.home)  # the user removed the store (a test's folder, a cleanup)
    until(lambda: not alive(process.pid), "the courier gone", timeout=20)
    assert not store.home.exists(), "no new store is made for it"


def _courier_gone(store: JobStore) -> bool:
    import fcntl

    with open(store.home / courier.LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


# -- who is told of what --------------------------------------------------------------


def test_the_defaults_are_for_unwatched_jobs_and_a_watched_call_notifies_when_it_asks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jupyter_air.jobs.service import place
    from jupyter_air.jobs.spec import JobKind

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    placed = place(Submission(), "ada", nproc_per_node=1)
    background = placed.spec(Program(JobKind.COMMAND, command=["true"], background=True))
    assert [t.channel for t in background.notify] == [Channel.JUPYTERLAB]
    assert placed.spec(Program(JobKind.PYTHON, background=False)).notify == (), (
        "the cell shows its end"
    )
    asked = place(Submission.model_validate({"notify": ["jupyterlab on:success"]}), "ada")
    assert [str(t) for t in asked.spec(Program(JobKind.PYTHON)).notify[0].on] == ["success"]


def test_a_bad_notify_option_of_the_magic_is_refused_in_one_line_naming_the_flag() -> None:
    from jupyter_air.kernel.options import OptionError, Options

    with pytest.raises(OptionError) as refused:
        Options(notify=["email:me@example.com on:finished"]).validate()
    assert str(refused.value).startswith("--notify: on: unknown event 'finished'")
    none = Options(notify=["none"]).validate()
    assert none.targets(unwatched=True) == (), "--notify none: no notification"


def test_a_hint_tells_its_own_text_once_per_attempt_and_kind(store: JobStore) -> None:
    from jupyter_air.jobs.supervision.notifier import JobNotifier

    receiver = WebhookReceiver().start()
    try:
        target = parse({"webhook": receiver.url, "on": ["hint"]})
        job = store.create(job_spec(command=["python", "train.py"], notify=(target,)))
        notifier = JobNotifier(store, job.id)
        text_ = "GPUs 0, 1 idle for 10 min while the job runs"
        notifier.hint(1, "air.hint.idle_gpus", text_)
        notifier.hint(1, "air.hint.idle_gpus", text_)  # the same hint seen again
        notifier.ended(Outcome.SUCCEEDED)  # not asked for: not sent
        notifier.close(wait=30)
        ((post, _),) = receiver.posts
        assert post["event"] == "hint"
        assert post["title"] == f"air job {job.id} (python train.py): {text_}"
        assert post["lines"] == [text_]
    finally:
        receiver.stop()


def test_run_data_the_tracking_server_refused_for_good_is_told_with_what_to_do(
    store: JobStore,
) -> None:
    from jupyter_air.job_dir import AttemptDir
    from jupyter_air.jobs.supervision.notifier import JobNotifier
    from jupyter_air.tracking import backlog

    receiver = WebhookReceiver().start()
    try:
        target = parse({"webhook": receiver.url, "on": ["tracking"]})
        job = store.create(job_spec(command=["python", "train.py"], notify=(target,)))
        files = AttemptDir(store.attempt_dir(job.id, 1)).make()
        notifier = JobNotifier(store, job.id)
        refused = PermissionError("RESOURCE_DOES_NOT_EXIST: run 9f0c was deleted")
        backlog.failing(
            files, "http://mlflow.example.com", ConnectionRefusedError(), {backlog.Part.END}
        )
        notifier.tracking_refused(1, files)  # a server that is down: no news
        backlog.failing(files, "http://mlflow.example.com", refused, {backlog.Part.END})
        notifier.tracking_refused(1, files)
        notifier.close(wait=30)
        ((post, _),) = receiver.posts
        assert post["event"] == "tracking"
        assert "refused the run's data" in post["title"]
        assert f"air sync {job.id}" in post["title"]
    finally:
        receiver.stop()


def test_a_schedule_tells_of_a_skipped_time_and_of_a_run_that_succeeded_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_air.identity import Identity
    from jupyter_air.schedules.notices import post_runs
    from jupyter_air.schedules.service import Schedules
    from jupyter_air.schedules.tick import tick
    from tests.schedules.test_schedule_tick import Clock, FakeLaunch

    receiver = WebhookReceiver().start()
    try:
        schedules = Schedules(JobStore(tmp_path / "air"), Clock())
        monkeypatch.setenv("AIR_HOME", str(schedules.jobs.home))
        doc = {
            "name": "nightly",
            "schedule": {"quartz_cron_expression": "*/10 * * * * ?"},
            "catch_up": "none",
            "notify": [{"webhook": receiver.url, "on": ["skipped", "success"]}],
            "tasks": [{"task_key": "train", "workload": {"command": "python train.py"}}],
        }
        me = Identity("alice")
        s = schedules.create(me, schedules.parse(doc, tmp_path), tracking_uri="sqlite:///x.db")
        assert s.next_due is not None
        launch = FakeLaunch(schedules.jobs)
        late = tick(schedules.store, launch, s.next_due + 126)  # the scheduler was down
        assert late.skipped
        post_runs(schedules.store, late.skipped)
        until(lambda: len(receiver.posts) == len(late.skipped), "the courier's posts")
        skipped = [post for post, _ in receiver.posts]
        assert {p["event"] for p in skipped} == {"skipped"}
        assert len(skipped) == len(late.skipped)
        assert skipped[0]["title"].startswith("schedule nightly: run ")
        assert "skipped" in skipped[0]["title"]

        on_time = tick(schedules.store, launch, s.next_due + 130)
        schedules.jobs.update(launch.job("train"), status="SUCCEEDED")
        ended = tick(schedules.store, launch, s.next_due + 131)
        assert ended.ended == on_time.started
        post_runs(schedules.store, ended.ended)
        until(lambda: len(receiver.posts) > len(late.skipped), "the run's end")
        post_runs(schedules.store, ended.ended + late.skipped)  # a restarted scheduler
        until(lambda: _courier_gone(schedules.jobs), "the courier, idle")
        events = [post["event"] for post, _ in receiver.posts]
        assert events.count("success") == 1
        assert len(events) == len(late.skipped) + 1, "nothing is sent twice"
        assert dict(receiver.posts[-1][0]["facts"])["Task train"].startswith("SUCCEEDED, job ")
    finally:
        receiver.stop()


def test_a_job_whose_supervisor_died_is_told_failed_once_the_store_settles_it(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    monkeypatch.setenv("AIR_HOME", str(store.home))
    receiver = WebhookReceiver().start()
    try:
        target = parse({"webhook": receiver.url, "on": ["failure"]})
        job = store.create(job_spec(command=["python", "train.py"], notify=(target,)))
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        store.update(
            job.id, status="RUNNING", started=time.time() - 60, supervisor_pid=int(gone.stdout)
        )  # killed outright, say by the OOM killer
        assert store.settle() == [job.id]
        until(lambda: receiver.posts, "the courier's post")
        ((post, _),) = receiver.posts
        assert post["event"] == "failure"
        assert "ended without recording the end" in post["title"]
        assert store.settle() == []
        until(lambda: _courier_gone(store), "the courier, idle")
        assert len(receiver.posts) == 1
    finally:
        receiver.stop()


def test_a_receiver_that_hangs_at_the_supervisor_s_exit_loses_nothing(
    store: JobStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jupyter_air.jobs.supervision.notifier import JobNotifier
    from tests.notify_servers import SilentServer

    monkeypatch.setenv("AIR_HOME", str(store.home))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    (tmp_path / "jupyter_air_config.py").write_text("c.AirNotify.timeout = 2\n")
    silent, receiver = SilentServer(), WebhookReceiver().start()
    try:
        targets = (
            parse({"webhook": silent.url, "on": ["start", "success"]}),
            parse({"webhook": receiver.url, "on": ["start", "success"]}),
        )
        job = store.create(job_spec(command=["python", "train.py"], notify=targets))
        notifier = JobNotifier(store, job.id)
        notifier.started(time.time())
        notifier.ended(Outcome.SUCCEEDED)
        notifier.close(wait=0.5)  # the supervisor exits while a try hangs
        keys = {r.key for r in store.outbox.records(job_ids=[job.id])}
        assert keys == {f"job:{job.id}:{event}#{i}" for event in ("start", "end") for i in (0, 1)}
        until(lambda: len(receiver.posts) == 2, "the courier sends what the receiver takes")
        assert sorted(post["event"] for post, _ in receiver.posts) == ["start", "success"]
        # The courier rightly goes on trying the silent receiver for about 30 minutes;
        # this test's end ends it (tests/leftovers.py: nothing outlives its tmp_path).
    finally:
        silent.stop()
        receiver.stop()
