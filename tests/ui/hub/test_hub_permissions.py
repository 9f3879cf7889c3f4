"""Job permissions on a real JupyterHub, as alice and bob see them in JupyterLab.

Alice runs two distributed cells on her server and shares the server with bob; one
cell grants bob CAN_VIEW on its job (``--share bob:CAN_VIEW``: "shared"), the other
grants nothing ("private"); later grants go through the permissions route. Bob,
in a browser of his own on alice's server, is refused the private job's logs with who
can grant them, reads the shared job's logs, sees the private job's GPU process as
"another user's job", and cannot cancel the shared job until alice grants
CAN_MANAGE_RUN to his Hub group. The Hub, alice's server and the jobs start once for the module; the
tests run in order, each building on the one before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fake_nvml import FakeGpu, Scenario
from tests.hub import Hub
from tests.waits import until

pytestmark = pytest.mark.browser

VIEW = ".jp-air-JobLogs"
DENIED = f"{VIEW} .jp-air-JobLogs-denied"
ROWS = f"{VIEW} .jp-air-JobLogs-line"
GPU_TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-gpu"]'
GIB = 1024**3

# Both jobs print, then keep their ranks (and their GPU memory, for the fake driver)
# until the test drops STOP or the job is cancelled.
JOB_CELL = """\
%%air_distributed -n 2 --background --run-name {name} {share}
import os, time
rank = os.environ["RANK"]
for step in range(3):
    print(f"{name} job rank {{rank}} step {{step}}", flush=True)
while not os.path.exists({stop!r}):
    time.sleep(0.2)
"""


def notebook(stop: Path) -> dict[str, Any]:
    cells = [
        "%load_ext jupyter_air",
        JOB_CELL.format(name="private", share="", stop=str(stop)),
        JOB_CELL.format(name="shared", share="--share bob:CAN_VIEW", stop=str(stop)),
    ]
    return {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
             "execution_count": None}
            for source in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip


@pytest.fixture(scope="module")
def alice_server(hub: Hub) -> Hub:
    hub.start_server("alice")
    return hub


def login(browser: Any, hub: Hub, user: str, artifacts: Path) -> Any:
    """A browser context of its own for ``user``, logged in to the Hub."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.goto(f"{hub.url}hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(lambda url: "/hub/login" not in url, wait_until="commit", timeout=30_000)
    return page


def open_lab(page: Any, hub: Hub, path: str) -> None:
    """Go to ``path`` on a user's server, accepting the Hub's OAuth page if it asks."""
    page.goto(f"{hub.url}{path}")
    page.wait_for_url(lambda url: "/lab" in url or "oauth2/authorize" in url, timeout=60_000)
    if "oauth2/authorize" in page.url:
        page.click("form button[type=submit]")
    page.wait_for_selector(GPU_TAB, timeout=90_000)


def alice_jobs(hub: Hub) -> dict[str, dict[str, Any]]:
    """Alice's jobs on her server by run name, through the API as alice."""
    response = hub.as_user("alice", "GET", "user/alice/jupyter-air/jobs?all=1")
    assert response.status == 200, response
    return {job["run_name"]: job for job in response.body["jobs"]}


def rank_pids(job_id: str) -> list[int]:
    """The running ranks of a job on this machine (every rank carries AIR_JOB_ID)."""
    pids = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("AIR_JOB_ID") == job_id and "RANK" in env:
            pids.append(proc.pid)
    return sorted(pids)


def get_permissions(hub: Hub, user: str, job: str) -> Any:
    return hub.as_user(user, "GET", f"user/alice/jupyter-air/jobs/{job}/permissions")


def put_permissions(hub: Hub, user: str, job: str, body: dict[str, Any]) -> Any:
    return hub.as_user(user, "PUT", f"user/alice/jupyter-air/jobs/{job}/permissions", body)


def cancel_in_browser(page: Any, job: str) -> tuple[int, Any]:
    """POST the cancel route from the page, with its session cookie and XSRF token,
    as the front end's requests do."""
    answer: dict[str, Any] = page.evaluate(
        """async url => {
            const xsrf = document.cookie.split('; ').find(c => c.startsWith('_xsrf='));
            const response = await fetch(url, {
                method: 'POST',
                headers: {'X-XSRFToken': xsrf ? decodeURIComponent(xsrf.slice(6)) : ''},
            });
            return {status: response.status, text: await response.text()};
        }""",
        f"jupyter-air/jobs/{job}/cancel",
    )
    return answer["status"], json.loads(answer["text"]) if answer["text"] else None


@pytest.fixture(scope="module")
def alice(browser: Any, alice_server: Hub, artifacts: Path) -> Iterator[Any]:
    page = login(browser, alice_server, "alice", artifacts)
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def bob(browser: Any, alice_server: Hub, artifacts: Path) -> Iterator[Any]:
    page = login(browser, alice_server, "bob", artifacts)
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def jobs(alice: Any, alice_server: Hub, artifacts: Path) -> Iterator[dict[str, str]]:
    """Alice runs the two distributed cells in JupyterLab; their job ids by run name."""
    hub = alice_server
    stop = hub.work / "stop"
    (hub.home("alice") / "jobs.ipynb").write_text(json.dumps(notebook(stop)))
    open_lab(alice, hub, "user/alice/lab/tree/jobs.ipynb")
    alice.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    alice.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    alice.wait_for_timeout(2000)
    if alice.is_visible(".jp-Dialog"):  # "Select Kernel", at times: the default one
        alice.click(".jp-Dialog .jp-mod-accept")
        alice.wait_for_selector(
            ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000
        )
    alice.click(".lm-MenuBar-itemLabel:text-is('Run')")
    alice.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    ids: dict[str, str] = {}

    def cells_started() -> bool:
        ids.clear()  # the latest, for the cancels at the end
        ids.update({name: job["id"] for name, job in alice_jobs(hub).items()})
        return set(ids) == {"private", "shared"} and all(
            len(rank_pids(job)) == 2 for job in ids.values()
        )

    try:
        try:
            until(
                cells_started,
                "the cells' jobs started",
                120,
                step=0.5,
                seen=lambda: f"{alice_jobs(hub)}\n{hub.log_tail()}",
            )
        except AssertionError:
            alice.screenshot(path=str(artifacts / "failed-hub-alice-cells.png"))
            raise
        alice.wait_for_function(
            "ids => ids.every(id => document.querySelector('.jp-Notebook').textContent"
            ".includes(id))",
            arg=list(ids.values()),
            timeout=30_000,
        )
        alice.screenshot(path=str(artifacts / "hub-alice-cells.png"))
        yield ids
    finally:
        stop.touch()
        for job in ids.values():
            hub.as_user("alice", "POST", f"user/alice/jupyter-air/jobs/{job}/cancel")
        with suppress(AssertionError):  # best effort: a minute at most
            until(
                lambda: not any(rank_pids(job) for job in ids.values()),
                "alice's ranks gone",
                60,
                step=0.5,
            )


def test_alice_server_serves_the_extension_through_the_proxy(alice_server: Hub) -> None:
    response = alice_server.as_user("alice", "GET", "user/alice/jupyter-air/gpu")
    assert response.status == 200, response
    me = alice_server.as_user("alice", "GET", "user/alice/api/me")
    assert me.body["identity"]["username"] == "alice"


def test_bob_reaches_alice_server_only_after_she_shares_it(alice_server: Hub) -> None:
    before = alice_server.request("GET", "user/alice/api/me", alice_server.new_token("bob"))
    assert before.status == 403, before
    shared = alice_server.share("alice", "bob")
    assert shared["user"] == {"name": "bob"}
    me = alice_server.as_user("bob", "GET", "user/alice/api/me")
    assert me.status == 200, me
    assert me.body["identity"]["username"] == "bob"


def test_the_cell_grants_bob_view_on_its_job(alice_server: Hub, jobs: dict[str, str]) -> None:
    hub = alice_server
    shared = get_permissions(hub, "alice", jobs["shared"])
    assert shared.status == 200, shared
    assert shared.body["owner"] == "alice", "the server's Hub user owns its kernels' jobs"
    assert shared.body["grants"] == [{"kind": "user", "name": "bob", "level": "CAN_VIEW"}]
    private = get_permissions(hub, "alice", jobs["private"])
    assert private.body["owner"] == "alice"
    assert private.body["grants"] == []
    # On alice's server, bob lists only the job he may view.
    listed = hub.as_user("bob", "GET", "user/alice/jupyter-air/jobs")
    assert listed.status == 200, listed
    assert [job["id"] for job in listed.body["jobs"]] == [jobs["shared"]]


def test_bob_is_told_who_can_grant_the_logs_he_may_not_view(
    bob: Any, alice_server: Hub, jobs: dict[str, str], artifacts: Path
) -> None:
    private = jobs["private"]
    open_lab(bob, alice_server, f"user/alice/lab?air-job={private}")
    bob.wait_for_selector(f'{VIEW}[data-job-id="{private}"] .jp-air-JobLogs-denied')
    denied = bob.query_selector(DENIED)
    assert denied.query_selector(".jp-air-JobLogs-deniedTitle").text_content() == (
        "You don't have access to these logs"
    )
    text = denied.text_content()
    assert private in text
    assert "CAN_VIEW" in text
    assert "alice" in text
    assert bob.query_selector(ROWS) is None
    assert "private job rank" not in bob.text_content(f'{VIEW}[data-job-id="{private}"]')
    bob.screenshot(path=str(artifacts / "hub-bob-no-access.png"))


def test_bob_reads_the_logs_of_the_job_shared_with_him(
    bob: Any, alice_server: Hub, jobs: dict[str, str], artifacts: Path
) -> None:
    shared = jobs["shared"]
    open_lab(bob, alice_server, f"user/alice/lab?air-job={shared}")
    bob.wait_for_selector(f'{VIEW}[data-job-id="{shared}"] .jp-air-JobLogs-line', timeout=30_000)
    bob.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-JobLogs-text')]"
        ".filter(n => n.textContent.startsWith('shared job rank')).length === 6",
        timeout=30_000,
    )
    assert bob.query_selector(f'{VIEW}[data-job-id="{shared}"] .jp-air-JobLogs-denied') is None
    bob.screenshot(path=str(artifacts / "hub-bob-shared-logs.png"))


def test_a_revoked_grant_takes_the_open_logs_away(
    bob: Any, alice_server: Hub, jobs: dict[str, str], artifacts: Path
) -> None:
    shared = jobs["shared"]
    view = f'{VIEW}[data-job-id="{shared}"]'
    revoked = put_permissions(
        alice_server, "alice", shared, {"revoke": [{"kind": "user", "name": "bob"}]}
    )
    assert revoked.status == 200, revoked
    assert revoked.body["grants"] == []
    # The open view's next follow request is refused: the lines go, the reason shows.
    bob.wait_for_selector(f"{view} .jp-air-JobLogs-denied", timeout=30_000)
    assert bob.query_selector(f"{view} .jp-air-JobLogs-line") is None
    assert "CAN_VIEW" in bob.text_content(f"{view} .jp-air-JobLogs-denied")
    assert bob.text_content(f"{view} .jp-air-JobLogs-meta") == "", "nor what it said of the job"
    bob.screenshot(path=str(artifacts / "hub-bob-revoked.png"))

    regranted = put_permissions(
        alice_server, "alice", shared,
        {"grant": [{"kind": "user", "name": "bob", "level": "CAN_VIEW"}]},
    )  # fmt: skip
    assert regranted.status == 200, regranted
    open_lab(bob, alice_server, f"user/alice/lab?air-job={shared}")
    bob.wait_for_selector(f"{view} .jp-air-JobLogs-line", timeout=30_000)
    assert bob.query_selector(f"{view} .jp-air-JobLogs-denied") is None


def test_bob_sees_the_gpu_memory_of_the_other_job_but_not_whose_it_is(
    bob: Any, alice_server: Hub, jobs: dict[str, str], artifacts: Path
) -> None:
    private, shared = rank_pids(jobs["private"]), rank_pids(jobs["shared"])
    alice_server.write(
        Scenario(
            gpus=[
                FakeGpu(
                    name="NVIDIA H100 80GB HBM3", util=60, mem_total=80 * GIB,
                    mem_used=30 * GIB, temp=50,
                    processes=[(private[0], 20 * GIB), (shared[0], 6 * GIB)],
                ),
            ]
        )
    )  # fmt: skip
    bob.click(GPU_TAB)
    bob.click(".jp-air-GpuPanel-refresh")  # a sample now, not at the next 10 s tick
    bob.wait_for_selector(".jp-air-GpuCard-process.jp-mod-otherUser", timeout=30_000)
    other = bob.query_selector(".jp-air-GpuCard-process.jp-mod-otherUser")
    cells = [td.text_content() for td in other.query_selector_all("td")]
    assert cells[-1] == "another user's job"
    assert cells[:3] == ["n/a", "n/a", "20.0 GiB"], cells
    assert other.get_attribute("data-pid") is None
    row_texts = bob.eval_on_selector_all(
        ".jp-air-GpuCard-process", "rows => rows.map(r => r.textContent)"
    )
    assert not any(str(private[0]) in text or jobs["private"] in text for text in row_texts)
    mine = bob.query_selector(f'.jp-air-GpuCard-process[data-pid="{shared[0]}"]')
    assert mine is not None
    assert jobs["shared"] in mine.text_content()

    # The API itself tells bob nothing more than the panel shows.
    answer = alice_server.as_user("bob", "GET", "user/alice/jupyter-air/gpu")
    assert answer.status == 200, answer
    processes = answer.body["state"][0]["processes"]
    assert {"pid": None, "name": None, "mem_mib": 20 * 1024, "owner": {"kind": "other"}} in (
        processes
    )
    assert jobs["private"] not in json.dumps(answer.body)
    assert private[0] not in [p["pid"] for p in processes]
    bob.screenshot(path=str(artifacts / "hub-bob-gpu-panel.png"))


def test_bob_may_cancel_only_once_granted_manage_run(
    bob: Any, alice_server: Hub, jobs: dict[str, str], artifacts: Path
) -> None:
    shared = jobs["shared"]
    status, body = cancel_in_browser(bob, shared)
    assert status == 403, body
    assert body["error"]["needed"] == "CAN_MANAGE_RUN"
    assert body["error"]["owner"] == "alice"
    assert alice_jobs(alice_server)["shared"]["status"] == "RUNNING"

    # Bob may not raise his own level either.
    raised = put_permissions(
        alice_server, "bob", shared,
        {"grant": [{"kind": "user", "name": "bob", "level": "CAN_MANAGE_RUN"}]},
    )  # fmt: skip
    assert raised.status == 403, raised

    # Alice grants it to bob's Hub group: the server sees bob's groups through the Hub.
    granted = put_permissions(
        alice_server, "alice", shared,
        {"grant": [{"kind": "group", "name": "ml-team", "level": "CAN_MANAGE_RUN"}]},
    )  # fmt: skip
    assert granted.status == 200, granted
    seen = get_permissions(alice_server, "bob", shared)
    assert seen.body["you"] == {"name": "bob", "level": "CAN_MANAGE_RUN"}
    status, body = cancel_in_browser(bob, shared)
    assert status == 200, body
    bob.wait_for_function(
        "id => document.querySelector(`.jp-air-JobLogs[data-job-id='${id}'] "
        ".jp-air-JobLogs-status`).textContent === 'CANCELLED'",
        arg=shared,
        timeout=60_000,
    )
    assert alice_jobs(alice_server)["shared"]["status"] == "CANCELLED"
    assert rank_pids(jobs["private"]), "the other job keeps running"
    bob.screenshot(path=str(artifacts / "hub-bob-cancelled.png"))
