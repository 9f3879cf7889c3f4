"""Tests of a library's integration that skip where the library is not installed."""

from __future__ import annotations

import importlib.util

import pytest


def needs(package: str) -> pytest.MarkDecorator:
    """Skip unless ``package`` is installed. It is looked up, not imported: every xdist
    worker collects every module, and ``importorskip`` at a module's top would load
    torch and the library (about 4 CPU s for Lightning) in each of them."""
    missing = importlib.util.find_spec(package) is None
    return pytest.mark.skipif(missing, reason=f"{package} is not installed")
