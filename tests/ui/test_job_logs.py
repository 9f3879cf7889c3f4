"""The "Job logs" view as a user sees it, in headless chromium against a real lab.

A real job (supervisor, two rank processes, an MLflow run per attempt) prints known
lines: its first attempt fails, its second prints a WARNING and a traceback, then ticks
until the test lets it finish, so following can be watched.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_air.job_dir import AttemptDir
from jupyter_air.jobs import cancel
from jupyter_air.jobs.node import stacks
from jupyter_air.jobs.store import JobStore
from jupyter_air.jobs.submit import start_job
from jupyter_air.logs.capture import RankLog
from jupyter_air.status import AttemptStatus
from jupyter_air.tracking import backlog
from jupyter_air.tracking.backlog import Part
from tests.factories import job_spec
from tests.fake_nvml import Scenario
from tests.ui.conftest import Lab
from tests.ui.notebook_pages import run_from_palette
from tests.waits import until

VIEW = ".jp-air-JobLogs"
ROWS = f"{VIEW} .jp-air-JobLogs-line"
GPU_TAB = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="jupyter-air-gpu"]'
LOGS_TAB = '.lm-DockPanel-tabBar .lm-TabBar-tab[data-id^="jupyter-air-job-logs-"]'

RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, traceback
    rank, attempt = int(os.environ["RANK"]), int(os.environ["AIR_ATTEMPT"])
    print(f"hello from rank {rank} attempt {attempt}", flush=True)
    if attempt == 1:
        if rank == 1:
            while not os.path.exists(os.environ["FAIL_FILE"]):
                time.sleep(0.1)
            print("giving up on the first attempt", file=sys.stderr, flush=True)
            sys.exit(3)
        time.sleep(120)  # the supervisor stops rank 0 when rank 1 fails
    for step in range(40):
        print(f"step {step} rank {rank} loss={1 / (step + 1):.4f}", flush=True)
    if rank == 1:
        print("WARNING: gradient overflow on rank 1, skipping step", flush=True)
        try:
            raise ValueError("bad batch <b>&amp;</b>")
        except ValueError:
            traceback.print_exc()
    tick = 0
    stop = os.environ["STOP_FILE"]
    while not os.path.exists(stop) and tick < 600:
        print(f"tick {tick} rank {rank}", flush=True)
        tick += 1
        time.sleep(0.4)
    print(f"done rank {rank}", flush=True)
    """
)


@pytest.fixture(scope="module")
def logs_lab(start_lab: Callable[..., Lab], air_home: Path) -> Lab:
    return start_lab(Scenario(gpus=[]), env={"AIR_HOME": str(air_home)})


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the test drops ``fail`` (attempt 1 fails) and ``stop`` (attempt 2 ends)."""
    return tmp_path_factory.mktemp("control")


def new_experiment(air_home: Path) -> tuple[str, str]:
    from mlflow import MlflowClient

    uri = f"sqlite:///{air_home}/mlflow.db"
    # An artifact location of its own: the default (./mlruns) would land in the checkout.
    experiment = MlflowClient(uri).create_experiment(
        "logs-ui", artifact_location=str(air_home / "mlruns")
    )
    return uri, str(experiment)


@pytest.fixture(scope="module")
def job(air_home: Path, control: Path, logs_lab: Lab) -> Iterator[str]:
    """A running job on its first attempt, which fails once ``control / "fail"`` exists;
    the second ticks until ``control / "stop"`` exists."""
    store = JobStore(air_home)
    uri, experiment_id = new_experiment(air_home)
    workload = job_spec(
        kind="command",
        command=[sys.executable, "-c", RANK_SCRIPT],
        nproc_per_node=2,
        max_retries=1,
        background=True,
        env={"FAIL_FILE": str(control / "fail"), "STOP_FILE": str(control / "stop")},
        tracking_uri=uri,
        experiment_id=experiment_id,
        run_name="logs-ui",
    )
    job = start_job(store, workload, None)
    logs = store.attempt_dir(job.id, 1) / "logs" / "node_0"

    def both_ranks_said_hello() -> bool:
        assert not store.get(job.id).done, store.get(job.id)
        return all(
            (logs / f"rank_{r}.log").exists() and "hello" in (logs / f"rank_{r}.log").read_text()
            for r in (0, 1)
        )

    until(both_ranks_said_hello, f"job {job.id} started", 120)
    yield job.id
    (control / "fail").touch()
    (control / "stop").touch()
    cancel.cancel(store, job.id)
    cancel.wait(store, job.id, 30)


def open_page(browser: Any, lab: Lab, query: str = "") -> Any:
    context = browser.new_context(
        viewport={"width": 1400, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
        accept_downloads=True,
    )
    page = context.new_page()
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.on("requestfailed", lambda r: page.console_lines.append(f"request failed: {r.url}"))
    page.goto(f"{lab.url}lab?token={lab.token}{query}")
    return page


@pytest.fixture(scope="module")
def page(browser: Any, logs_lab: Lab, job: str) -> Iterator[Any]:
    page = open_page(browser, logs_lab, f"&air-job={job}")
    yield page
    page.context.close()


def open_fresh_page(browser: Any, lab: Lab) -> Any:
    """A lab page without any logs view (the layout of earlier pages is restored)."""
    page = open_page(browser, lab)
    page.wait_for_selector(GPU_TAB, timeout=60_000)
    page.wait_for_timeout(500)
    for _ in range(10):
        close = page.query_selector(f"{LOGS_TAB} .lm-TabBar-tabCloseIcon")
        if close is None:
            break
        close.click()
        page.wait_for_timeout(100)
    assert page.query_selector(VIEW) is None
    return page


def click_link(page: Any, href: str) -> None:
    """Click a link to ``href`` as a cell output would show it."""
    page.evaluate(
        """href => {
            const a = document.createElement('a');
            a.href = href; a.textContent = 'logs'; a.id = 'air-logs-link'; a.target = '_blank';
            a.style.position = 'fixed'; a.style.zIndex = '10000'; a.style.top = '0';
            document.body.prepend(a);
        }""",
        href,
    )
    page.click("#air-logs-link")
    page.eval_on_selector("#air-logs-link", "a => a.remove()")


#: The rendered rows' texts, top to bottom as the user sees them (the list reuses its row
#: nodes, so their order in the DOM is not the screen's).
IN_VIEW = """nodes => nodes
    .map(n => [n.getBoundingClientRect().top, n.textContent])
    .sort((a, b) => a[0] - b[0])
    .map(([, text]) => text)"""


def texts(page: Any) -> list[str]:
    """The texts of the rendered rows, top to bottom."""
    found: list[str] = page.eval_on_selector_all(f"{ROWS} .jp-air-JobLogs-text", IN_VIEW)
    return found


def rows(page: Any) -> list[dict[str, Any]]:
    """The rendered rows, top to bottom: data attributes, text and highlighted parts."""
    found: list[dict[str, Any]] = page.eval_on_selector_all(
        ROWS,
        """nodes => nodes
            .map(n => ({top: parseFloat(n.style.top), ...n.dataset,
                        text: n.querySelector('.jp-air-JobLogs-text').textContent,
                        marks: [...n.querySelectorAll('mark')].map(m => m.textContent)}))
            .sort((a, b) => a.top - b.top)""",
    )
    return found


def wait_rows(page: Any, predicate: str, timeout: float = 15_000) -> None:
    """Wait until the rendered rows are not empty and all pass ``predicate`` (JS, on row)."""
    page.wait_for_function(
        f"""() => {{
            const rows = [...document.querySelectorAll('{ROWS}')];
            return rows.length > 0 && rows.every(row => {predicate});
        }}""",
        timeout=timeout,
    )


def count(page: Any) -> int:
    text = page.text_content(".jp-air-JobLogs-count") or ""
    return int(text.split()[0].replace(",", "")) if text else 0


def select(page: Any, name: str, value: str) -> None:
    page.select_option(f".jp-air-JobLogs-{name} select", value)


def test_the_url_opens_the_view_of_the_running_job(
    page: Any, job: str, control: Path, artifacts: Path
) -> None:
    page.wait_for_selector(f'{VIEW}[data-job-id="{job}"]', timeout=60_000)
    page.wait_for_selector(ROWS)
    # The tab is named by the job's run and the end of its id; the tooltip has them whole.
    tab = ".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current"
    page.wait_for_function(
        "([s, label]) => document.querySelector(s).textContent === label",
        arg=[f"{tab} .lm-TabBar-tabLabel", f"logs-ui · {job.rsplit('-', 1)[1]}"],
    )
    assert page.get_attribute(tab, "title") == f"Job logs — logs-ui ({job})"
    assert page.text_content(".jp-air-JobLogs-status") == "RUNNING"
    assert "air-job" not in page.url, "the route is taken out of the address bar"
    assert page.input_value(".jp-air-JobLogs-attempt select") == "1"
    assert sorted(texts(page)) == ["hello from rank 0 attempt 1", "hello from rank 1 attempt 1"]
    assert page.get_attribute(".jp-air-JobLogs-follow", "aria-pressed") == "true"

    # The first attempt fails: the view moves on to the second by itself.
    (control / "fail").touch()
    page.wait_for_function(
        "() => document.querySelector('.jp-air-JobLogs-attempt select').value === '2'",
        timeout=60_000,
    )
    # Both ranks tick (on a loaded machine rank 0 may start a while after rank 1).
    page.wait_for_function(
        """() => {
            const texts = [...document.querySelectorAll('.jp-air-JobLogs-text')]
                .map(n => n.textContent);
            return ['0', '1'].every(rank =>
                texts.some(t => t.startsWith('tick ') && t.endsWith(` rank ${rank}`)));
        }""",
        timeout=60_000,
    )
    options = page.eval_on_selector_all(
        ".jp-air-JobLogs-attempt option", "os => os.map(o => [o.value, o.textContent])"
    )
    assert [value for value, _ in options] == ["1", "2"]
    assert "FAILED" in options[0][1]
    assert "RUNNING" in options[1][1]
    assert page.text_content(".jp-air-JobLogs-status") == "RUNNING"
    link = page.get_attribute(".jp-air-JobLogs-runLink", "href")
    assert link
    assert "/jupyter-air/mlflow/" in link
    assert page.get_attribute(".jp-air-JobLogs-runLink", "target") == "_blank"
    # Following: the newest lines are in view, from both ranks.
    assert page.get_attribute(".jp-air-JobLogs-follow", "aria-pressed") == "true"
    assert not any("attempt 1" in text for text in texts(page))
    shown = rows(page)
    assert {row["rank"] for row in shown} == {"0", "1"}
    assert all(row["node"] == "0" for row in shown)
    page.screenshot(path=str(artifacts / "job-logs.png"))


def test_search_shows_only_matching_lines_with_the_matches_highlighted(
    page: Any, artifacts: Path
) -> None:
    with page.expect_request(lambda r: "/logs?" in r.url and "search=HELLO+FROM" in r.url):
        page.fill(".jp-air-JobLogs-search input", "HELLO FROM")
    wait_rows(page, "row.textContent.includes('hello from')")
    shown = rows(page)
    assert sorted(row["text"] for row in shown) == [
        "hello from rank 0 attempt 2",
        "hello from rank 1 attempt 2",
    ]
    assert all(row["marks"] == ["hello from"] for row in shown)
    assert count(page) == 2
    page.screenshot(path=str(artifacts / "job-logs-search.png"))

    # The text is never parsed as HTML.
    page.fill(".jp-air-JobLogs-search input", "<b>&amp;")
    wait_rows(page, "row.textContent.includes('ValueError')")
    (row,) = rows(page)
    assert row["text"] == "ValueError: bad batch <b>&amp;</b>"
    assert row["marks"] == ["<b>&amp;"]
    assert page.query_selector(f"{ROWS} .jp-air-JobLogs-text b") is None

    page.fill(".jp-air-JobLogs-search input", "")
    page.wait_for_function(f"() => document.querySelectorAll('{ROWS} mark').length === 0")
    wait_rows(page, "true")


def test_filters_by_rank_and_level(page: Any, artifacts: Path) -> None:
    select(page, "rank", "1")
    wait_rows(page, "row.dataset.rank === '1'")
    select(page, "level", "warning")
    wait_rows(page, "row.dataset.rank === '1' && row.dataset.level !== 'info'")
    shown = rows(page)
    assert shown[0]["text"] == "WARNING: gradient overflow on rank 1, skipping step"
    assert shown[0]["level"] == "warning"
    assert shown[0]["stream"] == "out"
    assert shown[1]["text"] == "Traceback (most recent call last):"
    assert all(row["level"] == "error" and row["stream"] == "err" for row in shown[1:])
    assert shown[-1]["text"].startswith("ValueError: bad batch")
    page.screenshot(path=str(artifacts / "job-logs-warnings.png"))

    select(page, "level", "error")
    wait_rows(page, "row.dataset.level === 'error'")
    assert "WARNING: gradient overflow" not in " ".join(texts(page))

    select(page, "rank", "0")
    page.wait_for_selector(".jp-air-JobLogs-empty:has-text('No line matches')")
    assert page.query_selector(ROWS) is None

    select(page, "rank", "")
    select(page, "level", "")
    wait_rows(page, "true")
    page.wait_for_function(
        f"() => new Set([...document.querySelectorAll('{ROWS}')].map(r => r.dataset.rank)).size"
        " === 2"
    )


def test_following_shows_new_lines_and_pauses_while_scrolled_up(page: Any) -> None:
    follow = ".jp-air-JobLogs-follow"
    scroller = ".jp-air-JobLogs-scroller"
    assert page.get_attribute(follow, "aria-pressed") == "true"
    before = count(page)
    last = texts(page)[-1]
    page.wait_for_timeout(2500)
    assert count(page) > before, "new lines arrive while the job runs"
    assert texts(page)[-1] != last, "and the newest line is in view"
    at_bottom = (
        "s => { const n = document.querySelector(s);"
        " return n.scrollTop + n.clientHeight >= n.scrollHeight - 10; }"
    )
    assert page.evaluate(at_bottom, scroller)

    # Scrolling up pauses following: lines keep arriving, the view stays put.
    page.hover(scroller)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "s => document.querySelector(s).getAttribute('aria-pressed') === 'false'", arg=follow
    )
    top = page.evaluate("s => document.querySelector(s).scrollTop", scroller)
    held = count(page)
    page.wait_for_timeout(2000)
    assert count(page) > held
    assert page.evaluate("s => document.querySelector(s).scrollTop", scroller) == top
    assert "new line" in page.text_content(".jp-air-JobLogs-message")

    # The button resumes, and shows the end.
    page.click(follow)
    assert page.get_attribute(follow, "aria-pressed") == "true"
    page.wait_for_function(at_bottom, arg=scroller)

    # So does scrolling back to the bottom.
    page.hover(scroller)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "s => document.querySelector(s).getAttribute('aria-pressed') === 'false'", arg=follow
    )
    page.mouse.wheel(0, 100_000)
    page.wait_for_function(
        "s => document.querySelector(s).getAttribute('aria-pressed') === 'true'", arg=follow
    )


def test_copy_puts_the_loaded_lines_on_the_clipboard(page: Any) -> None:
    select(page, "rank", "1")
    wait_rows(page, "row.dataset.rank === '1'")
    page.click(".jp-air-JobLogs-copy")
    page.wait_for_selector(".jp-air-JobLogs-message:has-text('Copied')")
    copied = page.evaluate("() => navigator.clipboard.readText()").splitlines()
    assert len(copied) >= 45
    assert copied[0].endswith(" node 0 rank 1 INFO hello from rank 1 attempt 2")
    assert all(" node 0 rank 1 " in line for line in copied)
    assert any(" WARNING WARNING: gradient overflow" in line for line in copied)
    select(page, "rank", "")


def test_download_has_every_line_matching_the_filters(page: Any, job: str) -> None:
    select(page, "level", "warning")
    wait_rows(page, "row.dataset.level !== 'info'")
    href = page.get_attribute(".jp-air-JobLogs-download", "href")
    assert f"/jupyter-air/jobs/{job}/logs/download?" in href
    assert "level=warning" in href
    assert "attempt=2" in href
    assert "token" not in href
    with page.expect_download() as info:
        page.click(".jp-air-JobLogs-download")
    download = info.value
    assert download.suggested_filename == f"{job}-attempt-2.log"
    lines = Path(download.path()).read_text().splitlines()
    assert lines[0].endswith(
        " node 0 rank 1 WARNING WARNING: gradient overflow on rank 1, skipping step"
    )
    assert lines[1].endswith(" node 0 rank 1 ERROR Traceback (most recent call last):")
    assert lines[-1].endswith(" ERROR ValueError: bad batch <b>&amp;</b>")
    assert not any(" INFO " in line for line in lines)
    select(page, "level", "")
    wait_rows(page, "true")


def test_stacks_shows_where_each_running_rank_is_and_closes(page: Any, artifacts: Path) -> None:
    page.click(".jp-air-JobLogs-stacks")
    panel = ".jp-air-JobLogs-stacksPanel"
    page.wait_for_selector(f"{panel} .jp-air-JobLogs-rankStacks", timeout=60_000)
    heads = page.locator(f"{panel} h4").all_text_contents()
    assert [h.split(" (pid")[0] for h in heads] == ["node 0 rank 0", "node 0 rank 1"]
    assert page.locator(f"{panel} h3").first.text_content().endswith(": asked for")
    dumps = page.locator(f"{panel} pre").all_text_contents()
    assert all('"MainThread"' in d and "<module>" in d for d in dumps), dumps
    page.screenshot(path=str(artifacts / "job-logs-stacks.png"))
    page.click(".jp-air-JobLogs-stacksClose")
    page.wait_for_selector(panel, state="detached")


def test_the_cells_stacks_link_opens_the_view_on_the_stacks_taken_now(
    browser: Any, logs_lab: Lab, job: str
) -> None:
    """The link a cell's header shows (``logs_url(stacks=True)``), opened as a page."""
    page = open_page(browser, logs_lab, f"&air-job={job}&air-stacks=1")
    try:
        panel = ".jp-air-JobLogs-stacksPanel"
        page.wait_for_selector(f"{panel} .jp-air-JobLogs-rankStacks", timeout=60_000)
        assert page.locator(f"{panel} h4").count() == 2
        assert page.locator(f"{panel} h3").first.text_content().endswith(": asked for")
        assert "air-stacks" not in page.url, "the address bar forgets the route"
    finally:
        page.context.close()


def test_the_end_of_the_job_shows_its_last_lines_and_status(
    page: Any, control: Path, artifacts: Path
) -> None:
    (control / "stop").touch()
    page.wait_for_function(
        "() => document.querySelector('.jp-air-JobLogs-status').textContent === 'SUCCEEDED'",
        timeout=60_000,
    )
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-JobLogs-text')]"
        ".filter(n => n.textContent.startsWith('done rank')).length === 2",
        timeout=15_000,
    )
    assert follow_disabled(page), "an ended job has nothing to follow"
    page.wait_for_selector(".jp-air-JobLogs-message:has-text('the job has ended')")
    page.screenshot(path=str(artifacts / "job-logs-ended.png"))

    # The download now has every line of the attempt.
    with page.expect_download() as info:
        page.click(".jp-air-JobLogs-download")
    lines = Path(info.value.path()).read_text().splitlines()
    assert sum("hello from rank" in line for line in lines) == 2
    assert sum("done rank" in line for line in lines) == 2
    assert len(lines) == count(page)


def test_runs_that_wait_for_their_tracking_server_say_so_until_they_have_landed(
    browser: Any, logs_lab: Lab, job: str, air_home: Path, artifacts: Path
) -> None:
    """An ended job whose run's end and logs its server did not take (it was down): one
    line under the toolbar, which goes by itself once they have landed."""
    store = JobStore(air_home)
    until(lambda: store.get(job).done, "the job's end", timeout=120)
    files = AttemptDir(store.attempt_dir(job, 2))
    refused = ConnectionRefusedError("Connection refused")
    backlog.failing(files, "http://mlflow.team:5000", refused, {Part.END, Part.LOGS})
    page = open_page(browser, logs_lab, f"&air-job={job}")
    try:
        row = page.wait_for_selector(".jp-air-JobLogs-tracking", timeout=60_000)
        assert row is not None
        text = row.text_content() or ""
        assert text.startswith("⚠ tracking: http://mlflow.team:5000 unreachable since "), text
        assert text.endswith(" (connection refused); the run's end and its logs waiting"), text
        page.screenshot(path=str(artifacts / "job-logs-tracking.png"))

        backlog.landed(files, {Part.END, Part.LOGS})  # the tail process got them through
        page.wait_for_selector(".jp-air-JobLogs-tracking", state="detached", timeout=60_000)
    finally:
        page.context.close()


def follow_disabled(page: Any) -> bool:
    """Whether Follow turns disabled: the header re-renders (React) after the lines it
    follows show, so it is given a moment rather than read at once."""
    try:
        page.wait_for_selector(".jp-air-JobLogs-follow button:disabled", timeout=10_000)
    except Exception:  # playwright's TimeoutError: it stayed enabled
        return False
    return True


def test_the_attempt_selector_shows_the_failed_first_attempt(page: Any) -> None:
    select(page, "attempt", "1")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-JobLogs-text')]"
        ".some(n => n.textContent === 'giving up on the first attempt')"
    )
    shown = rows(page)
    assert sorted(row["text"] for row in shown) == [
        "giving up on the first attempt",
        "hello from rank 0 attempt 1",
        "hello from rank 1 attempt 1",
    ]
    assert shown[-1]["text"] == "giving up on the first attempt"
    assert shown[-1]["rank"] == "1"
    assert shown[-1]["stream"] == "err"
    assert follow_disabled(page), "a failed attempt has ended"
    href = page.get_attribute(".jp-air-JobLogs-download", "href")
    assert "attempt=1" in href
    cause = page.text_content(".jp-air-JobLogs-cause")
    assert cause == "Attempt 1 failed: rank 1 exited with code 3", cause


def test_the_palette_lists_recent_jobs_and_opens_one(
    browser: Any, logs_lab: Lab, job: str, artifacts: Path
) -> None:
    page = open_fresh_page(browser, logs_lab)
    run_from_palette(page, "Open job logs", "jupyter-air:open-job-logs")
    # The dialog opens once the lab has answered for the recent jobs: over 30 s once,
    # on a loaded machine (run35), where the other tests' processes had the cores.
    page.wait_for_selector(".jp-air-JobPicker-list", timeout=120_000)
    labels = page.eval_on_selector_all(
        ".jp-air-JobPicker-item", "items => items.map(i => i.textContent)"
    )
    assert labels[0] == f"{job} · SUCCEEDED · logs-ui"
    page.fill(".jp-air-JobPicker-filter", "no such job")
    assert page.query_selector(".jp-air-JobPicker-item.jp-mod-selected") is None
    page.fill(".jp-air-JobPicker-filter", "succeeded")
    page.wait_for_selector(f'.jp-air-JobPicker-item.jp-mod-selected[data-job-id="{job}"]')
    page.screenshot(path=str(artifacts / "job-logs-picker.png"))
    page.click(".jp-Dialog button.jp-mod-accept")
    page.wait_for_selector(f'{VIEW}[data-job-id="{job}"] .jp-air-JobLogs-line')
    page.context.close()


def test_a_link_to_the_view_in_a_cell_output_opens_it_in_this_lab(
    browser: Any, logs_lab: Lab, job: str
) -> None:
    page = open_fresh_page(browser, logs_lab)
    page.evaluate("() => { window.notReloaded = true; }")
    click_link(page, f"/lab?air-job={job}&air-attempt=1")
    page.wait_for_selector(f'{VIEW}[data-job-id="{job}"] .jp-air-JobLogs-line')
    assert page.evaluate("() => window.notReloaded === true")
    assert page.input_value(".jp-air-JobLogs-attempt select") == "1"
    assert len(page.context.pages) == 1
    page.context.close()


def test_a_large_log_loads_its_end_and_renders_only_the_rows_in_view(
    browser: Any, logs_lab: Lab, air_home: Path, artifacts: Path
) -> None:
    store = JobStore(air_home)
    job = store.create(job_spec("command", nproc_per_node=2))
    store.start_attempt(job.id, 1, None)
    total = 200_000
    for rank in (0, 1):
        log = RankLog(store.attempt_dir(job.id, 1) / "logs" / "node_0" / f"rank_{rank}.log")
        for i in range(rank, total, 2):
            log.write("OI", f"line {i:06d} of rank {rank} " + "x" * 40, ts=1_764_400_000 + i / 1000)
        log.close()
    store.end_attempt(job.id, 1, AttemptStatus.SUCCEEDED, [0, 0], None, None)
    store.update(job.id, status="SUCCEEDED", ended=1_764_400_000 + total / 1000)

    page = open_fresh_page(browser, logs_lab)
    click_link(page, f"/lab?air-job={job.id}")
    page.wait_for_selector(f'{VIEW}[data-job-id="{job.id}"] .jp-air-JobLogs-line', timeout=60_000)
    page.wait_for_selector(".jp-air-JobLogs-message:has-text('ended')")
    assert count(page) == 1000
    assert "last 1,000" in page.text_content(".jp-air-JobLogs-note")
    rendered = len(page.query_selector_all(ROWS))
    assert 0 < rendered < 120, rendered
    assert texts(page)[-1].startswith(f"line {total - 1:06d} of rank 1")
    page.screenshot(path=str(artifacts / "job-logs-large.png"))

    # Scrolling renders other rows, never all of them.
    page.eval_on_selector(".jp-air-JobLogs-scroller", "n => { n.scrollTop = 0; }")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-air-JobLogs-text')]"
        f".some(n => n.textContent.startsWith('line {total - 1000:06d} '))"
    )
    assert len(page.query_selector_all(ROWS)) < 120

    with page.expect_download() as info:
        page.click(".jp-air-JobLogs-download")
    with open(info.value.path()) as f:
        assert sum(1 for _ in f) == total
    page.context.close()


#: A rank stuck in a sleep whose code's file is named like markup: py-spy prints the file
#: name between its colour escapes.
STUCK_SCRIPT = (
    "exec(compile('import time\\nprint(\"ready\", flush=True)\\ntime.sleep(120)',"
    " '<img src=x onerror=alert(1)>', 'exec'))"
)


def stuck_job(air_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An ended job with a set of stacks taken by py-spy in its colours (forced by
    ``CLICOLOR_FORCE``, as a terminal's or a CI's environment has them)."""
    store = JobStore(air_home)
    job = store.create(job_spec("command", nproc_per_node=1, run_name="stuck-ui"))
    store.start_attempt(job.id, 1, None)
    rank = subprocess.Popen([sys.executable, "-c", STUCK_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout is not None
        assert rank.stdout.readline() == "ready\n"
        monkeypatch.setenv("CLICOLOR_FORCE", "1")
        taken = stacks.dump_ranks({0: rank.pid})
    finally:
        rank.kill()
        rank.wait()
    assert "\x1b[32m<module>\x1b[0m" in (taken[0].text or ""), taken  # py-spy's colours
    stacks.save(store.attempt_dir(job.id, 1), stacks.new_name(), "asked for", taken)
    store.end_attempt(job.id, 1, AttemptStatus.CANCELLED, [-9])
    store.update(job.id, status="CANCELLED", ended=time.time())
    return job.id


def test_stacks_show_py_spys_colours_not_its_escapes_and_copy_plain_text(
    browser: Any,
    logs_lab: Lab,
    air_home: Path,
    job: str,
    artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two logs tabs are told apart by their runs' names; the stacks of the second show
    py-spy's colours as JupyterLab's ANSI classes, its text (markup included) as text."""
    stuck = stuck_job(air_home, monkeypatch)
    page = open_fresh_page(browser, logs_lab)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    click_link(page, f"/lab?air-job={job}")
    page.wait_for_selector(f'{VIEW}[data-job-id="{job}"] .jp-air-JobLogs-line', timeout=60_000)
    click_link(page, f"/lab?air-job={stuck}")
    view = f'{VIEW}[data-job-id="{stuck}"]'
    page.wait_for_selector(f"{view} .jp-air-JobLogs-status:has-text('CANCELLED')")

    tabs = "tabs => tabs.map(t => [t.querySelector('.lm-TabBar-tabLabel').textContent, t.title])"
    page.wait_for_function(
        f"() => [...document.querySelectorAll('{LOGS_TAB}')]"
        ".every(t => !t.textContent.startsWith('Job logs'))"
    )
    assert page.eval_on_selector_all(LOGS_TAB, tabs) == [
        [f"logs-ui · {job.rsplit('-', 1)[1]}", f"Job logs — logs-ui ({job})"],
        [f"stuck-ui · {stuck.rsplit('-', 1)[1]}", f"Job logs — stuck-ui ({stuck})"],
    ]

    page.click(f"{view} .jp-air-JobLogs-stacks")
    panel = f"{view} .jp-air-JobLogs-stacksPanel"
    page.wait_for_selector(f"{panel} .jp-air-JobLogs-rankStacks", timeout=60_000)
    dump = page.text_content(f"{panel} pre") or ""
    assert "\x1b" not in dump, dump
    assert not re.search(r"\[\d+(;\d+)*m", dump), dump
    assert "<module> (<img src=x onerror=alert(1)>:3)" in dump, dump
    assert page.query_selector(f"{panel} img") is None
    spans = page.eval_on_selector_all(
        f"{panel} pre span",
        "spans => spans.map(s => [s.className, s.textContent, getComputedStyle(s).color,"
        " getComputedStyle(s.parentElement).color])",
    )
    coloured = {(cls, text) for cls, text, colour, plain in spans if colour != plain}
    assert ("ansi-green-fg", "<module>") in coloured, spans
    assert ("ansi-cyan-fg", "<img src=x onerror=alert(1)>") in coloured, spans
    page.locator(panel).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "job-logs-stacks-colours.png"))

    page.click(f"{panel} .jp-air-JobLogs-stacksCopy")
    page.wait_for_selector(f"{view} .jp-air-JobLogs-message:has-text('Copied the stacks')")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied.startswith("Stacks of attempt 1, "), copied
    assert "\n=== node 0 rank 0 (pid " in copied, copied
    assert "    <module> (<img src=x onerror=alert(1)>:3)\n" in copied, copied
    assert "\x1b" not in copied, copied
    assert dialogs == []
    page.context.close()
