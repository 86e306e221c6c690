"""Issue 28 in a real browser: what a newcomer saw on the dashboard. Each test leaves a screenshot in a
temporary directory (printed; TRACELAB_SCREENSHOTS picks it)."""

from __future__ import annotations

import re
import time
from itertools import pairwise
from urllib.parse import parse_qs, urlparse

import pytest
from test_pages import HAVE_BROWSER, TIMELINE, css, open_page, tl_state, wait_for, wait_timeline
from test_timeline_nav import run_named, shoot
from tl_hygiene import missing_browser, screenshots_path

from tracelab.text_format import fmt_ns

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason=str(missing_browser()))]


@pytest.fixture(scope="module")
def shots():
    path = screenshots_path()
    print(f"screenshots in {path}")
    return path


def _gaps_drawn(browser) -> bool:
    frame = css(browser, "iframe#gaps-graph")
    return (
        bool(frame)
        and browser.execute_script(
            "var f = document.querySelector('iframe#gaps-graph');"
            "return !!(f.contentDocument && f.contentDocument.querySelectorAll('circle').length)"
        )
        and bool(css(browser, "#gaps-table td"))
    )


def test_green_ctx_gaps_page_shows_the_idle_partition_and_draws_without_plotly(browser, server, shots):
    rid = run_named(server, "green_contexts/green_ctx/nsys")
    browser.get(server["url"] + f"/gaps?run={rid}")
    wait_for(browser, lambda: _gaps_drawn(browser), what="the gaps chart and table")
    headings = [h.text for h in css(browser, "#gaps-page h3")]
    assert "Findings (1)" in headings, headings
    text = css(browser, "#findings-list")[0].text
    assert "idle_partition" in text and "(116 of 132 SMs)" in text
    assert re.search(r"\d,\d{3}\.\d SM-ms idle", text), text
    # no plotly.js on this page: loading and running it was most of its draw time
    scripts = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('plotly'))"
    )
    assert scripts == [], scripts
    # one point per gap; each a link to the timeline around its gap
    hrefs = browser.execute_script(
        "var d = document.querySelector('iframe#gaps-graph').contentDocument;"
        "return Array.from(d.querySelectorAll('a')).map(a => a.getAttribute('href'))"
    )
    assert len(hrefs) == len(_gaps_of(server, rid)) >= 1
    assert all(h.startswith(f"/timeline?run={rid}&t0=") for h in hrefs)
    shoot(browser, shots, "gaps_green_ctx")


def test_gaps_chart_point_opens_the_timeline_there(browser, server, shots):
    rid = run_named(server, "sync_pitfalls/item_every_step/torch")
    browser.get(server["url"] + f"/gaps?run={rid}")
    wait_for(browser, lambda: _gaps_drawn(browser), what="the gaps chart and table")
    shoot(browser, shots, "gaps_sync_pitfalls")
    frame = css(browser, "iframe#gaps-graph")[0]
    browser.switch_to.frame(frame)
    try:
        point = css(browser, "a circle")[-1]  # the longest gap: drawn last, on top
        title = css(browser, "a title")[-1].get_attribute("textContent")
        browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", point)
    finally:
        browser.switch_to.default_content()
    wait_for(browser, lambda: urlparse(browser.current_url).path == "/timeline", what="the timeline")
    q = parse_qs(urlparse(browser.current_url).query)
    assert q["run"] == [rid]
    longest = max(_gaps_of(server, rid), key=lambda g: g.duration_ns)
    assert title.startswith(f"{longest.cause} · {fmt_ns(longest.duration_ns)}"), title
    assert int(q["t0"][0]) < longest.start_ns < longest.end_ns < int(q["t1"][0])
    wait_timeline(browser)


def _gaps_of(server, rid):
    from app.state import AppState

    state = AppState(
        store=server["store"], import_dir=server["store"].path.parent / "imports", max_upload_bytes=1
    )
    return state.analysis(rid).gaps


def test_timeline_without_a_run_asks_which(browser, server, shots):
    open_page(browser, server, "/timeline", "#run-picker-list a")
    links = css(browser, "#run-picker-list a")
    assert len(links) == len(server["store"].runs())
    shoot(browser, shots, "timeline_run_picker")
    target = next(a for a in links if a.text == "green_contexts/green_ctx/nsys")
    rid = run_named(server, "green_contexts/green_ctx/nsys")
    target.click()
    wait_for(browser, lambda: css(browser, TIMELINE), what="the timeline of the picked run")
    assert parse_qs(urlparse(browser.current_url).query)["run"] == [rid]
    st = wait_timeline(browser)
    time.sleep(0.5)
    shoot(browser, shots, "timeline_green_ctx_sm_bands")
    # the SM bands name their partitions (issue 28: "SMs 0–8 (measured)" … with none)
    sm = [x for x, k in zip(st["rows"], st["rowKinds"]) if k == "sm"]
    assert sm and all("green ctx" in x for x in sm), sm
    assert tl_state(browser)["complete"]


def test_no_lone_arrow_at_whole_run_and_labels_never_overlap(browser, server, shots):
    """At whole-run zoom no launch -> GPU arrow is drawn (a launch and its kernel share a pixel column
    there: a lone arrow was a line through every lane); zoomed in they are. Labels written on one row
    never overlap (issue 28: "Memcpy" over "Stream Sync")."""
    rid = run_named(server, "sync_pitfalls/item_every_step/torch")
    rec = server["store"].get_run(rid)
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    st = wait_timeline(browser)
    assert st["flows"] == 0 and st["window"][1] - st["window"][0] == st["span"]
    shoot(browser, shots, "timeline_whole_run_no_arrows")
    gap = max(_gaps_of(server, rid), key=lambda g: g.duration_ns)
    t0, t1 = gap.start_ns - 150_000, gap.end_ns + 150_000
    open_page(browser, server, f"/timeline?run={rid}&t0={t0}&t1={t1}", TIMELINE)
    st = wait_timeline(browser)
    assert (st["window"][1] - st["window"][0]) * 4 <= rec.span_ns and st["flows"] > 0
    boxes = st["labelBoxes"]
    assert st["labels"] == len(boxes) > 0
    by_row: dict[float, list[tuple[float, float]]] = {}
    for x0, x1, y in boxes:
        by_row.setdefault(y, []).append((x0, x1))
    for row in by_row.values():
        row.sort()
        assert all(a[1] <= b[0] for a, b in pairwise(row)), row
    shoot(browser, shots, "timeline_zoomed_labels_arrows")
