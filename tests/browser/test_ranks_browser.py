"""The Ranks page in a real headless Chromium over a real store holding the recorded 2-rank DDP run
(tests/data/ddp): the rank table, both heatmaps and the collectives table render; screenshot
docs/screenshots/ranks.png."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from test_pages import HAVE_BROWSER, css, open_page, shoot

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

DDP = Path(__file__).resolve().parents[1] / "data" / "ddp"


@pytest.fixture(scope="module")
def ddp_server(tmp_path_factory):
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.io import load_trace, trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("ranks-dashboard")
    store = Store(root / "store.db")
    rid = store.import_timeline(
        load_trace(DDP), source_path=str(DDP), fingerprint=trace_fingerprint(DDP), name="ddp"
    )
    app = create_app(store, import_dir=root / "imports")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "run": rid}
    srv.shutdown()
    store.close()


def test_ranks_page_in_browser(browser, ddp_server, screenshots):
    open_page(browser, ddp_server, f"/ranks?run={ddp_server['run']}", "#ranks-wait .js-plotly-plot")
    body = browser.find_element("tag name", "body").text
    assert "2 ranks; 24 collectives matched across ranks; stragglers: rank 1 last" in body
    rows = css(browser, "#ranks-table tbody tr")
    assert len(rows) == 2 + 2  # header and filter rows, then ranks 0 and 1
    heat = browser.execute_script(
        "const g = document.querySelector('#ranks-busy .js-plotly-plot'); return [g.data[0].type, g.data[0].y];"
    )
    assert heat == ["heatmap", ["rank 0", "rank 1"]]
    assert css(browser, "#collectives-table td")
    assert "Ranks" in [a.text for a in css(browser, ".navbar a")]
    shoot(browser, screenshots, "ranks")
