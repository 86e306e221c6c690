"""The Ranges page and the projected-ranges lane of the timeline in a real headless Chromium over a real
store holding a bundled torch run: the table's figures are the raw trace's (tests/sql_oracle.py), a click
opens the timeline on the range, and the lane draws the projected NVTX ranges; screenshots of both."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest
from test_pages import HAVE_BROWSER, css, open_page, severe_console_errors, wait_for, wait_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sql_oracle import projected_by_name, projected_spans

from tracelab.demo import demo_run

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]
RUN = "sync_pitfalls-item_every_step-torch"


@pytest.fixture(scope="module")
def ranges_server(tmp_path_factory):
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.io import load_trace, trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("ranges-dashboard")
    store = Store(root / "store.db")
    path = demo_run(RUN)
    rid = store.import_timeline(load_trace(path), source_path=str(path), fingerprint=trace_fingerprint(path), name=RUN)
    app = create_app(store, import_dir=root / "imports")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "run": rid, "store": store}
    srv.shutdown()
    store.close()


def _ns(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]


def test_ranges_page_and_timeline_lane(browser, ranges_server, screenshots):
    rid = ranges_server["run"]
    open_page(browser, ranges_server, f"/ranges?run={rid}", "#ranges-table td")
    data = browser.execute_script(
        "return Array.from(document.querySelectorAll('#ranges-table tbody tr')).map("
        "r => Array.from(r.querySelectorAll('td')).map(td => td.innerText));"
    )
    heads = browser.execute_script(
        "return Array.from(document.querySelectorAll('#ranges-table th')).map(th => th.innerText.trim());"
    )
    cells = [dict(zip(heads[: len(r)], r, strict=False)) for r in data if r]
    rows = {c["range (tree by nesting)"].split("└ ")[-1].strip(): c for c in cells if c.get("kind") == "nvtx"}
    want = projected_by_name(demo_run(RUN), "forward")
    got = rows["forward"]
    assert int(got["calls"]) == want["calls"] and int(got["GPU ops"]) == want["gpu_ops"]
    assert abs(int(got["GPU (ns)"]) - want["gpu_ns"]) <= 2 * want["gpu_ops"]
    # tree by nesting: forward is drawn under a step range, indented
    assert "└ forward" in got["range (tree by nesting)"]
    shot = Path(screenshots) / "ranges-page.png"
    browser.save_screenshot(str(shot))
    # click the forward row: the timeline opens on its first instance, searching for it
    cell = next(td for tr in css(browser, "#ranges-table tbody tr") for td in tr.find_elements("css selector", "td")
                if td.text.strip().endswith("└ forward"))
    cell.click()
    wait_for(browser, lambda: "/timeline" in browser.current_url and "q=forward" in browser.current_url,
             what="the timeline of the clicked range")
    st = wait_timeline(browser)
    assert "ranges" in st["rowKinds"] and "GPU ranges (NVTX, projected)" in st["rows"]
    # the lane holds the projected ranges: forward's instances from their first op's start to their last op's end
    import json
    import urllib.request

    with urllib.request.urlopen(f"{ranges_server['url']}/api/timeline/meta?run={rid}") as resp:
        meta = json.loads(resp.read())
    lane_rows = {i for i, k in enumerate(meta["rows"]["kind"]) if k == "ranges"}
    sp = meta["steps"]
    origin = int(meta["origin"])
    boxes = sorted((a + origin, b + origin) for a, b, r, lab in zip(sp["start"], sp["end"], sp["row"], sp["label"],
                                                                     strict=True) if r in lane_rows and lab == "forward")
    spans = projected_spans(demo_run(RUN), "forward")
    assert len(boxes) == len(spans) == want["calls"]
    assert all(abs(a - x) <= 2 and abs(b - y) <= 2 for (a, b), (x, y) in zip(boxes, spans, strict=True))
    browser.save_screenshot(str(Path(screenshots) / "ranges-timeline.png"))
    assert not severe_console_errors(browser)
