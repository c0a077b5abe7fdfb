"""Headless Chromium for the pages' tests, their benchmark and the docs' screenshots: one way to launch it.

Playwright for Python drives Debian's own ``chromium`` (installed by scripts/setup-dev), launched by its path:
Playwright's browser download is not needed, and the browser is the one a user of the machine has. A
development tool: nothing in the ``rollout_telemetry`` package imports it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Browser

__all__ = ["CHROMIUM", "chromium", "chromium_path", "photograph"]

CHROMIUM = "chromium"
"""Debian's Chromium, looked up on PATH (``ROLLOUT_TELEMETRY_CHROMIUM`` names another)."""


def chromium_path() -> str | None:
    """The Chromium to launch, or ``None`` when there is none."""
    return os.environ.get("ROLLOUT_TELEMETRY_CHROMIUM") or shutil.which(CHROMIUM)


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium, closed on leaving.

    Raises:
        RuntimeError: no Chromium is installed (scripts/setup-dev installs Debian's).
    """
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        msg = f"no {CHROMIUM} on PATH: run scripts/setup-dev (it installs Debian's chromium)"
        raise RuntimeError(msg)
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def photograph(browser: Browser, url: str, path: Path, *, width: int = 1100, height: int = 1000) -> None:
    """A PNG of the top ``width`` x ``height`` pixels of the page at ``url``, light theme, once it has loaded
    and painted: what a reader of the docs sees first."""
    page = browser.new_page(viewport={"width": width, "height": height}, color_scheme="light")
    try:
        page.goto(url, wait_until="load")
        page.screenshot(path=str(path))
    finally:
        page.close()
