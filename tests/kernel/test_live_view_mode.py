"""Where a cell's live view uses widgets: only in a kernel whose frontend draws them."""

from __future__ import annotations

import pytest

from jupyter_air.kernel.live_view import LiveView, widgets_available
from jupyter_air.tracking import ui_links


def test_a_kernel_no_frontend_started_gets_static_outputs_without_a_look_for_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nbclient, nbconvert and a bare ``KernelManager`` set no ``VSCODE_PID`` and, where
    they set ``JPY_PARENT_PID`` at all, one no server has: static, and without reading
    every server's runtime file at every cell (the cell's own time)."""

    def looked(*_: object) -> None:
        raise AssertionError("looked for a Jupyter server")

    monkeypatch.setattr(ui_links, "current_jupyter_server", looked)
    assert not widgets_available(LiveView(), environ={})
    monkeypatch.setattr(ui_links, "current_jupyter_server", lambda env: None)
    assert not widgets_available(LiveView(), environ={"JPY_PARENT_PID": "1"})


def test_the_mode_setting_overrides_the_guess() -> None:
    assert widgets_available(LiveView(mode="widget"), environ={})
    assert not widgets_available(LiveView(mode="static"), environ={"VSCODE_PID": "1"})
