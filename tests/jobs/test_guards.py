"""Metric guards (issue 39, item 2), without a job: what a guard says and how it is
written wrong, how it holds on a job's points, the default and ``none``, the names a
bad one is refused under (a file's field and line, the magic's and ``air run``'s flag),
the supervisor's feed on a real journal, and the ranks' save-at-one-step protocol on
real files."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from jupyter_air.cli.run import _guards
from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import guard_hook
from jupyter_air.jobs.guards import (
    DEFAULT,
    Action,
    BadGuard,
    Condition,
    Firing,
    Watcher,
    parse,
    parse_all,
    resolved,
)
from jupyter_air.jobs.node.outcome import AttemptEnd
from jupyter_air.jobs.spec import JobKind, JobSpec, job_spec
from jupyter_air.jobs.supervision.guard_feed import GuardFeed
from jupyter_air.jobs.workload_file import Submission, WorkloadError, load
from jupyter_air.kernel.options import OptionError, Options
from jupyter_air.status import Outcome
from jupyter_air.tracking.journal import Writer
from tests.waits import until


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("loss: nan", "loss: nan -> stop"),
        ("loss:NaN->notify", "loss: nan -> notify"),
        ("loss: inf -> notify, stop", "loss: inf -> notify, stop"),
        ("loss: not finite -> checkpoint", "loss: nan or inf -> checkpoint"),
        ("loss: > 10 -> notify and stop", "loss: > 10 -> notify, stop"),
        ("grad_norm: >= 1e3", "grad_norm: >= 1000 -> stop"),
        ("loss: < 0.1 -> notify", "loss: < 0.1 -> notify"),
        ("val_loss: no better for 500 steps", "val_loss: no better for 500 steps -> stop"),
        (
            "val/acc: no higher in 2,000 steps -> checkpoint",
            "val/acc: no higher for 2000 steps -> checkpoint",
        ),
        ("loss: nan -> stop, checkpoint", "loss: nan -> checkpoint"),
        ("ns:loss: nan", "ns:loss: nan -> stop"),
    ],
)
def test_a_guard_reads_as_an_ml_user_writes_it(text: str, canonical: str) -> None:
    assert str(parse(text)) == canonical
    assert str(parse(canonical)) == canonical, "its canonical text reads back the same"


def test_yaml_s_reading_of_an_unquoted_guard_and_the_explicit_mapping_are_guards() -> None:
    assert str(parse({"loss": "nan -> notify"})) == "loss: nan -> notify"
    assert str(parse({"loss": float("nan")})) == "loss: nan -> stop"  # YAML's .nan
    explicit = parse({"metric": "loss", "when": "> 10", "then": ["notify", "stop"]})
    assert (explicit.metric, explicit.test, explicit.threshold) == ("loss", Condition.ABOVE, 10.0)
    assert explicit.actions == (Action.NOTIFY, Action.STOP)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("loss nan", "'loss nan': expected METRIC: CONDITION, like 'loss: nan'"),
        (": nan", "': nan': expected METRIC: CONDITION"),
        ("loss: nann", "'loss: nann': expected nan, inf, 'nan or inf', '> N'"),
        ("loss: > ten", "'loss: > ten': 'ten' is not a number"),
        ("loss: > nan", "compare with a finite number (nan and inf are tests)"),
        ("loss: nan -> page", "'loss: nan -> page': 'page' is no action: notify, stop or"),
        ("loss: nan ->", "no action after '->'"),
        ("loss: no better for 0 steps", "the steps must be 1 or more"),
        ({"loss": "nan", "acc": "nan"}, "one guard per item"),
        ({"metric": "loss"}, "a guard's mapping is {metric: NAME, when: CONDITION"),
        (3, "expected a guard like 'loss: nan -> stop', got 3"),
    ],
)
def test_a_bad_guard_is_refused_in_one_line_saying_what_is_wrong(value: object, said: str) -> None:
    with pytest.raises(BadGuard) as err:
        parse(value)
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def test_none_turns_every_guard_off_the_default_included_and_stands_alone() -> None:
    assert resolved([], has_targets=True) == (DEFAULT,), "a job with targets: NaN is told"
    assert resolved([], has_targets=False) == ()
    assert resolved(["none"], has_targets=True) == ()
    assert resolved(["loss: > 10"], has_targets=True) == ("loss: > 10 -> stop",)
    assert parse_all(["None"]) is None
    with pytest.raises(BadGuard, match="'none' turns every guard off: give it alone"):
        parse_all(["none", "loss: nan"])


def points(*values: float, key: str = "loss", start: int = 1) -> list[tuple[str, float, int]]:
    return [(key, v, start + i) for i, v in enumerate(values)]


def test_each_condition_holds_where_it_should_and_fires_once() -> None:
    nan, inf = math.nan, math.inf
    for text, series, at in [
        ("loss: nan", (1.0, 0.5, nan, nan), 3),
        ("loss: inf", (1.0, nan, -inf), 3),
        ("loss: nan or inf", (1.0, inf), 2),
        ("loss: > 10", (9.0, 10.0, 10.5), 3),
        ("loss: >= 10", (9.0, 10.0), 2),
        ("loss: < 0.1", (0.5, nan, 0.1, 0.05), 4),
        ("loss: <= 0.1", (0.5, 0.1), 2),
    ]:
        fired = Watcher([parse(text)]).see(points(*series))
        assert [f.step for f in fired] == [at], text
    assert Watcher([parse("loss: > 10")]).see(points(1.0, nan, 2.0)) == []
    assert Watcher([parse("loss: nan")]).see(points(1.0, key="val_loss")) == []


def test_no_better_counts_steps_since_the_best_value_lower_or_higher() -> None:
    stall = Watcher([parse("val_loss: no better for 500 steps")])
    series = [("val_loss", 1.0, 0), ("val_loss", 0.5, 100), ("val_loss", 0.5, 400)]
    assert stall.see(series) == [], "as good is not better"
    assert stall.see([("val_loss", 0.6, 599)]) == []
    (fired,) = stall.see([("val_loss", 0.7, 600), ("val_loss", 0.1, 700)])
    assert fired.reason == (
        "guard 'val_loss: no better for 500 steps' at step 600 (val_loss = 0.7, best 0.5 "
        "at step 100)"
    )
    higher = Watcher([parse("acc: no higher for 2 steps")])
    assert higher.see(points(0.1, 0.2, 0.3, key="acc")) == []
    assert [f.step for f in higher.see([("acc", math.nan, 5)])] == [5], "NaN is never better"


def test_the_reason_is_the_outcome_users_read() -> None:
    firing = Firing(parse("loss: nan"), 4210, math.nan)
    assert firing.reason == "guard 'loss: nan' at step 4,210 (loss = nan)"
    assert Firing(parse("loss: > 10"), 7, 12.25).reason == (
        "guard 'loss: > 10' at step 7 (loss = 12.25)"
    )


def test_a_job_s_spec_keeps_its_guards_through_its_json() -> None:
    spec = job_spec(JobKind.COMMAND, command=["true"], guards=["loss: nan -> stop"])
    assert JobSpec.from_json(spec.to_json()).policy.guards == ("loss: nan -> stop",)
    assert JobSpec.from_json(job_spec(JobKind.COMMAND).to_json()).policy.guards == ()


def test_the_job_runs_its_owner_s_guards_else_the_default_when_it_has_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyter_air.jobs.request import Program
    from jupyter_air.jobs.service import place

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    def guards_of(**fields: object) -> tuple[str, ...]:
        placed = place(Submission.model_validate(fields), "alice")
        return placed.spec(Program(JobKind.COMMAND, command=["true"])).policy.guards

    assert guards_of(notify=["jupyterlab"]) == ("loss: nan -> notify",)
    assert guards_of(notify=["jupyterlab"], guard="none") == ()
    assert guards_of() == (), "a cell that names no target: no default guard"
    assert guards_of(guard=[{"loss": "> 10 -> notify"}]) == ("loss: > 10 -> notify",)


def test_a_bad_guard_in_a_workload_file_is_refused_naming_its_field_and_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "experiment_name: e\ncommand: python train.py\nguard:\n"
        "  - loss: nan -> stop\n  - 'loss: > ten'\n"
    )
    with pytest.raises(WorkloadError) as err:
        load(path)
    assert str(err.value) == f"{path}: guard.1 (line 5): 'loss: > ten': 'ten' is not a number"
    path.write_text("experiment_name: e\ncommand: python train.py\nguard: none\n")
    assert load(path).guard == ["none"]
    path.write_text(
        "experiment_name: e\ncommand: python train.py\nguard:\n  - loss: nan\n  - 'loss: > 10'\n"
        "  - val_loss: no better for 500 steps -> checkpoint\n"
    )
    assert [str(parse(g)) for g in load(path).guard] == [
        "loss: nan -> stop",
        "loss: > 10 -> stop",
        "val_loss: no better for 500 steps -> checkpoint",
    ], "YAML's mappings of unquoted guards read as the guards"


def test_a_bad_guard_of_the_magic_or_the_decorator_is_refused_naming_the_flag() -> None:
    with pytest.raises(OptionError) as err:
        Options(guards=["loss: nan", "loss: nope"]).validate()
    assert str(err.value).startswith("--guard: 'loss: nope': expected nan, inf")
    assert Options(guards="loss: nan -> notify").validate().guard == ["loss: nan -> notify"]


def test_air_run_s_guards_come_after_the_file_s_and_none_turns_them_all_off() -> None:
    assert _guards(["loss: nan"], ["loss: > 10"]) == ["loss: nan", "loss: > 10"]
    assert _guards(["loss: nan"], ["none"]) == ["none"]
    assert _guards(["none"], ["loss: > 10"]) == ["loss: > 10"]


def test_a_schedule_s_task_takes_a_guard_and_refuses_a_bad_one_by_its_line(
    tmp_path: Path,
) -> None:
    from jupyter_air.schedules.schedule_file import ScheduleFileError
    from jupyter_air.schedules.schedule_file import load as schedule_load

    path = tmp_path / "s.yaml"
    body = (
        "name: nightly\nschedule: {{quartz_cron_expression: '0 0 2 * * ?', timezone_id: UTC}}\n"
        "tasks:\n  - task_key: train\n    workload:\n      command: python train.py\n"
        "      guard: [{guard}]\n"
    )
    path.write_text(body.format(guard="'loss: nan -> checkpoint'"))
    (task,) = schedule_load(path).tasks
    assert task.workload is not None
    assert task.workload["guard"] == ["loss: nan -> checkpoint"]
    path.write_text(body.format(guard="'loss: sometimes'"))
    with pytest.raises(ScheduleFileError) as err:
        schedule_load(path)
    assert "tasks.0 (train): workload: guard.0: 'loss: sometimes': expected nan" in str(err.value)


def journaled(files: AttemptDir, *lines: tuple[str, float, int]) -> None:
    writer = Writer(files.metrics_journal)
    for key, value, step in lines:
        writer.append("run", {key: value, "lr": 0.1}, step)
    writer.close()


def test_the_supervisor_s_feed_acts_on_a_point_journaled_and_says_why(tmp_path: Path) -> None:
    files = AttemptDir(tmp_path / "attempt_1").make()
    stopped, told = threading.Event(), list[Firing]()
    feed = GuardFeed(
        files,
        ["loss: > 5 -> notify", "loss: nan -> notify, stop", "acc: < 0 -> stop"],
        stopped.set,
        told.append,
        interval=0.05,
    )
    try:
        journaled(files, ("loss", 1.0, 1), ("loss", 6.0, 2))
        until(lambda: told, "the notify-only guard told")
        assert not stopped.is_set(), "notify alone leaves the job running"
        journaled(files, ("loss", math.nan, 4210))
        until(stopped.is_set, "the ranks stopped", timeout=5)
    finally:
        feed.finish()
    assert [f.reason for f in told] == [
        "guard 'loss: > 5' at step 2 (loss = 6)",
        "guard 'loss: nan' at step 4,210 (loss = nan)",
    ]
    ended = feed.outcome(AttemptEnd(Outcome.CANCELLED, [-2, -2], message="cancelled"))
    assert (ended.status, ended.message, ended.final) == (
        Outcome.FAILED,
        "guard 'loss: nan' at step 4,210 (loss = nan)",
        True,
    ), "a stop is the job's end: not retried"
    assert ended.exit_codes == [-2, -2]


def test_a_checkpoint_guard_with_no_trainer_in_the_ranks_stops_and_says_so(
    tmp_path: Path,
) -> None:
    files = AttemptDir(tmp_path / "attempt_1").make()
    stopped = threading.Event()
    feed = GuardFeed(files, ["loss: nan -> checkpoint"], stopped.set, lambda _: None, 0.05)
    try:
        journaled(files, ("loss", math.nan, 3))
        until(stopped.is_set, "the ranks stopped", timeout=5)
    finally:
        feed.finish()
    ended = feed.outcome(AttemptEnd(Outcome.SUCCEEDED, [0]))
    assert ended.message == (
        "guard 'loss: nan' at step 3 (loss = nan); no checkpoint: no HF Trainer or Lightning "
        "in the ranks to save one"
    )
    assert not ended.final, "a checkpoint guard's attempt may be retried"
    assert not (files.path / guard_hook.SAVE).exists()


def test_a_job_without_guards_keeps_its_end(tmp_path: Path) -> None:
    files = AttemptDir(tmp_path / "a").make()
    end = AttemptEnd(Outcome.SUCCEEDED, [0])
    for stored in ([], ["loss: when a later version says so -> stop"]):
        feed = GuardFeed(files, stored, lambda: None, lambda _: None)
        feed.finish()
        assert feed.outcome(end) is end, "a guard this version cannot read fails nothing"
    assert guard_hook.rank_env(["loss: when a later version says so"], files.path) == {}


def test_every_rank_saves_at_the_step_rank_0_names_two_steps_on(tmp_path: Path) -> None:
    """Rank 0 sees the request at the end of step 7; rank 1, a step behind, must not save
    at 7 (rank 0 would then wait for it in step 8's collective): both save at 9."""
    env = guard_hook.rank_env(["loss: nan -> checkpoint"], tmp_path)
    said = json.loads(env[guard_hook.GUARDS_ENV])
    assert said == {"dir": str(tmp_path), "metrics": ["loss"], "save": True}
    ranks = [
        guard_hook._Guarded(tmp_path, frozenset(["loss"]), True, rank=r, world=2) for r in (0, 1)
    ]
    zero, one = ranks
    assert [zero.due(6), one.due(6)] == [False, False], "nothing asked yet"
    (tmp_path / guard_hook.SAVE).write_text("guard 'loss: nan' at step 6")
    assert not one.due(6), "rank 1 waits for rank 0's step"
    assert not zero.due(7)
    assert (tmp_path / guard_hook.SAVE_AT).read_text() == "9"
    assert [one.due(7), one.due(8), one.due(9)] == [False, False, True]
    assert [zero.due(8), zero.due(9)] == [False, True]
    zero.done(str(tmp_path / "checkpoint-9"))
    assert (tmp_path / guard_hook.SAVED).read_text() == str(tmp_path / "checkpoint-9")
    assert not zero.due(10), "saved once"
    single = guard_hook._Guarded(tmp_path / "x", frozenset(), True, rank=0, world=1)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / guard_hook.SAVE).write_text("")
    assert single.due(4), "one rank saves at once"


def test_only_rank_0_journals_the_trainer_s_guarded_metrics(tmp_path: Path) -> None:
    from jupyter_air.tracking.journal import read

    for rank in (1, 0):
        guarded = guard_hook._Guarded(tmp_path, frozenset(["loss"]), False, rank, 2)
        guarded.journal(5, {"loss": math.nan, "learning_rate": 0.1, "epoch": 1.0})
    (line,) = read(tmp_path / guard_hook.POINTS, 0)
    assert [(p.key, math.isnan(p.value), p.step) for p in line[0]] == [("loss", True, 5)]


def test_the_rank_s_environment_says_nothing_for_a_job_without_guards() -> None:
    assert guard_hook.rank_env([], Path("/x")) == {}
    assert not guard_hook.wanted({})


def test_a_guard_s_notice_goes_to_every_target_else_to_the_owner_s_jupyterlab(
    tmp_path: Path,
) -> None:
    """``notify`` is the guard's choice: a target that asked for successes only gets it
    too, and a job with no target (a cell that named none) tells its owner's tabs."""
    from jupyter_air.jobs.store import JobStore
    from jupyter_air.jobs.supervision.notifier import JobNotifier
    from jupyter_air.notify.targets import Channel
    from jupyter_air.notify.targets import parse as target

    store = JobStore(tmp_path / "air")
    why = "guard 'loss: > 5' at step 2 (loss = 6)"
    lab = target({"jupyterlab": True, "on": ["success"]})
    told = store.create(job_spec(JobKind.COMMAND, command=["python", "t.py"], notify=[lab]))
    alone = store.create(job_spec(JobKind.COMMAND, command=["python", "t.py"]))
    for job in (told, alone):
        notifier = JobNotifier(store, job.id)
        notifier.guard(1, "loss: > 5 -> notify", why)
        notifier.guard(1, "loss: > 5 -> notify", why)  # once an attempt
        (record,) = store.outbox.records(job_ids=[job.id])
        assert record.message.title == f"air job {job.id} (python t.py): {why}"
        assert record.message.lines == (why,)
        assert record.target.channel is Channel.JUPYTERLAB
        assert record.target == (lab if job is told else target("jupyterlab"))
