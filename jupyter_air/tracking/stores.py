"""The MLflow tracking stores jobs have written to, by a short key.

The server serves an MLflow UI for a local store under ``jupyter-air/mlflow/<key>/``.
Requests carry the key, never a path or URI: the server only serves stores that a
job registered here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..paths import air_home, write_private

KEY = re.compile(r"[0-9a-f]{16}")


def store_key(tracking_uri: str) -> str:
    return hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]


def _registry(home: Path | None = None) -> Path:
    return (home or air_home()) / "tracking-stores.json"


def register_store(tracking_uri: str, home: Path | None = None) -> str:
    """Remember a tracking store and return its key (idempotent, safe across processes)."""
    key = store_key(tracking_uri)
    path = _registry(home)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stores = _read(path)
        if stores.get(key) != tracking_uri:
            stores[key] = tracking_uri
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            write_private(tmp, json.dumps(stores, indent=1, sort_keys=True))
            os.replace(tmp, path)
    return key


def lookup_store(key: str, home: Path | None = None) -> str | None:
    """The tracking URI registered under ``key``, if any."""
    if not KEY.fullmatch(key):
        return None
    return registered_stores(home).get(key)


def registered_stores(home: Path | None = None) -> dict[str, str]:
    """Every registered store: key -> tracking URI."""
    return _read(_registry(home))


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


@contextmanager
def store_lock(tracking_uri: str, home: Path | None = None) -> Iterator[None]:
    """One process at a time for this tracking store (across kernels, the CLI, supervisors)."""
    locks = (home or air_home()) / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{store_key(tracking_uri)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
