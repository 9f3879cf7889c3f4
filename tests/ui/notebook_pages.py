"""A notebook page, in JupyterLab or in Jupyter Notebook 7, as the browser tests drive it."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.ui.conftest import Lab

T = TypeVar("T")

#: Where each frontend shows a notebook.
NOTEBOOK_URL = {"jupyterlab": "lab/tree/{name}", "notebook": "notebooks/{name}"}


def put_notebook(lab: Lab, name: str, sources: list[str]) -> None:
    """Save a notebook of code cells on the server (the contents API, as the frontend does)."""
    cells = [
        {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}
        for src in sources
    ]
    content = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    body = json.dumps({"type": "notebook", "format": "json", "content": content}).encode()
    request = urllib.request.Request(
        f"{lab.url}api/contents/{name}",
        data=body,
        method="PUT",
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def open_notebook(browser: Any, lab: Lab, name: str, app: str) -> Any:
    """A page showing notebook ``name`` in ``app`` ("jupyterlab" or "notebook")."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.console_lines = []
    page.on("console", lambda m: page.console_lines.append(f"{m.type}: {m.text}"))
    page.on("requestfailed", lambda r: page.console_lines.append(f"request failed: {r.url}"))
    page.goto(f"{lab.url}{NOTEBOOK_URL[app].format(name=name)}?token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell .cm-content", timeout=60_000)
    return page


def kernel_of(lab: Lab, name: str) -> str | None:
    """The id of the kernel the server's session of notebook ``name`` has now, if any."""
    for session in lab.api("api/sessions"):
        if session.get("path") == name and session.get("kernel"):
            return str(session["kernel"]["id"])
    return None


def run_cells_in_one_kernel(page: Any, lab: Lab, name: str, cells: list[int]) -> None:
    """Run ``cells`` in turn in one kernel. A frontend that opened the notebook on a
    loaded machine at times changes its kernel seconds after it started one (the
    server logs a new kernel started and the first shut down): the first cell's run may
    be lost with the first kernel (its prompt goes back to blank), or a later cell may
    run in the new kernel without the names the first made. Either way, all of them run
    again in the kernel now there."""
    for _ in range(3):
        run_cell(page, cells[0])
        if not _settled(page, cells[0], done=True):
            continue  # lost with a kernel the frontend replaced
        first = kernel_of(lab, name)
        for cell in cells[1:]:
            run_cell(page, cell)
        if kernel_of(lab, name) == first and not any(_magic_missing(page, c) for c in cells[1:]):
            return
    raise AssertionError(f"the kernel of {name} kept changing while its cells ran")


def _settled(page: Any, index: int, done: bool, timeout: float = 60_000) -> bool:
    """Whether cell ``index`` ran to its end (its prompt has a number) within
    ``timeout``; with ``done=False``, ran to its end or has shown some output."""
    try:
        page.wait_for_function(
            """([n, done]) => {
                const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[n];
                const prompt = cell?.querySelector('.jp-InputPrompt')?.textContent ?? '';
                const output = cell?.querySelector('.jp-OutputArea')?.textContent ?? '';
                return /\\[\\d+\\]/.test(prompt) || (!done && output.length > 0);
            }""",
            arg=[index, done],
            timeout=timeout,
        )
    except Exception:  # playwright's TimeoutError
        return False
    return True


def _magic_missing(page: Any, index: int) -> bool:
    """Whether cell ``index`` said the kernel has no ``%%air_distributed`` (it says so at
    once; a call that runs shows its links within seconds)."""
    _settled(page, index, done=False, timeout=30_000)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    return MAGIC_MISSING in (cell.locator(".jp-OutputArea").text_content() or "")


#: What a call says when the kernel running it never loaded the extension.
MAGIC_MISSING = "Cell magic `%%air_distributed` not found"


def run_calls(page: Any, cells: list[int], timeout: float = 240_000) -> None:
    """Run ``cells``: ``%load_ext jupyter_air`` first, then calls that each make a job.
    A frontend that changes its kernel seconds after it started one (see
    ``run_cells_in_one_kernel``) leaves the calls after the change without the magic
    ("not found", no job made) and drops the cells queued behind that error: those, and
    only those, run again after the extension is loaded in the kernel now there, so no
    call makes a second job."""
    for index in cells:
        run_cell(page, index)
    for _ in range(2):
        page.wait_for_function(  # every queued cell done, or dropped
            "() => ![...document.querySelectorAll('.jp-Notebook .jp-Cell .jp-InputPrompt')]"
            ".some(p => p.textContent.includes('[*]'))",
            timeout=timeout,
        )
        again = [i for i in cells[1:] if not _made_a_job(page, i)]
        if not again:
            return
        for index in [cells[0], *again]:
            run_cell(page, index)
            page.wait_for_function(
                "n => /\\[\\d+\\]/.test(document.querySelectorAll("
                "'.jp-Notebook .jp-Cell .jp-InputPrompt')[n]?.textContent ?? '')",
                arg=index,
                timeout=timeout,
            )
    raise AssertionError(f"cells {cells} did not all run with the extension loaded")


def _made_a_job(page: Any, index: int) -> bool:
    """Whether cell ``index`` ran (its prompt has a number) with the magic there."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt").text_content() or ""
    ran = any(ch.isdigit() for ch in prompt)
    return ran and MAGIC_MISSING not in (cell.locator(".jp-OutputArea").text_content() or "")


def run_cell_until_drawn(page: Any, lab: Lab, name: str, index: int, drawn: str) -> None:
    """Run cell ``index`` until ``drawn`` (a selector) is in its output, with the notebook's
    kernel the same before the run and after the drawing. A frontend that changes its
    kernel seconds after it started one (``run_cells_in_one_kernel``) leaves the first
    run's widgets without their models, half drawn: then the cell runs again."""
    for _ in range(3):
        before = kernel_of(lab, name)
        run_cell(page, index)
        try:
            page.wait_for_selector(drawn, state="attached", timeout=60_000)
        except Exception:  # playwright's TimeoutError: only a changed kernel excuses it
            if kernel_of(lab, name) == before:
                raise
            continue
        if before is not None and kernel_of(lab, name) == before:
            return
    raise AssertionError(f"the kernel of {name} kept changing while cell {index} ran")


def accept_kernel_choice(page: Any) -> None:
    """JupyterLab at times asks which kernel to start (its "Select Kernel" dialog, with
    the notebook's own kernel chosen) when it opens a notebook on a loaded machine before
    it has the kernel specs: take that kernel, as a user would."""
    dialog = page.query_selector(".jp-Dialog")
    if dialog is not None and "Select kernel" in (dialog.text_content() or ""):
        page.click(".jp-Dialog .jp-mod-accept")
        page.wait_for_selector(".jp-Dialog", state="detached", timeout=10_000)


def run_cell(page: Any, index: int, tries: int = 6) -> None:
    """Run cell ``index`` as a user does: click into it, Shift+Enter. A frontend that has
    not connected to its kernel yet drops the request, so it is repeated until the cell's
    prompt shows that it ran or runs."""
    cell = f".jp-Notebook .jp-Cell >> nth={index}"
    for _ in range(tries):
        accept_kernel_choice(page)
        dialog = page.query_selector(".jp-Dialog")
        assert dialog is None, f"a dialog covers the notebook: {dialog.text_content()}"
        page.click(f"{cell} >> .cm-content")
        page.keyboard.press("Shift+Enter")
        try:
            page.wait_for_function(
                "n => /\\[(\\*|\\d+)\\]/.test(document.querySelectorAll("
                "'.jp-Notebook .jp-Cell .jp-InputPrompt')[n]?.textContent ?? '')",
                arg=index,
                timeout=10_000,
            )
            return
        except Exception:  # playwright's TimeoutError: not run, try again
            continue
    raise AssertionError(f"cell {index} did not run after {tries} tries")


def choose_from_menu(page: Any, *path: str, timeout: float = 120_000) -> None:
    """Choose ``path`` from the menu bar (``"View", "Right Sidebar", "Show GPU resources"``)
    as a user does: open the menu, wait until it is open and still, choose in it, and so
    down the path. While the page's plugins still add to a menu (Notebook 7 adds a "Show
    ..." item to "Right Sidebar" for each panel put there), Lumino closes it if it is
    open, and the item under the pointer leaves the page: the user opens it again."""
    top, *items = path
    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            page.locator(f'.lm-MenuBar-itemLabel:text-is("{top}")').click(timeout=10_000)
            for label in items:
                _menu_still(page, label)
                page.locator(f'.lm-Menu .lm-Menu-itemLabel:text-is("{label}")').click(timeout=5_000)
            return
        except PlaywrightTimeoutError:
            if time.monotonic() > deadline:
                raise
            _close_menus(page)


def run_from_palette(page: Any, query: str, command: str, timeout: float = 90_000) -> None:
    """Run ``command`` (its id) from the command palette as a user does: open it, type
    ``query``, and press Enter once the palette has chosen that command. Not a click on
    its item: the palette draws its items anew as the query changes, and on a loaded
    machine a click took an item a later draw had replaced ("detached from the DOM").
    Where the palette has not chosen it within 15 s (a run under load: the query typed
    as the palette opened), the user types the query again."""
    field = ".jp-mod-commandPalette input, #command-palette input"
    chosen = f'.lm-CommandPalette-item.lm-mod-active[data-command="{command}"]'
    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            if not page.is_visible(field):
                page.keyboard.press("Control+Shift+C")
            page.fill(field, "", timeout=15_000)
            page.fill(field, query, timeout=15_000)
            page.wait_for_selector(chosen, timeout=15_000)
            break
        except PlaywrightTimeoutError:
            if time.monotonic() > deadline:
                raise
    page.keyboard.press("Enter")


#: Milliseconds an open menu keeps the same items before it is taken as still.
MENU_QUIET = 500


def _menu_still(page: Any, label: str) -> None:
    """Wait until the open menu that lists ``label`` has stayed open with the same items
    for ``MENU_QUIET`` ms (a menu closed or changed starts the count again)."""
    page.wait_for_function(
        """([label, quiet]) => {
            const menu = [...document.querySelectorAll('.lm-Menu')].find(m =>
                [...m.querySelectorAll('.lm-Menu-itemLabel')].some(n => n.textContent === label));
            const items = menu ? menu.textContent : null;
            const seen = window.__airMenuSeen;
            if (!menu || !seen || seen.menu !== menu || seen.items !== items) {
                window.__airMenuSeen = menu ? {menu, items, since: performance.now()} : null;
                return false;
            }
            return performance.now() - seen.since >= quiet;
        }""",
        arg=[label, MENU_QUIET],
        polling=100,
        timeout=10_000,
    )


def _close_menus(page: Any) -> None:
    """Close every open menu (Escape closes the innermost)."""
    for _ in range(4):
        if page.locator(".lm-Menu").count() == 0:
            return
        page.keyboard.press("Escape")


def on_a_redrawn(action: Callable[[], T], timeout: float = 60) -> T:
    """Do ``action`` (a screenshot, a scroll) on an element that a live display or a
    polling panel redraws: a new output replaces the node while Playwright waits for it
    to be still, and the locator, found again, finds its successor, as a user's eye does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except PlaywrightError as error:
            if "not attached to the DOM" not in str(error) or time.monotonic() > deadline:
                raise
