"""The notebook GPU view's domain: history merging, polling, idleness, and its sources,
against the real sampler on the fake NVML driver (no ipywidgets here)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.gpu.view_model import GpuHistory, GpuPoller
from jupyter_air.kernel.gpu_sources import (
    KernelSource,
    ServerSource,
    SourceUnavailable,
    find_source,
)
from jupyter_air.tracking.ui_links import JupyterServer
from tests.conftest import WriteScenario
from tests.fake_nvml import FakeGpu, Scenario


def answer(t: list[float], util: list[int], **extra: Any) -> dict[str, Any]:
    """A ``GET jupyter-air/gpu`` answer for one GPU, as docs/api.md describes it."""
    return {
        "now": t[-1] if t else 1000.0,
        "interval": 10.0,
        "history": 7200.0,
        "reset": False,
        "inventory": "inv1",
        "samples": {
            "t": t,
            "cpu": [5.0] * len(t),
            "mem": [100] * len(t),
            "gpu": [{"util": util, "mem": [1] * len(t), "temp": [40] * len(t), "power": None}],
        },
        "state": [{"status": "ok", "processes": []}],
        **extra,
    }


FIRST = {"gpus": [{"index": 0, "name": "A"}], "nvml": {"available": True}, "host": {"cpu_count": 2}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kernel_sampling(scenario: WriteScenario, two_gpus: Scenario) -> Iterator[WriteScenario]:
    """The fake driver in this process; no kernel sampler outlives the test."""
    scenario(two_gpus)
    yield scenario
    KernelSource("cleanup").release()
    assert not KernelSource.sampling()


# -- history ---------------------------------------------------------------------------


def test_the_first_answer_is_taken_whole_and_the_next_asks_only_for_what_is_missing() -> None:
    history = GpuHistory()
    assert history.query() == (None, None)
    assert history.merge(answer([10.0, 20.0], [1, 2], **FIRST)) is True
    assert history.query() == (20.0, "inv1")
    assert history.merge(answer([30.0], [3])) is False
    assert history.t == [10.0, 20.0, 30.0]
    assert history.gpu[0]["util"] == [1, 2, 3]
    assert history.gpu[0]["power"] == [None, None, None]  # a column the GPU does not report
    assert history.gpus == [{"index": 0, "name": "A"}]  # kept: increments leave it out


def test_a_sample_already_held_is_never_doubled() -> None:
    history = GpuHistory()
    history.merge(answer([10.0, 20.0], [1, 2], **FIRST))
    history.merge(answer([20.0, 30.0], [2, 3]))
    assert history.t == [10.0, 20.0, 30.0]
    assert history.gpu[0]["util"] == [1, 2, 3]


def test_a_new_inventory_replaces_everything_held() -> None:
    history = GpuHistory()
    history.merge(answer([10.0, 20.0], [1, 2], **FIRST))
    two = {"gpus": [{"index": 0}, {"index": 1}], "inventory": "inv2", "reset": True}
    doc = answer([30.0], [7], **two)
    doc["samples"]["gpu"].append({"util": [8]})
    assert history.merge(doc) is True
    assert history.t == [30.0]
    assert [g["util"] for g in history.gpu] == [[7], [8]]
    assert history.gpu[1]["temp"] == [None]


def test_samples_older_than_the_span_are_dropped_and_a_range_is_cut_from_the_latest() -> None:
    history = GpuHistory()
    history.merge(answer([0.0, 3600.0, 6300.0, 7000.0], [1, 2, 3, 4], **FIRST))
    history.merge(answer([7300.0], [5]))  # 7300 - 7200 = 100: the sample at 0 is out
    assert history.t == [3600.0, 6300.0, 7000.0, 7300.0]
    assert history.t[history.window(900.0) :] == [7000.0, 7300.0]
    assert history.t[history.window(3600.0) :] == [6300.0, 7000.0, 7300.0]


# -- poller ----------------------------------------------------------------------------


def test_the_kernel_sampler_shows_the_scripted_gpus(kernel_sampling: WriteScenario) -> None:
    updates: list[int] = []
    poller = GpuPoller(KernelSource("test"), on_update=lambda p: updates.append(len(p.history.t)))
    assert poller.step() == 10.0
    history = poller.history
    assert [g["name"] for g in history.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert history.latest(history.gpu[0]["util"]) == 35
    assert history.latest(history.gpu[0]["mem"]) == 20 * 1024
    assert history.latest(history.gpu[1]["temp"]) == 33
    owner = history.state[0]["processes"][0]["owner"]
    assert owner == {"kind": "kernel", "id": None, "name": "this kernel"}
    assert updates == [1]
    assert KernelSource.sampling()
    poller.close()
    assert not KernelSource.sampling()


def test_polls_wait_for_the_interval_and_a_refresh_samples_at_once(
    kernel_sampling: WriteScenario, clock: Clock, two_gpus: Scenario
) -> None:
    poller = GpuPoller(KernelSource("test"), interval=10, idle_timeout=300, clock=clock)
    poller.step()
    clock.now += 4
    assert poller.step() == pytest.approx(6.0)  # not due: nothing asked
    assert len(poller.history.t) == 1
    kernel_sampling(Scenario(gpus=[FakeGpu(util=90), two_gpus.gpus[1]]))
    poller.request_refresh()
    poller.step()
    assert poller.history.latest(poller.history.gpu[0]["util"]) == 90
    assert len(poller.history.t) == 2
    poller.close()


def test_idle_pauses_and_releases_the_sampler_and_an_interaction_resumes_at_once(
    kernel_sampling: WriteScenario, clock: Clock
) -> None:
    polled = threading.Event()
    poller = GpuPoller(
        KernelSource("test"),
        interval=10,
        idle_timeout=300,
        clock=clock,
        on_update=lambda p: polled.set() if p.running else None,
    )
    poller.step()
    assert KernelSource.sampling()
    clock.now += 299
    assert poller.step() == pytest.approx(1.0)  # the wait ends at the idle limit
    clock.now += 1
    assert poller.step() is None  # the polling thread would end here
    assert poller.paused
    assert not KernelSource.sampling()
    assert not poller.running
    samples = len(poller.history.t)
    poller.touch()  # e.g. the range buttons: starts a thread that polls at once
    assert polled.wait(timeout=30)
    assert not poller.paused
    assert poller.running
    assert len(poller.history.t) == samples + 1
    poller.close()
    assert not poller.running
    assert not KernelSource.sampling()


def test_a_failing_source_is_shown_and_the_next_poll_tries_again(clock: Clock) -> None:
    gone = JupyterServer(pid=os.getpid(), url="http://127.0.0.1:9/", base_url="/")
    poller = GpuPoller(ServerSource(gone, "secret-token"), clock=clock)
    poller.step()
    assert poller.error is not None
    assert poller.error.startswith("SourceUnavailable: the Jupyter server did not answer")
    assert "secret-token" not in poller.error
    assert poller.history.t == []
    clock.now += 10
    assert poller.step() == 10.0  # still polling


def test_bad_interval_or_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        GpuPoller(KernelSource("test"), interval=0)


# -- sources ---------------------------------------------------------------------------


class Recorder(BaseHTTPRequestHandler):
    """A stand-in server: answers ``reply(path)`` and records each request's headers."""

    seen: list[tuple[str, str, dict[str, str]]]
    reply: Callable[[str], tuple[int, dict[str, str], bytes]]

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        status, headers, body = self.reply(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[Callable[..., tuple[str, list[Any]]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Callable[[str], tuple[int, dict[str, str], bytes]]) -> tuple[str, list[Any]]:
        seen: list[Any] = []
        handler = type("Handler", (Recorder,), {"seen": seen, "reply": staticmethod(reply)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def runtime_file(runtime: Path, url: str, token: str, pid: int | None = None) -> Path:
    runtime.mkdir(exist_ok=True)
    pid = os.getpid() if pid is None else pid
    info = {"pid": pid, "url": url, "base_url": "/", "token": token}
    path = runtime / f"jpserver-{pid}.json"
    path.write_text(json.dumps(info))
    return path


def test_the_server_sampler_is_read_with_the_runtime_files_token(
    http_server: Callable[..., Any], tmp_path: Path
) -> None:
    doc = answer([10.0], [42], **FIRST)
    url, seen = http_server(lambda path: (200, {}, json.dumps(doc).encode()))
    runtime_file(tmp_path, url, "tok-123")
    source = find_source("auto", environ={"JPY_PARENT_PID": str(os.getpid())}, runtime_dir=tmp_path)
    assert isinstance(source, ServerSource)
    assert source.refresh(10.0, "inv1")["samples"]["t"] == [10.0]
    method, path, headers = seen[-1]
    assert (method, path) == ("POST", "/jupyter-air/gpu/sample?since=10.0&inventory=inv1")
    assert headers["Authorization"] == "token tok-123"
    assert "tok-123" not in repr(source) + source.description


def test_without_a_server_the_kernel_samples_and_says_why(tmp_path: Path) -> None:
    source = find_source("auto", environ={}, runtime_dir=tmp_path)
    assert isinstance(source, KernelSource)
    assert "no Jupyter server found" in source.description
    with pytest.raises(SourceUnavailable, match="no Jupyter server found"):
        find_source("server", environ={}, runtime_dir=tmp_path)


def test_a_server_without_the_extension_falls_back_to_the_kernel(
    http_server: Callable[..., Any], tmp_path: Path
) -> None:
    url, _ = http_server(lambda path: (404, {}, b"{}"))
    runtime_file(tmp_path, url, "tok")
    source = find_source("auto", environ={}, runtime_dir=tmp_path)
    assert isinstance(source, KernelSource)
    assert "answered 404" in source.description


def test_attack_a_redirect_never_carries_the_token_elsewhere(
    http_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A server (or whatever took its port) redirecting the view's request elsewhere
    gets no second request, so the token stays with the server of the runtime file."""
    elsewhere, stolen = http_server(lambda path: (200, {}, b"{}"))
    url, _ = http_server(lambda path: (302, {"Location": elsewhere + "steal"}, b""))
    runtime_file(tmp_path, url, "tok-secret")
    with pytest.raises(SourceUnavailable, match="answered 302") as raised:
        find_source("server", environ={}, runtime_dir=tmp_path)
    assert stolen == []
    assert "tok-secret" not in str(raised.value)


def test_a_stalled_server_costs_the_view_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts and never answers: the view's thread gives up."""
    import socket

    from jupyter_air.kernel import gpu_sources

    monkeypatch.setattr(gpu_sources, "REQUEST_TIMEOUT", 0.5)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        runtime_file(tmp_path, url, "tok")
        source = find_source("auto", environ={}, runtime_dir=tmp_path)  # returns: no hang
        assert isinstance(source, KernelSource)
        assert "did not answer" in source.description


def test_the_views_table_names_each_process_its_job_and_the_jobs_hints() -> None:
    from jupyter_air.kernel.gpu_magic import _cards

    history = GpuHistory()
    doc = answer([10.0], [3], **FIRST)
    hint = "GPU 0 averaged 3 % utilization over the last 300 s: likely input-bound"
    owner = {"kind": "job", "id": "20261201-010203-abcdef", "name": None, "hints": [hint]}
    doc["state"][0]["processes"] = [{"pid": 42, "name": "python", "mem_mib": 512, "owner": owner}]
    history.merge(doc)
    table = _cards(history)
    assert (
        f'<td data-metric="processes">python (42) 512 MiB, job 20261201-010203-abcdef ⚠ {hint}</td>'
    ) in table
    assert '<td data-metric="util">3 %</td>' in table


def test_without_a_gpu_the_view_says_why_in_one_line_and_draws_only_the_host() -> None:
    from jupyter_air.kernel.gpu_magic import GpuView

    no_driver = {
        "gpus": [],
        "nvml": {"available": False, "reason": "libnvidia-ml.so.1 not found"},
        "host": {"cpu_count": 2, "mem_total_mib": 1024},
        "inventory": "none",
        "now": 10.0,
        "samples": {"t": [10.0], "cpu": [12.0], "mem": [512.0], "gpu": []},
    }
    history = GpuHistory()
    history.merge(no_driver)
    reason = history.no_gpu_reason()
    assert reason == "No GPU here: libnvidia-ml.so.1 not found. Host CPU and memory below."

    class Answer:
        description = "a test source"

        def fetch(self, since: float | None, inventory: str | None) -> dict[str, Any]:
            return no_driver

        refresh = fetch

        def release(self) -> None:
            pass

    poller = GpuPoller(Answer())
    poller.step()
    view = GpuView(poller, "15m")
    try:
        titles = [a.text for a in view.figure.layout.annotations]
        assert titles == ["Host (%)"], "no empty GPU charts"
        assert [t.name for t in view.figure.data] == ["host CPU", "host memory"]
        assert view.figure.layout.yaxis.visible is False
        assert view.figure.layout.yaxis4.domain == (0.0, 1.0)
        assert reason in view.status.value
        assert view.figure.layout.height < 300
    finally:
        view.close()


def test_gpus_get_a_chart_row_per_metric_titled_clear_of_the_toolbar_with_24_hour_times() -> None:
    from jupyter_air.kernel.gpu_magic import _figure, _show_rows

    figure = _figure()
    _show_rows(figure, with_gpus=True)
    titles = [a.text for a in figure.layout.annotations]
    assert titles == ["GPU utilization (%)", "GPU memory (%)", "GPU temperature (°C)", "Host (%)"]
    assert {a.xanchor for a in figure.layout.annotations} == {"left"}, "the toolbar is right"
    tops = [figure.layout[f"yaxis{k}"].domain[1] for k in ("", 2, 3, 4)]
    assert tops == sorted(tops, reverse=True), "rows top to bottom, none hidden"
    assert figure.layout.xaxis.tickformat == "%H:%M"
    assert figure.layout.xaxis.hoverformat == "%H:%M:%S"
