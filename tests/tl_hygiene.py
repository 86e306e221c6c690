"""Helpers for skip reasons (the shared corpus, the browser) and screenshots (imported by tests/conftest.py,
the corpus tests and the browser tests)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# The shared corpus of real traces by other people: ../shared/corpus beside the checkout (TRACELAB_CORPUS
# overrides). Tests that read it are marked `corpus`; tests/conftest.py skips them, with this reason, when it
# is absent (and under CI=true that skip fails the run).
CORPUS = Path(os.environ.get("TRACELAB_CORPUS") or Path(__file__).resolve().parents[2] / "shared" / "corpus")


def missing_corpus() -> str | None:
    """Why the corpus tests cannot run here, or None."""
    if CORPUS.is_dir():
        return None
    return f"shared corpus not present at {CORPUS} (../shared/corpus beside the checkout, or TRACELAB_CORPUS)"


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
