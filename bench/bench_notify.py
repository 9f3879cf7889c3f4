"""A job's end to its notification (issue 27; see docs/benchmarks.md).

Side by side, for each of ``--rounds`` failing 2-rank ``air run`` jobs, the moments its
end reaches the user by every path at once:

1. baseline: ``air run --watch`` prints the job's end in the terminal that started it;
2. the webhook: a real HTTP receiver on loopback takes the POST;
3. the mail: a real SMTP server (aiosmtpd, STARTTLS, login) takes it;
4. JupyterLab: a tab's long poll of a real Jupyter server (``GET
   jupyter-air/notifications?wait=25``, what the notification plugin runs) returns it.

Each is taken from the job's recorded end (its supervisor's ``ended``). The target is
p50 <= 2 s for 2, 3 and 4; their ratio to the baseline says what the notification adds to
what a user watching the job already gets.

Run: ``.venv/bin/python bench/bench_notify.py [--rounds 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_runs import get, start_server  # noqa: E402

from jupyter_air.jobs.store import JobStore  # noqa: E402
from tests.notify_servers import SmtpServer, WebhookReceiver, self_signed  # noqa: E402

TRAIN = """\
import os, sys, time
time.sleep(1.0)
print(f"rank {os.environ['RANK']}: giving up", flush=True)
sys.exit(3 if os.environ["RANK"] == "1" else 0)
"""


class LabTab:
    """What the notification plugin of an open tab does: a long poll, again and again;
    ``seen``: when each notification's job id came back."""

    def __init__(self, url: str, token: str) -> None:
        self.seen: dict[str, float] = {}
        self._url, self._token = url, token
        self._stop = threading.Event()
        first = json.loads(get(f"{url}jupyter-air/notifications", token))
        self._last = int(first["last"])
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            route = f"{self._url}jupyter-air/notifications?after={self._last}&wait=25"
            try:
                page = json.loads(get(route, self._token))
            except OSError as err:  # as the plugin does: try again (and say it here)
                if self._stop.is_set():
                    return
                print(f"long poll: {err!r}", file=sys.stderr)
                time.sleep(1.0)
                continue
            now = time.time()
            for note in page["notifications"]:
                self.seen.setdefault(note["job_id"], now)
            self._last = int(page["last"])

    def stop(self) -> None:
        self._stop.set()


def one_job(work: Path, env: dict[str, str], hook: str) -> tuple[str, float]:
    """A failing job, watched: its id and when ``--watch`` printed its end."""
    workload = {
        "experiment_name": "bench-notify",
        "command": f"{sys.executable} train.py",
        "compute": {"nproc_per_node": 2},
        "notify": [
            {"webhook": hook, "on": ["failure"]},
            {"email": "ada@example.com", "on": ["failure"]},
            {"jupyterlab": True, "on": ["failure"]},
        ],
    }
    (work / "w.yaml").write_text(json.dumps(workload))
    watch = subprocess.Popen(
        [sys.executable, "-m", "jupyter_air.cli", "run", "-f", "w.yaml", "--watch"],
        cwd=work, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    job_id, printed = "", 0.0
    for line in watch.stdout:
        if line.startswith("Job ") and " submitted" in line:
            job_id = line.split()[1]
        if job_id and line.startswith(f"Job {job_id} failed"):
            printed = time.time()
    watch.wait(120)
    assert job_id, "the watch did not print the job's id"
    assert printed, "the watch did not print the job's end"
    return job_id, printed


def wait_for(check: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    (work / "train.py").write_text(TRAIN)
    cert, key = self_signed(work)
    (work / "pw").write_text("s3cret\n")
    smtp = SmtpServer(tls=(cert, key), login=("ada", "s3cret")).start()
    receiver = WebhookReceiver().start()
    env = {
        **os.environ,
        "AIR_HOME": str(work / "air"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db",
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        "SSL_CERT_FILE": str(cert),
        "AIR_SMTP_HOST": "127.0.0.1",
        "AIR_SMTP_PORT": str(smtp.port),
        "AIR_SMTP_USER": "ada",
        "AIR_SMTP_PASSWORD_FILE": str(work / "pw"),
    }
    (work / "root").mkdir()
    lab, url, token = start_server(work, "jupyter_server")
    tab = LabTab(url, token)
    store = JobStore(work / "air")
    took: dict[str, list[float]] = {"watch": [], "webhook": [], "mail": [], "lab": []}
    try:
        for round_ in range(args.rounds):
            job_id, printed = one_job(work, env, receiver.url)
            wait_for(lambda: len(receiver.received) > round_, "the webhook")  # noqa: B023
            wait_for(lambda: len(smtp.inbox.received) > round_, "the mail")  # noqa: B023
            wait_for(lambda: job_id in tab.seen, "the tab")  # noqa: B023
            ended = store.get(job_id).ended
            assert ended is not None
            took["watch"].append(printed - ended)
            took["webhook"].append(receiver.received[round_] - ended)
            took["mail"].append(smtp.inbox.received[round_] - ended)
            took["lab"].append(tab.seen[job_id] - ended)
            said = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in took.items())
            print(f"round {round_ + 1}: {said}")
    finally:
        tab.stop()
        lab.terminate()
        lab.wait(30)
        smtp.stop()
        receiver.stop()
        shutil.rmtree(work, ignore_errors=True)
    watch = statistics.median(took["watch"])
    print(f"\n{'path':10} {'p50 s':>7} {'max s':>7} {'p50 / watch':>12}")
    for name, values in took.items():
        p50 = statistics.median(values)
        print(f"{name:10} {p50:7.2f} {max(values):7.2f} {p50 / watch:12.2f}")


if __name__ == "__main__":
    main()
