"""What the browser checks share: finding a Chromium, starting it headless, a free local port.

Used by tools/check_site.py (the website) and tests/test_widgets_browser.py (widgets in JupyterLab).
Playwright drives the system's Chromium (Debian's ``chromium`` package): it cannot download its own
browser on machines without general internet access, and a learner may not want it to.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

CANDIDATES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
)
INSTALL_HINT = (
    "install Chromium and Playwright: `sudo apt-get install -y chromium` (Debian/Ubuntu; other systems: "
    "any Chrome or Chromium, then set COURSE_CHROMIUM=/path/to/it) and `pip install playwright`"
)
LAUNCH_TIMEOUT_MS = 60_000


def find_chromium() -> str | None:
    """Path of a Chromium or Chrome executable (``COURSE_CHROMIUM`` first), or None."""
    chosen = os.environ.get("COURSE_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).is_file() and os.access(chosen, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why a browser check cannot run here (with the install command), or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"the playwright package is not installed: {INSTALL_HINT}"
    if find_chromium() is None:
        where = os.environ.get("COURSE_CHROMIUM")
        if where:
            return f"COURSE_CHROMIUM={where} is not an executable file: {INSTALL_HINT}"
        return f"no Chromium or Chrome found on PATH: {INSTALL_HINT}"
    return None


def launch(playwright):
    """Start the system Chromium headless through Playwright (works as root, no sandbox needed)."""
    return playwright.chromium.launch(
        executable_path=find_chromium(),
        headless=True,
        timeout=LAUNCH_TIMEOUT_MS,
        args=["--no-sandbox", "--disable-dev-shm-usage"],
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
