"""``scripts/gpu-wheelhouse``: the wheels the GPU machine needs to run the kit, built here.

The machine reaches no package index, runs Python 3.12 on x86-64 and holds a CUDA
PyTorch and many common packages (device-packages.txt). So: our wheel, plus every
requirement of it (and of the kit: a kernel, pytest-jupyter for tests/conftest.py)
resolved for that interpreter here, less what the machine holds, less what no check
uses, and never torch. What travels to the machine (this working tree and the
wheelhouse) must stay within the device tool's 64 MiB; the script refuses otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEVICE_PACKAGES = Path(__file__).with_name("device-packages.txt")
BUDGET = 64 * 1024**2  # what one call of the device tool carries, working tree included
PYTHON_VERSION = "3.12"
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35)),
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
#: What the kit needs beside jupyter_air's own requirements.
KIT_EXTRAS = ("ipykernel", "pytest-jupyter")
#: Required by something, used by no check: left out to stay within the budget.
NOT_NEEDED = {
    "debugpy": "ipykernel's debugger (imported only when a debugger attaches)",
    "widgetsnbextension": "the classic Notebook's ipywidgets assets (no browser here)",
}
#: The machine's own CUDA builds must be the ones used.
NEVER = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-(?!ml-py$).*)$")  # CUDA libraries


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def device_packages() -> set[str]:
    lines = DEVICE_PACKAGES.read_text().splitlines()
    return {normalize(line) for line in lines if line.strip() and not line.startswith("#")}


def target_options() -> list[str]:
    platforms = [f"--platform={p}" for p in PLATFORMS]
    return [
        "--only-binary=:all:", f"--python-version={PYTHON_VERSION}",
        "--implementation=cp", f"--abi=cp{PYTHON_VERSION.replace('.', '')}", *platforms,
    ]  # fmt: skip


def pip(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"gpu-wheelhouse: pip {args[0]} failed:\n{proc.stderr[-3000:]}")


def build_our_wheel(out: Path) -> Path:
    if not (ROOT / "jupyter_air" / "labextension" / "package.json").is_file():
        raise SystemExit("gpu-wheelhouse: build the front end first (make setup)")
    pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT))
    (wheel,) = out.glob("jupyter_air-*.whl")
    return wheel


def resolve(wheel: Path, work: Path) -> list[tuple[str, str]]:
    """(name, version) of everything installing ``wheel`` and the extras needs there."""
    report = work / "resolved.json"
    pip(
        "install", "--dry-run", "--ignore-installed", "-q", "--report", str(report),
        "--target", str(work / "target"), *target_options(), str(wheel), *KIT_EXTRAS,
    )  # fmt: skip
    found = json.loads(report.read_text())["install"]
    return [(item["metadata"]["name"], item["metadata"]["version"]) for item in found]


def tree_bytes() -> int:
    """Tracked and untracked-not-ignored files: what the device tool sends besides carry."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    paths = (ROOT / p.decode() for p in listing.split(b"\0") if p)
    return sum(p.stat().st_size for p in paths if p.is_file())


def build(out: Path) -> dict[str, Any]:
    on_device = device_packages()
    with tempfile.TemporaryDirectory(prefix="air-wheelhouse-") as tmp:
        work = Path(tmp)
        staged = work / "wheels"
        wheel = build_our_wheel(staged)
        resolved = resolve(wheel, work)
        fetch, left, skipped = [], [], {}
        for name, version in resolved:
            key = normalize(name)
            if key == "jupyter-air":
                continue
            if NEVER.match(key):
                raise SystemExit(f"gpu-wheelhouse: {name} {version} was resolved: it must not be")
            if key in NOT_NEEDED:
                skipped[name] = NOT_NEEDED[key]
            elif key in on_device:
                left.append(f"{name}=={version}")
            else:
                fetch.append(f"{name}=={version}")
        pip("download", "--no-deps", "-q", "-d", str(staged), *target_options(), *fetch)
        wheels = sorted(staged.glob("*.whl"))
        sizes = {w.name: w.stat().st_size for w in wheels}
        wheels_bytes, tree = sum(sizes.values()), tree_bytes()
        total = wheels_bytes + tree
        if total > BUDGET:
            largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:8]
            raise SystemExit(
                f"gpu-wheelhouse: {total / 2**20:.1f} MiB would travel (wheels "
                f"{wheels_bytes / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB), "
                f"over {BUDGET / 2**20:.0f} MiB; largest: {largest}"
            )
        manifest = {
            "python": PYTHON_VERSION,
            "platforms": PLATFORMS,
            "wheels": sizes,
            "wheels_bytes": wheels_bytes,
            "tree_bytes": tree,
            "total_bytes": total,
            "left_to_the_machine": left,
            "not_needed": skipped,
        }
        (staged / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
        fresh = out.with_name(out.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(staged, fresh)
        shutil.rmtree(out, ignore_errors=True)
        fresh.rename(out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-wheelhouse", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / ".gpu-check" / "wheelhouse", help="replaced"
    )
    args = parser.parse_args(argv)
    manifest = build(args.out)
    print(
        f"{args.out}: {len(manifest['wheels'])} wheels, "
        f"{manifest['wheels_bytes'] / 2**20:.1f} MiB; with the working tree "
        f"{manifest['total_bytes'] / 2**20:.1f} MiB of {BUDGET / 2**20:.0f}; "
        f"{len(manifest['left_to_the_machine'])} packages left to the machine's own"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
