"""A real dashboard server (threaded werkzeug on 127.0.0.1, random port) over a real SQLite store,
driven by a real headless Chromium through selenium."""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (shared synthetic runs)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
HAVE_BROWSER = Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()
from tl_hygiene import missing_browser, screenshots_path


def recorded_run_paths() -> list[Path]:
    """Runs recorded on a real GPU that ship with the project: the demo runs and the test fixtures
    (run directories with a meta.json); empty until they exist."""
    paths: list[Path] = []
    try:
        from tracelab.demo import demo_run_paths

        paths += [Path(p) for p in demo_run_paths()]
    except Exception:  # noqa: BLE001, S110 - no demo runs in this checkout
        pass
    data = Path(__file__).resolve().parents[1] / "data"
    paths += sorted(p.parent for p in data.glob("*/meta.json"))
    return list(dict.fromkeys(paths))


def import_recorded_runs(store) -> list[str]:
    from tracelab.errors import DuplicateRun
    from tracelab.io import load_trace, trace_fingerprint

    ids = []
    for p in recorded_run_paths():
        try:
            ids.append(store.import_timeline(load_trace(p), source_path=p, fingerprint=trace_fingerprint(p)))
        except DuplicateRun as exc:
            ids.append(exc.run_id)
    return ids


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    from test_app_callbacks import make_store
    from werkzeug.serving import make_server

    from app import create_app

    root = tmp_path_factory.mktemp("dashboard")
    store, a, b = make_store(root / "store.db")
    recorded = import_recorded_runs(store)
    app = create_app(store, import_dir=root / "imports", max_upload_bytes=8 * 2**20)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "a": a, "b": b, "store": store, "recorded": recorded}
    srv.shutdown()


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    if not HAVE_BROWSER:
        pytest.skip(str(missing_browser()))
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1500,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def screenshots():
    return screenshots_path()
