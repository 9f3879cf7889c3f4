"""The runs panel's domain rules, without a server: the filter string a search makes,
nesting, which params differ, the order of metrics, the names a comparison's legend
shows, and how its client opens a store another process is making."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.tracking.experiment_runs import (
    BadQuery,
    RunQuery,
    check_compared,
    client_for,
    differing_params,
    legend_names,
    nest,
    run_row,
    time_origin,
    user_metrics_first,
)
from jupyter_air.tracking.stores import store_lock
from tests.waits import until


def row(run_id: str, parent: str | None = None, **params: str) -> dict[str, Any]:
    return {"run_id": run_id, "parent_run_id": parent, "params": params, "depth": 0}


@pytest.mark.parametrize(
    ("search", "status", "expected"),
    [
        ("", None, ""),
        ("lr", None, "attributes.run_name ILIKE '%lr%'"),
        ("it's", None, 'attributes.run_name ILIKE "%it\'s%"'),
        ('it\'s "x"', None, 'attributes.run_name ILIKE "%it\'s x%"'),
        ("params.lr = '0.1'", "FAILED", "params.lr = '0.1' AND attributes.status = 'FAILED'"),
        ("metrics.a < 1 or metrics.b > 2", None, "(metrics.a < 1 or metrics.b > 2)"),
        ("tags.x LIKE 'a%'", None, "tags.x LIKE 'a%'"),
        ("", "RUNNING", "attributes.status = 'RUNNING'"),
    ],
)
def test_a_search_is_a_name_search_or_an_mlflow_filter(
    search: str, status: str | None, expected: str
) -> None:
    assert RunQuery("1", search, status).filter_string() == expected


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(BadQuery, match="status must be one of"):
        RunQuery("1", status="DONE").filter_string()


def test_children_follow_their_parent_and_orphans_stay_in_place() -> None:
    rows = [row("c2", "p"), row("p"), row("c1", "p"), row("g", "c1"), row("o", "elsewhere")]
    assert [(r["run_id"], r["depth"]) for r in nest(rows)] == [
        ("p", 0),
        ("c2", 1),
        ("c1", 1),
        ("g", 2),
        ("o", 0),
    ]


def test_a_cycle_of_parent_tags_shows_each_run_once() -> None:
    assert sorted(r["run_id"] for r in nest([row("a", "b"), row("b", "a")])) == ["a", "b"]


def test_params_differ_when_a_value_or_its_presence_differs() -> None:
    rows = [row("a", lr="0.1", bs="32"), row("b", lr="0.2", bs="32"), row("c", lr="0.1")]
    assert differing_params(rows) == {
        "bs": {"a": "32", "b": "32", "c": None},
        "lr": {"a": "0.1", "b": "0.2", "c": "0.1"},
    }
    assert differing_params([row("a", lr="1"), row("b", lr="1")]) == {}


@pytest.mark.parametrize(
    ("runs", "metrics", "message"),
    [
        ([], [], "compare between 1 and 10"),
        (["0" * 32] * 11, [], "compare between 1 and 10"),
        (["../etc"], [], "not a run id"),
        (["0" * 32], ["loss'); DROP"], "not a metric name"),
    ],
)
def test_compared_runs_and_metrics_are_checked(
    runs: list[str], metrics: list[str], message: str
) -> None:
    with pytest.raises(BadQuery, match=message):
        check_compared(runs, metrics)


def test_the_users_metrics_come_before_mlflows_system_metrics() -> None:
    keys = ["system/cpu_utilization_percentage", "val_loss", "lr", "system/gpu_0_power_watts"]
    assert user_metrics_first(keys) == [
        "lr",
        "val_loss",
        "system/cpu_utilization_percentage",
        "system/gpu_0_power_watts",
    ]
    assert user_metrics_first(keys, system=False) == ["lr", "val_loss"]


def test_runs_that_share_a_name_get_distinct_legend_names() -> None:
    runs: list[dict[str, Any]] = [
        {"run_id": "a1b2c3d4" + "0" * 24, "name": "quickstart"},
        {"run_id": "ffee0011" + "0" * 24, "name": "quickstart"},
        {"run_id": "0123abcd" + "0" * 24, "name": "other"},
        {"run_id": "99" * 16, "name": None},
    ]
    assert list(legend_names(runs).values()) == [
        "quickstart (a1b2c3d)",
        "quickstart (ffee001)",
        "other",
        "99" * 16,
    ]


def test_a_compared_runs_time_starts_at_its_first_point_of_the_users_metrics() -> None:
    run = {"run_id": "a", "start_time": 1_000}
    metrics = {
        "system/cpu_utilization_percentage": {"a": [{"timestamp": 1_500}]},  # before ranks
        "loss": {"a": [{"timestamp": 18_000}, {"timestamp": 19_000}]},
        "eval_accuracy": {"a": [{"timestamp": 40_000}], "b": [{"timestamp": 2_000}]},
    }
    assert time_origin(run, metrics) == 18_000, "not the run's start, nor a system sample"
    only_system = {
        "system/cpu_utilization_percentage": metrics["system/cpu_utilization_percentage"]
    }
    assert time_origin(run, only_system) == 1_000, "without the user's metrics: the start"


@pytest.mark.parametrize(
    ("tags", "kind"),
    [
        ({"air.session": "true", "air.job_id": "j"}, "session"),
        ({"air.session_cell": "3", "mlflow.parentRunId": "p"}, "session_cell"),
        ({"air.session_cell": "next"}, "session_cell"),  # made ahead for the next cell
        ({"air.job_id": "j"}, None),  # a fresh cell's, a function's or air run's
    ],
)
def test_a_row_says_whether_its_run_is_a_sessions_or_a_session_cells(
    tags: dict[str, str], kind: str | None
) -> None:
    from mlflow.entities import Run, RunData, RunInfo, RunTag

    info = RunInfo(
        run_id="r1",
        experiment_id="1",
        user_id="alice",
        status="RUNNING",
        start_time=1,
        end_time=None,
        lifecycle_stage="active",
    )
    run = Run(info, RunData(tags=[RunTag(k, v) for k, v in tags.items()]))
    assert run_row(run)["kind"] == kind


def test_a_row_says_where_a_resumed_retry_started() -> None:
    from mlflow.entities import Run, RunData, RunInfo, RunTag

    info = RunInfo(
        run_id="r2",
        experiment_id="1",
        user_id="alice",
        status="FINISHED",
        start_time=1,
        end_time=2,
        lifecycle_stage="active",
    )
    tags = {"air.attempt": "2", "air.resumed_from": "/ckpt/step-6", "air.resumed_step": "6"}
    row = run_row(Run(info, RunData(tags=[RunTag(k, v) for k, v in tags.items()])))
    assert (row["attempt"], row["resumed_from"], row["resumed_step"]) == (2, "/ckpt/step-6", 6)
    fresh = run_row(Run(info, RunData(tags=[RunTag("air.attempt", "1")])))
    assert (fresh["resumed_from"], fresh["resumed_step"]) == (None, None)


def test_a_client_waits_for_a_store_another_process_is_making(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs panel polls while a job's supervisor or a sweep's driver migrates a new
    sqlite store: opening it then, outside the store's lock, migrated it a second time
    and failed one of them."""
    monkeypatch.setenv("AIR_HOME", str(tmp_path / "air"))
    (tmp_path / "air").mkdir()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    opened: list[Any] = []
    with store_lock(uri):  # another process making the store
        opener = threading.Thread(target=lambda: opened.append(client_for(uri)))
        opener.start()
        where = until(
            lambda: (not opener.is_alive() and "ended") or waiting_for_the_lock(opener),
            "the client waiting for the store's lock, or opened",
        )
        assert where == "waiting", "the client opened the store while it was being made"
        assert not (tmp_path / "mlflow.db").exists()
    opener.join(timeout=120)
    assert not opener.is_alive()
    assert [e.name for e in opened[0].search_experiments()] == ["Default"]


def waiting_for_the_lock(thread: threading.Thread) -> str | None:
    """``waiting`` once ``thread`` is in ``store_lock``, asking for it."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == store_lock.__name__ and "stores" in frame.f_code.co_filename:
            return "waiting"
        frame = frame.f_back
    return None
