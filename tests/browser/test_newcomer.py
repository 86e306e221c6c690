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
    # the chart is an SVG element in the page (no iframe: its document cost a cold page 0.1-0.3 s)
    return bool(css(browser, "#gaps-graph svg circle")) and bool(css(browser, "#gaps-table td"))


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
        "return Array.from(document.querySelectorAll('#gaps-graph a')).map(a => a.getAttribute('href'))"
    )
    assert len(hrefs) == len(_gaps_of(server, rid)) >= 1
    assert all(h.startswith(f"/timeline?run={rid}&t0=") for h in hrefs)
    shoot(browser, shots, "gaps_green_ctx")


def test_gaps_chart_in_the_page_keeps_hostile_names_as_text(browser, tmp_path):
    """The chart is put in the page from its data-svg (app/assets/gaps_chart.js, innerHTML): names in the
    evidence and links stay text in real Chromium: no element, no handler runs."""
    from html import escape
    from pathlib import Path

    from tracelab.analyses.results import Gap
    from tracelab.render.figures.gaps_svg import gaps_svg_element

    evil = "</title></circle><img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>"
    g = Gap(rank=0, device=0, start_ns=1_000, end_ns=51_000, duration_ns=50_000, cause="host_sync")
    svg = gaps_svg_element([g], 0, [evil], ['/timeline?run=a"><img src=x onerror="window.__pwned=3">'])
    script = (Path(__file__).resolve().parents[2] / "app" / "assets" / "gaps_chart.js").read_text()
    page = tmp_path / "chart.html"
    page.write_text(f"<!DOCTYPE html><html><body><script>{script}</script>"
                    f"<div id='gaps-graph' data-svg=\"{escape(svg)}\"></div></body></html>")
    browser.get(page.as_uri())
    wait_for(browser, lambda: css(browser, "#gaps-graph svg circle"), what="the chart put in the page")
    time.sleep(0.3)
    assert browser.execute_script("return window.__pwned === undefined")
    assert not css(browser, "#gaps-graph img") and not css(browser, "#gaps-graph script")
    title = browser.execute_script("return document.querySelector('#gaps-graph a title').textContent")
    assert title.endswith(evil)
    href = browser.execute_script("return document.querySelector('#gaps-graph a').getAttribute('href')")
    assert href.endswith('onerror="window.__pwned=3">')


def test_gaps_chart_point_opens_the_timeline_there(browser, server, shots):
    rid = run_named(server, "sync_pitfalls/item_every_step/torch")
    browser.get(server["url"] + f"/gaps?run={rid}")
    wait_for(browser, lambda: _gaps_drawn(browser), what="the gaps chart and table")
    shoot(browser, shots, "gaps_sync_pitfalls")
    assert not css(browser, "iframe"), "the chart is drawn in the page"
    point = css(browser, "#gaps-graph a circle")[-1]  # the longest gap: drawn last, on top
    title = css(browser, "#gaps-graph a title")[-1].get_attribute("textContent")
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", point)
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


def test_gaps_table_pages_and_filters_without_a_datatable(browser, server, shots):
    """Issue 28: the Gaps page draws without Dash's DataTable (its ~0.3 s of script): a plain table of 25
    rows; "next ›" and a cause button bring other rows from the server."""
    rid = run_named(server, "sync_pitfalls/item_every_step/torch")
    browser.get(server["url"] + f"/gaps?run={rid}")
    wait_for(browser, lambda: _gaps_drawn(browser), what="the gaps chart and table")
    scripts = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [s for s in scripts if "async-table" in s or "plotly" in s], scripts
    gaps = _gaps_of(server, rid)
    # reached by the page's own links (Dash renders it, no page load): the chart is put in the page too
    open_page(browser, server, f"/kernels?run={rid}", "#kernels-page")
    css(browser, "#nav-gaps")[0].click()
    wait_for(browser, lambda: _gaps_drawn(browser), what="the gaps chart after a link")
    assert len(css(browser, "#gaps-graph a circle")) == len(gaps)
    rows = css(browser, "#gaps-table tbody tr")
    assert len(rows) == 25 < len(gaps)
    longest = sorted((g.duration_ns for g in gaps), reverse=True)
    got = [int(r.get_attribute("data-end-ns")) - int(r.get_attribute("data-start-ns")) for r in rows]
    assert got == longest[:25]
    label = css(browser, "#gaps-page-label")[0].text
    assert label.startswith(f"gaps 1–25 of {len(gaps)}")
    css(browser, "#gaps-next")[0].click()
    wait_for(browser, lambda: css(browser, "#gaps-page-label")[0].text.startswith("gaps 26–50"), what="page 2")
    rows = css(browser, "#gaps-table tbody tr")
    got = [int(r.get_attribute("data-end-ns")) - int(r.get_attribute("data-start-ns")) for r in rows]
    assert got == longest[25:50]
    cause = min({g.cause for g in gaps}, key=lambda c: sum(g.cause == c for g in gaps))
    n = sum(g.cause == cause for g in gaps)
    button = next(b for b in css(browser, ".gaps-controls button") if b.text.startswith(cause + " ("))
    button.click()
    wait_for(browser, lambda: f"cause {cause}" in css(browser, "#gaps-page-label")[0].text, what="the filter")
    assert f"of {n}" in css(browser, "#gaps-page-label")[0].text
    cells = {c.text for c in css(browser, "#gaps-table tbody td[data-col='cause']")}
    assert cells == {cause}
    shoot(browser, shots, "gaps_table_filtered")


@pytest.fixture(scope="module")
def ddp2(server, tmp_path_factory):
    """The 2-rank DDP recording (tests/data/multigpu/ddp2_sleep_torch) in the dashboard's store, and the
    ranks its raw Kineto files name (distributedInfo.rank)."""
    import gzip
    import json

    from multigpu_util import MULTI, run_dir

    from tracelab.api import import_trace
    from tracelab.errors import DuplicateRun

    ranks = sorted(
        json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"]
        for f in (MULTI / "ddp2_sleep_torch" / "ranks").glob("*.json.gz")
    )
    try:
        rid = import_trace(run_dir("ddp2_sleep_torch", tmp_path_factory.mktemp("ddp2")), server["store"]).run_id
    except DuplicateRun as exc:
        rid = exc.run_id
    return rid, ranks


def _page_height(browser) -> int:
    return browser.execute_script("return document.documentElement.scrollHeight")


def test_multi_rank_timeline_opens_with_ranks_collapsed_and_expands_on_click(browser, server, shots, ddp2):
    """Issue 28: a 2-rank DDP timeline was four screens tall. Every rank but the first is one summary row
    (its GPU's idle row); a click on it shows the rank's rows, a click on a rank's header folds it."""
    rid, ranks = ddp2
    assert ranks == [0, 1]
    browser.get(server["url"] + f"/timeline?run={rid}")
    st = wait_timeline(browser)
    rows, kinds, of = st["rows"], st["rowKinds"], st["rowRanks"]
    assert sorted(set(of) - {-1}) == ranks
    assert st["collapsed"] == ranks[1:]
    labels = [e.text for e in css(browser, "#tl-canvas-root .tl-row-label")]
    summary = css(browser, "#tl-canvas-root .tl-row-collapsed")
    assert len(summary) == 1 and summary[0].text.startswith("▸ rank 1 · GPU 1")
    # rank 1's rows: all there in the meta; only its idle row is shown, as the summary
    shown = st["shownRows"]
    assert [i for i in range(len(rows)) if of[i] == 1 and i in shown] == [kinds.index("idle", rows.index(
        next(lab for i, lab in enumerate(rows) if of[i] == 1)))]
    assert st["hiddenRows"] == of.count(1) - 1 > 20
    assert len(labels) == len(shown)
    assert [kinds[i] for i in shown].count("idle") == 2  # rank 0's idle row and rank 1's summary
    collapsed_h, page_collapsed = st["height"], _page_height(browser)
    shoot(browser, shots, "timeline_ddp2_collapsed")
    # expand rank 1 with a real click on its summary row (the labels are rebuilt when the steps arrive:
    # find it again until the click lands)
    wait_for(browser, lambda: _click_label(browser, ".tl-row-collapsed", "▸ rank 1"), what="a click on the summary")
    wait_for(browser, lambda: tl_state(browser)["collapsed"] == [], what="rank 1 expanded")
    st2 = tl_state(browser)
    assert st2["hiddenRows"] == 0 and len(st2["shownRows"]) == len(rows)
    assert len(css(browser, "#tl-canvas-root .tl-row-label")) == len(rows)
    page_expanded = _page_height(browser)
    assert st2["height"] > 1.6 * collapsed_h and page_expanded - page_collapsed == st2["height"] - collapsed_h
    # the summary saves more than a third of the page (1,202 of 1,953 px when measured)
    assert page_collapsed <= 0.65 * page_expanded, (page_collapsed, page_expanded)
    # fold rank 0 by its header: both ranks are one row each
    wait_for(browser, lambda: _click_label(browser, ".tl-row-expanded", "▾ rank 0 · GPU 0"), what="a click on rank 0")
    wait_for(browser, lambda: tl_state(browser)["collapsed"] == [0], what="rank 0 folded")
    shoot(browser, shots, "timeline_ddp2_rank0_folded")
    print(f"timeline heights: collapsed {page_collapsed} px, expanded {page_expanded} px")


def test_rank_folds_are_kept_in_the_url_across_a_reload(browser, server, shots, ddp2):
    """Issue 28: which ranks are unfolded is in the URL (?open=0,1), so a reload or a shared link shows
    the same folds; the ranks are the ones the raw Kineto files name."""
    rid, ranks = ddp2
    browser.get(server["url"] + f"/timeline?run={rid}")
    assert wait_timeline(browser)["collapsed"] == ranks[1:]
    assert "open" not in parse_qs(urlparse(browser.current_url).query)  # the default: no parameter
    wait_for(browser, lambda: _click_label(browser, ".tl-row-collapsed", f"▸ rank {ranks[1]}"), what="a click")
    opened = ",".join(map(str, ranks))
    wait_for(browser, lambda: parse_qs(urlparse(browser.current_url).query).get("open") == [opened],
             what=f"open={opened} in the address bar")
    assert parse_qs(urlparse(css(browser, "#tl-permalink")[0].get_attribute("href")).query)["open"] == [opened]
    browser.refresh()
    wait_for(browser, lambda: (tl_state(browser) or {}).get("complete") and tl_state(browser)["collapsed"] == [],
             what="every rank unfolded after the reload")
    assert len(tl_state(browser)["shownRows"]) == len(tl_state(browser)["rows"])
    # fold rank 0: the URL names rank 1 only; a fresh load of that URL (a shared link) shows rank 0 folded
    wait_for(browser, lambda: _click_label(browser, ".tl-row-expanded", f"▾ rank {ranks[0]} · GPU"), what="a click")
    wait_for(browser, lambda: parse_qs(urlparse(browser.current_url).query).get("open") == [str(ranks[1])],
             what="open=1 in the address bar")
    shared = browser.current_url
    browser.get(server["url"] + "/")
    browser.get(shared)
    wait_for(browser, lambda: (tl_state(browser) or {}).get("complete") and tl_state(browser)["collapsed"] == [ranks[0]],
             what="rank 0 folded from the link")
    labels = [e.text for e in css(browser, "#tl-canvas-root .tl-row-collapsed")]
    assert len(labels) == 1 and labels[0].startswith(f"▸ rank {ranks[0]} · GPU"), labels
    shoot(browser, shots, "timeline_ddp2_open_from_url")
    # every rank folded: open=none
    wait_for(browser, lambda: _click_label(browser, ".tl-row-expanded", f"▾ rank {ranks[1]} · GPU"), what="a click")
    wait_for(browser, lambda: parse_qs(urlparse(browser.current_url).query).get("open") == ["none"],
             what="open=none in the address bar")
    browser.refresh()
    wait_for(browser, lambda: (tl_state(browser) or {}).get("complete") and tl_state(browser)["collapsed"] == ranks,
             what="both ranks folded after the reload")


def test_ranks_page_starts_with_who_waited_for_whom(browser, server, shots, ddp2):
    """Issue 28: "one rank × rank summary first". The Ranks page's first table, on the first screen: row i,
    column j = the time rank i waited in collectives for rank j; checked against the raw Kineto files."""
    from multigpu_util import MULTI
    from test_rank_wait_matrix import _raw_calls, _raw_matrix

    rid, ranks = ddp2
    want_wait, want_count = _raw_matrix(_raw_calls(MULTI / "ddp2_sleep_torch" / "ranks"))
    open_page(browser, server, f"/ranks?run={rid}", "#wait-matrix td")
    matrix, table = css(browser, "#wait-matrix")[0], css(browser, "#ranks-table")[0]
    assert matrix.rect["y"] + matrix.rect["height"] < min(table.rect["y"], 1000)  # first, on the first screen
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#wait-matrix tbody tr')).map(r => [r.dataset.rank,"
        " Array.from(r.querySelectorAll('td[data-wait-ns]')).map(c => [+c.dataset.waitNs, +c.dataset.count, c.innerText])])"
    )
    assert [int(r) for r, _ in cells] == ranks
    for a, row in cells:
        for b, (ns, n, text) in enumerate(row):
            # over the steps (set-up left out): at most the whole run's raw wait
            assert 0 <= ns <= want_wait.get((int(a), b), 0) + 20 and n <= want_count.get((int(a), b), 0)
            assert text == (f"{fmt_ns(ns)} · {n}×" if ns else "–")
    # rank 1 is the straggler: rank 0's wait for it is most of the waiting, in most of its calls
    assert cells[0][1][1][0] > 0.9 * sum(ns for _, row in cells for ns, _, _ in row)
    assert cells[0][1][1][1] >= 0.9 * want_count[(0, 1)]
    shoot(browser, shots, "ranks_who_waited_for_whom")
    # the Overlap page of the run has the same summary, right after its ranks at a glance
    open_page(browser, server, f"/overlap?run={rid}", "#wait-matrix td")
    again = browser.execute_script(
        "return Array.from(document.querySelectorAll('#wait-matrix td[data-wait-ns]')).map(c => +c.dataset.waitNs)"
    )
    assert again == [ns for _, row in cells for ns, _, _ in row]
    heads = [h.text for h in css(browser, "#overlap-page h3")]
    assert heads[:2] == ["Ranks at a glance", "Who waited for whom"], heads
    shoot(browser, shots, "overlap_ddp2_who_waited_for_whom")


def _click_label(browser, cls: str, start: str) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        next(e for e in css(browser, f"#tl-canvas-root {cls}") if e.text.startswith(start)).click()
        return True
    except (StaleElementReferenceException, StopIteration):
        return False
