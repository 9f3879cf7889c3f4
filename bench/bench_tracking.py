"""What one ``log_metrics`` call costs a rank (issue 23; see docs/benchmarks.md).

Side by side in this one script, 3 metrics a call, arms alternating within each round,
per-call times of every round pooled, p50 and p99 kept:

1. ``journal``: ``jupyter_air.log_metrics`` in a job (its journal in an attempt's
   directory), what a rank runs now;
2. ``client``: ``MlflowClient.log_metric`` once per key into an embedded sqlite store,
   what ``log_metrics`` did before;
3. ``async``: ``mlflow.log_metrics(..., synchronous=False)`` into the same store,
   MLflow's own asynchronous logging (its queue; its flush is not timed).

Then the shipping: the journal's points of all rounds shipped to the sqlite store
(``tracking.journal.ship``), points per second, and all of them found there once.
Run: ``.venv/bin/python bench/bench_tracking.py [--calls 2000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_air.job_dir import AttemptDir  # noqa: E402
from jupyter_air.tracking import journal  # noqa: E402


def timed(call: Callable[[int], None], calls: int) -> list[float]:
    times = []
    for step in range(calls):
        start = time.perf_counter()
        call(step)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import mlflow
    from mlflow import MlflowClient

    tmp = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    uri = f"sqlite:///{tmp}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("bench")
    files = AttemptDir(tmp / "attempt_1").make()
    journal_run = client.create_run(experiment).info.run_id
    os.environ.update(
        {"RANK": "0", "MLFLOW_RUN_ID": journal_run, journal.JOURNAL_ENV: str(files.metrics_journal)}
    )
    from jupyter_air import log_metrics

    def values(step: int) -> dict[str, float]:
        return {"loss": 1 / (step + 1), "acc": step / 1e4, "lr": 1e-3}

    def journaled(step: int) -> None:
        log_metrics(values(step), step=step)

    client_run = client.create_run(experiment).info.run_id

    def per_key(step: int) -> None:
        for key, value in values(step).items():
            client.log_metric(client_run, key, value, step=step)

    mlflow.start_run(run_id=client.create_run(experiment).info.run_id)
    os.environ["MLFLOW_RUN_ID"] = journal_run  # start_run takes it out of the environment

    def asynchronous(step: int) -> None:
        mlflow.log_metrics(values(step), step=step, synchronous=False)

    arms = {"journal": journaled, "client": per_key, "async": asynchronous}
    pooled: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, call in arms.items():
            pooled[name] += timed(call, args.calls)
    mlflow.end_run()

    print(f"log_metrics, 3 metrics a call, {args.rounds} x {args.calls} calls per arm")
    for name, times in pooled.items():
        cut = statistics.quantiles(times, n=100)
        print(f"  {name:8} p50 {cut[49] * 1e3:8.4f} ms   p99 {cut[98] * 1e3:8.4f} ms")
    ratio = statistics.median(pooled["client"]) / statistics.median(pooled["journal"])
    print(f"  p50 client / journal: {ratio:,.0f}x")

    start = time.perf_counter()
    shipped = journal.ship(client, files)
    seconds = time.perf_counter() - start
    history = client.get_metric_history(journal_run, "loss")
    print(f"shipping: {shipped} points in {seconds:.2f} s ({shipped / seconds:,.0f} points/s)")
    print(f"  in the store once each: {len(history) == args.rounds * args.calls}")


if __name__ == "__main__":
    main()
