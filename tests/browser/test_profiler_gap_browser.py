"""Issue 27: a gap that profiler overhead covers, on the timeline in a real headless Chromium: the bundled nsys
run's one `profiler` gap (rebuilt from the raw export by tests/test_health.py's oracle) is drawn on the idle
row in its own colour and named in the legend; a screenshot is taken."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest
from test_pages import HAVE_BROWSER, TIMELINE, open_page, severe_console_errors, shoot, wait_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_health import nsys_profiler_gaps

RUN = "sync_pitfalls-item_every_step-nsys"

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]


@pytest.fixture(scope="module")
def profiler_server(tmp_path_factory):
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.demo import demo_run
    from tracelab.io import load_trace, trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("profiler-dashboard")
    run = demo_run(RUN, root / "demo")
    store = Store(root / "store.db")
    rid = store.import_timeline(load_trace(run), source_path=str(run), fingerprint=trace_fingerprint(run), name=RUN)
    app = create_app(store, import_dir=root / "imports")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "run": rid, "sqlite": run / "trace.sqlite"}
    srv.shutdown()
    store.close()


def test_profiler_gap_on_the_idle_row(browser, profiler_server, screenshots):
    (a, b), = nsys_profiler_gaps(profiler_server["sqlite"])
    rid = profiler_server["run"]
    pad = (b - a) // 2
    open_page(browser, profiler_server, f"/timeline?run={rid}&t0={a - pad}&t1={b + pad}", TIMELINE)
    st = wait_timeline(browser)
    assert "idle (profiler)" in st["legend"]
    shoot(browser, screenshots, "timeline_profiler_gap")
    assert not severe_console_errors(browser)
