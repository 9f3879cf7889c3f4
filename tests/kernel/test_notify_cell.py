"""A cell and a function ask to be told of their end (``--notify``, ``notify=``), in a
real kernel; the job's supervisor posts to a real webhook receiver."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_air.jobs.store import JobStore
from tests.kernel.conftest import Kernel
from tests.notify_servers import WebhookReceiver
from tests.waits import until

#: Every test drives a real kernel: left to make test.
pytestmark = pytest.mark.heavy

JOB_ID = re.compile(r"Job (\d{8}-\d{6}-[0-9a-f]{6})")


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def test_a_failing_cell_that_asked_tells_its_webhook_with_its_traceback(
    kernel: Kernel, hook: WebhookReceiver
) -> None:
    execution = kernel.run(
        f'%%air_distributed -n 1 --notify "webhook:{hook.url} on:failure"\n'
        "raise ValueError('bad batch 17')"
    )
    assert execution.error is not None
    until(lambda: hook.posts, "the failure's notification")
    ((post, _),) = hook.posts
    assert post["event"] == "failure"
    assert post["title"].startswith(f"air job {post['job_id']} (")
    assert any("ValueError: bad batch 17" in line for line in post["lines"])
    hook.posts.clear()


def test_a_function_asks_with_notify_and_a_bad_target_is_refused_in_one_line(
    kernel: Kernel, hook: WebhookReceiver, air_home: Path
) -> None:
    kernel.run(
        "from jupyter_air import distributed\n"
        f"@distributed(nproc_per_node=1, notify=[{{'webhook': {hook.url!r}, 'on': ['success']}}])\n"
        "def one():\n"
        "    return 1\n"
    )
    assert kernel.run("one.distributed()").value() == "1"
    until(lambda: hook.posts, "the success's notification")
    ((post, _),) = hook.posts
    assert post["event"] == "success"
    jobs_before = len(JobStore(air_home).jobs())
    bad = kernel.run('%%air_distributed -n 1 --notify "pager:on-call"\nprint("never")')
    assert bad.stderr.startswith("UsageError: --notify: say one of jupyterlab")
    assert len(JobStore(air_home).jobs()) == jobs_before, "nothing started"
    refused = kernel.run("distributed(notify=[{'email': 'not-an-address'}])(print)")
    assert refused.error is not None
    assert "--notify: email: 'not-an-address' is not an email address" in refused.error["evalue"]
