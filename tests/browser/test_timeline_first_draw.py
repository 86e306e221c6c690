"""The timeline's first view does not wait for Dash, in a real headless Chromium: the page head asks for
the run's meta and whole-run tile and loads the canvas script, which draws the view where the timeline
page puts its canvas; when Dash has rendered the page, the page's canvas root adopts that timeline
(nothing fetched again, nothing moved) and the page's callbacks drive it.

Dash's start-up is held back here (its /_dash-layout request waits for a gate), so that the order is
certain: the timeline is drawn in full while Dash has rendered nothing."""

from __future__ import annotations

import logging
import threading

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from test_pages import HAVE_BROWSER, TIMELINE, css, severe_console_errors, tl_state, wait_for, wait_timeline

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

TILES = "return performance.getEntriesByType('resource').filter(e => e.name.includes('/api/timeline/tile')).map(e => e.name)"
EARLY_TOP = "const r = document.getElementById('tl-early-root'); return r ? r.getBoundingClientRect().top : null"
ROOT_TOP = "return document.getElementById('tl-canvas-root').getBoundingClientRect().top"


@pytest.fixture
def gated(tmp_path, browser):
    """A dashboard whose Dash start-up waits for `gate` (its layout request is held). The browser
    leaves it before it stops (no request of its pages left to fail in the next test's console log)."""
    import flask
    from test_app_callbacks import make_store
    from werkzeug.serving import make_server

    from app import create_app

    store, a, _ = make_store(tmp_path / "store.db")
    app = create_app(store)
    gate = threading.Event()

    @app.server.before_request
    def hold_dash() -> None:
        if flask.request.path.endswith("/_dash-layout"):
            gate.wait(60)

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "a": a, "gate": gate}
    gate.set()
    browser.get("about:blank")
    browser.get_log("browser")
    srv.shutdown()


def test_first_view_is_drawn_before_dash_and_adopted_by_the_page(browser, gated, screenshots):
    browser.get(f"{gated['url']}/timeline?run={gated['a']}")
    early = wait_timeline(browser, "the first view drawn before Dash")
    assert early["early"] and early["adoptedAt"] is None
    assert not css(browser, "#tl-canvas-root") and css(browser, "#react-entry-point ._dash-loading")
    assert early["window"] == [0, early["span"]] and early["level"] == 0
    assert "idle (gaps by cause)" in early["rows"] and early["items"] > 0
    top = browser.execute_script(EARLY_TOP)
    browser.save_screenshot(str(screenshots / "timeline_first_draw_before_dash.png"))
    tiles = browser.execute_script(TILES)
    assert any("level=0&index=0" in t for t in tiles)

    gated["gate"].set()
    adopted = wait_for(browser, lambda: (tl_state(browser) or {}).get("adoptedAt") and tl_state(browser),
                       what="the page adopting the timeline")
    assert not adopted["early"] and adopted["window"] == early["window"]
    assert css(browser, TIMELINE) and not css(browser, "#tl-early")
    assert browser.execute_script(ROOT_TOP) == pytest.approx(top, abs=4)  # drawn where the page has it
    tiles = browser.execute_script(TILES)
    assert len(tiles) == len(set(tiles))  # adopted as it was: no tile fetched again
    # the page's callbacks drive the adopted timeline, and it reports back to them (URL, info line)
    wait_for(browser, lambda: "events in view" in css(browser, "#tl-info")[0].text, what="the info line")
    browser.find_element("tag name", "body").click()
    ActionChains(browser).send_keys("w").perform()
    wait_for(browser, lambda: "t0=" in browser.current_url, what="the zoomed window in the URL")
    css(browser, "#tl-full")[0].click()
    wait_for(browser, lambda: tl_state(browser)["window"] == early["window"], what="the whole run again")
    assert not severe_console_errors(browser)


def test_a_page_without_the_timeline_drops_the_early_view(browser, gated, monkeypatch):
    """Dash renders something else than the timeline the head drew (here the page's internal-error
    view): the early drawing goes away instead of staying under it."""
    from app.pages import timeline

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(timeline, "window_info", broken)
    browser.get(f"{gated['url']}/timeline?run={gated['a']}")
    assert wait_timeline(browser, "the first view drawn before Dash")["early"]
    gated["gate"].set()
    wait_for(browser, lambda: css(browser, "#error"), what="the error page")
    wait_for(browser, lambda: not css(browser, "#tl-early"), what="the early drawing to go")
    assert tl_state(browser) is None and not css(browser, "canvas.tl-main")
