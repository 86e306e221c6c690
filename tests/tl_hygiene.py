"""Helpers for browser tests' skip reasons and screenshots (imported by tests/conftest.py and the browser
tests)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (naming chromium or chromedriver), or None."""
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not Path(path).exists()]
    if not missing:
        return None
    return " and ".join(missing) + " not installed"


def screenshots_path() -> Path:
    """Where browser tests write screenshots: $TRACELAB_SCREENSHOTS, else a fresh temporary directory."""
    env = os.environ.get("TRACELAB_SCREENSHOTS")
    path = Path(env) if env else Path(tempfile.mkdtemp(prefix="tracelab-screenshots-"))
    path.mkdir(parents=True, exist_ok=True)
    return path
