"""What a node's first system-metrics sample costs (issue 37, item 7).

Every supervisor of a local job and every node agent of a Ray or Slurm job samples its
machine; the first sample loads the sampler. Two ways, each in a fresh process,
alternating, ``--rounds`` times: MLflow's own monitors (``CPUMonitor``, ``DiskMonitor``,
``NetworkMonitor``, which the sampler used until it wrote them on psutil itself) and
ours (``tracking.system_metrics.SystemSampler``). The figures: CPU seconds from the
process's start of the import to the first sample taken, the wall time, the peak RSS.

``.venv/bin/python bench/bench_sampler.py [--rounds 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

PROBE = """
import json, resource, sys, time
cpu, wall = time.process_time(), time.perf_counter()
if sys.argv[1] == "mlflow":
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
    from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
    from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor
    monitors = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    for monitor in monitors:
        monitor.collect_metrics()
    sample = {k: v for m in monitors for k, v in m.aggregate_metrics().items()}
else:
    from jupyter_air.gpu.nvml import Nvml
    from jupyter_air.tracking.system_metrics import SystemSampler
    sample = SystemSampler(Nvml()).sample().metrics
print(json.dumps({
    "cpu": time.process_time() - cpu,
    "wall": time.perf_counter() - wall,
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "names": sorted(sample),
}))
"""


def probe(which: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, which], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    found: dict[str, list[dict[str, Any]]] = {"mlflow": [], "ours": []}
    for _ in range(args.rounds):
        for which in found:
            found[which].append(probe(which))
    names = {which: set(runs[0]["names"]) for which, runs in found.items()}
    print(f"MLflow's names all kept: {names['mlflow'] <= names['ours']}")
    print("| first sample, medians | CPU s | wall s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: |")
    for which, runs in found.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("cpu", "wall", "rss_mib")}
        print(f"| {which} | {med['cpu']:.3f} | {med['wall']:.3f} | {med['rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
