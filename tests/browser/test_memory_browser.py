"""The GPU memory lane of the timeline in a real headless Chromium, over a store holding a corpus Kineto trace
recorded with profile_memory=True: the lane is drawn under the device's idle row, its peak is the raw trace's
largest Total Allocated (read with json here), and a screenshot is taken."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from pathlib import Path

import pytest
from test_pages import HAVE_BROWSER, TIMELINE, open_page, severe_console_errors, wait_timeline

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
TRACE = CORPUS / "switch_transformers" / "trace.json"

# one skip naming everything missing: on a bare clone (neither) it is a corpus skip and a browser skip alike
_MISSING = [why for why, ok in (("shared corpus not present", CORPUS.exists()), ("chromium not installed", HAVE_BROWSER))
            if not ok]
pytestmark = [pytest.mark.browser, pytest.mark.corpus, pytest.mark.skipif(bool(_MISSING), reason="; ".join(_MISSING))]


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory):
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.io import load_trace, trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("memory-dashboard")
    store = Store(root / "store.db")
    rid = store.import_timeline(load_trace(TRACE), source_path=str(TRACE), fingerprint=trace_fingerprint(TRACE),
                                name="switch_transformers")
    app = create_app(store, import_dir=root / "imports")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "run": rid}
    srv.shutdown()
    store.close()


def test_memory_lane(browser, memory_server, screenshots):
    rid = memory_server["run"]
    open_page(browser, memory_server, f"/timeline?run={rid}", TIMELINE)
    st = wait_timeline(browser)
    assert "memory" in st["rowKinds"] and "GPU memory allocated (peak marked)" in st["legend"]
    with urllib.request.urlopen(f"{memory_server['url']}/api/timeline/meta?run={rid}") as resp:
        meta = json.loads(resp.read())
    series = meta["memory"]["series"]
    assert len(series) == 1 and meta["rows"]["kind"][series[0]["row"]] == "memory"
    events = [e for e in json.loads(TRACE.read_text())["traceEvents"]
              if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    top = max(e["args"]["Total Allocated"] for e in events)
    assert series[0]["peak"] == top == max(series[0]["v"])
    assert len(series[0]["t"]) == len(events)  # fewer than the lane's point budget: every event drawn
    browser.save_screenshot(str(Path(screenshots) / "memory-timeline.png"))
    assert not severe_console_errors(browser)
