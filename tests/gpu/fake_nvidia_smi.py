"""A stand-in for ``nvidia-smi --query-gpu / --query-compute-apps`` on machines without a
GPU: it answers from the fake NVML driver's scenario file (``FAKE_NVML_SCENARIO``), read
on its own, not through NVML, so the kit's comparison meets an independent reader.

Only what the kit asks is supported: ``--query-gpu=...`` or ``--query-compute-apps=...``
with ``--format=csv,noheader,nounits``. A sequence in the scenario answers its first item.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MIB = 1024 * 1024
NA = "[N/A]"


def parse(text: str) -> tuple[dict[str, str], list[dict[str, list[str]]]]:
    """Top-level keys, and per GPU each key's tokens (repeatable keys accumulate)."""
    top: dict[str, str] = {}
    gpus: list[dict[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(" ")
        if key == "gpu":
            gpus.append({})
        elif gpus:
            gpus[-1].setdefault(key, []).append(rest.strip())
        else:
            top[key] = rest.strip()
    return top, gpus


def first_number(gpu: dict[str, list[str]], key: str) -> int | None:
    if key not in gpu:
        return None
    token = gpu[key][0].split()[0]
    return int(token) if token.isdigit() else None


def gpu_field(name: str, index: int, gpu: dict[str, list[str]], top: dict[str, str]) -> str:
    def number(key: str) -> int | None:
        return first_number(gpu, key)

    if name == "index":
        return str(index)
    if name == "name":
        return gpu["name"][0]
    if name == "uuid":
        return gpu.get("uuid", [f"GPU-fa4e{index:04x}-0000-4000-8000-{index:012x}"])[0]
    if name == "driver_version":
        return top.get("driver_version", NA)
    if name == "memory.total":
        total = number("mem_total")
        return NA if total is None else str(total // MIB)
    if name == "memory.used":  # as drivers since R510 count it: reserved memory apart
        used, reserved = number("mem_used"), number("mem_reserved") or 0
        v2 = gpu.get("memory_v2", ["1"])[0] != "0"
        return NA if used is None else str((used - reserved if v2 else used) // MIB)
    simple = {"utilization.gpu": "util", "temperature.gpu": "temp"}
    if name in simple:
        value = number(simple[name])
        return NA if value is None else str(value)
    watts = {"power.draw": "power", "enforced.power.limit": "power_limit"}
    if name in watts:
        mw = number(watts[name])
        return NA if mw is None else f"{mw / 1000:.2f}"
    raise SystemExit(f"fake nvidia-smi: field {name!r} is not supported")


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "[Not Found]"


def main(argv: list[str]) -> int:
    options = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    if options.get("--format") != "csv,noheader,nounits":
        print("fake nvidia-smi: only --format=csv,noheader,nounits", file=sys.stderr)
        return 2
    path = os.environ.get("FAKE_NVML_SCENARIO")
    if not path or not Path(path).is_file():
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    top, gpus = parse(Path(path).read_text())
    if "--query-gpu" in options:
        fields = options["--query-gpu"].split(",")
        for index, gpu in enumerate(gpus):
            print(", ".join(gpu_field(f, index, gpu, top) for f in fields))
        return 0
    if "--query-compute-apps" in options:
        fields = options["--query-compute-apps"].split(",")
        for index, gpu in enumerate(gpus):
            for entry in gpu.get("process", []):
                pid, used = (int(t) for t in entry.split())
                values = {
                    "pid": str(pid),
                    "process_name": process_name(pid),
                    "used_memory": str(used // MIB),
                    "gpu_uuid": gpu_field("uuid", index, gpu, top),
                }
                print(", ".join(values[f] for f in fields))
        return 0
    print("fake nvidia-smi: give --query-gpu= or --query-compute-apps=", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
