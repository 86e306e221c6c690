"""The timeline as an engineer used to Perfetto drives it, in a real headless Chromium: idle visible at
whole-run zoom, W/S/A/D keys, search, drag-select statistics (checked against an independent union
and, when the CLI has it, `tracelab analyze --window`), kernel row -> timeline, Compare's baseline.
Screenshots go to a temporary directory; the ones the README links are copied to docs/screenshots/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.keys import Keys
from test_pages import HAVE_BROWSER, css, open_page, severe_console_errors, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

ROOT = Path(__file__).resolve().parents[2]
README_SHOTS = ROOT / "docs" / "screenshots"
GRAPH = "#tl-graph .js-plotly-plot"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("shots")


def shoot(driver, directory: Path, name: str, *, keep: bool = False) -> Path:
    height = driver.execute_script("return Math.min(document.documentElement.scrollHeight + 60, 2400)")
    driver.set_window_size(1500, max(900, int(height)))
    time.sleep(0.8)
    path = directory / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(1500, 1000)
    if keep:
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, README_SHOTS / path.name)
    return path


def run_named(server, name: str) -> str:
    return next(r.id for r in server["store"].runs() if r.name == name)


def x_range(driver) -> list[float]:
    return driver.execute_script(f"return document.querySelector('{GRAPH}')._fullLayout.xaxis.range.map(Number)")


def axis_unit_ns(driver) -> float:
    title = driver.execute_script(f"return document.querySelector('{GRAPH}').layout.xaxis.title.text")
    return 1e3 if "µs" in title else 1e6


def settle(driver):
    wait_for(
        driver,
        lambda: driver.execute_script(
            "return !document.querySelector('[data-dash-is-loading=\"true\"]')"
        ),
        what="callbacks to settle",
    )


def test_idle_lane_at_whole_run_zoom_on_graphs_eager(browser, server, shots):
    """graphs/eager is ~92 % idle: at whole-run zoom its idle row must show it, gaps by cause."""
    rid = run_named(server, "graphs/eager/nsys")
    rec = server["store"].get_run(rid)
    open_page(browser, server, f"/timeline?run={rid}", GRAPH)
    names = browser.execute_script(f"return document.querySelector('{GRAPH}').data.map(t => t.name)")
    causes = sorted({n for n in names if n and n.startswith("idle (")})
    assert causes, names
    assert "idle, all (thickness = idle fraction)" in names
    labels = browser.execute_script(f"return document.querySelector('{GRAPH}').layout.yaxis.ticktext")
    assert any(t.startswith("idle") for t in labels)
    # the whole run is in view
    unit = axis_unit_ns(browser)
    a, b = x_range(browser)
    assert abs(a) < 1e-6 and abs(b * unit - rec.span_ns) < 1_000
    # the idle drawn (all-idle segments, weighted by their thickness level) is most of the span,
    # as the analysis says: busy / span of the device
    from tracelab.analyses import analyze

    dev = analyze(server["store"].load(rid)).devices[0]
    assert dev.busy_ns / dev.span_ns < 0.2
    shoot(browser, shots, "timeline_idle_graphs_eager", keep=True)
    assert severe_console_errors(browser) == []


def test_w_zooms_and_d_pans(browser, server, shots):
    rid = run_named(server, "graphs/eager/nsys")
    open_page(browser, server, f"/timeline?run={rid}", GRAPH)
    before = x_range(browser)
    info0 = css(browser, "#tl-info")[0].text
    body = browser.find_element("tag name", "body")
    body.click()
    ActionChains(browser).send_keys("w").perform()
    wait_for(browser, lambda: css(browser, "#tl-info")[0].text != info0, what="the zoomed view from the server")
    settle(browser)
    zoomed = x_range(browser)
    # the server redrew in the new window's unit: compare in ns via the URL
    q = parse_qs(urlparse(browser.current_url).query)
    rec = server["store"].get_run(rid)
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert t1 - t0 == pytest.approx(0.6 * rec.span_ns, rel=0.01)  # W keeps 60 % of the window
    assert zoomed[1] - zoomed[0] < before[1] - before[0] + 1e-9 or axis_unit_ns(browser) == 1e3
    info1 = css(browser, "#tl-info")[0].text
    ActionChains(browser).send_keys("d").perform()
    wait_for(browser, lambda: css(browser, "#tl-info")[0].text != info1, what="the panned view")
    settle(browser)
    q2 = parse_qs(urlparse(browser.current_url).query)
    u0, u1 = int(q2["t0"][0]), int(q2["t1"][0])
    assert u0 > t0 and u1 > t1  # moved right
    assert u1 - u0 <= t1 - t0 + 1_000  # same width (clamped at the run's end at most)
    shoot(browser, shots, "timeline_keys")


def test_search_highlights_counts_and_steps(browser, server, shots):
    """The synthetic baseline run has 8 steps x 5 kernels; kernel j of step i is gemm_kernel_{j % 2}
    except one hostile name: 39 gemm kernels."""
    open_page(browser, server, f"/timeline?run={server['a']}", GRAPH)
    box = css(browser, "#tl-search")[0]
    assert box.get_attribute("type") == "search"
    box.send_keys("GEMM_kernel", Keys.ENTER)
    wait_for(browser, lambda: "matches" in css(browser, "#tl-match")[0].text, what="the match count")
    assert css(browser, "#tl-match")[0].text.startswith("39 matches")
    names = browser.execute_script(f"return document.querySelector('{GRAPH}').data.map(t => t.name)")
    assert "search matches" in names
    css(browser, "#tl-next")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("1 / 39"), what="first match")
    css(browser, "#tl-next")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("2 / 39"), what="second match")
    # the view is on the second gemm kernel: step 0, kernel 1 (+20 µs .. +45 µs from the run start)
    rec = server["store"].get_run(server["a"])
    q = parse_qs(urlparse(browser.current_url).query)
    assert int(q["t0"][0]) <= rec.start_ns + 30_000 and int(q["t1"][0]) >= rec.start_ns + 45_000
    assert q["q"] == ["GEMM_kernel"]
    shoot(browser, shots, "timeline_search", keep=True)


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of intervals, the plain way (independent of tracelab's code)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(starts.tolist(), ends.tolist())):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _cli_window_busy(rid: str, db: str, window: str) -> int | None:
    """busy_ns of `tracelab analyze RUN --window START_US:END_US --json`, or None without --window."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": db}
    help_text = subprocess.run(
        [sys.executable, "-m", "tracelab", "analyze", "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    if "--window" not in help_text:
        return None
    out = subprocess.run(
        [sys.executable, "-m", "tracelab", "analyze", rid, "--window", window, "--json", "--db", db],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    return int(json.loads(out)["devices"][0]["busy_ns"])


def test_drag_select_shows_range_statistics(browser, server, shots):
    rid = run_named(server, "graphs/eager/nsys")
    open_page(browser, server, f"/timeline?run={rid}", GRAPH)
    plot = css(browser, f"{GRAPH} .nsewdrag")[0]
    browser.execute_script("arguments[0].scrollIntoView(true); window.scrollBy(0, -80);", plot)
    box = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.width, r.height];", plot
    )
    left, top, w, _h = box
    y = int(top + 40)
    # a real mouse drag across 30 % .. 55 % of the plot (dragmode 'select', horizontal)
    actions = ActionBuilder(browser)
    actions.pointer_action.move_to_location(int(left + 0.30 * w), y).pointer_down()
    actions.pointer_action.move_to_location(int(left + 0.42 * w), y + 4)
    actions.pointer_action.move_to_location(int(left + 0.55 * w), y + 8).pointer_up()
    actions.perform()
    wait_for(browser, lambda: css(browser, "#tl-range .range-device"), what="the range statistics panel")
    panel = css(browser, "#tl-range")[0].text
    assert "busy" in panel and "steps in range" in panel and "top kernels in range" in panel
    window = panel.split("--window ")[1].split()[0]  # START_US:END_US from the run start
    ev = server["store"].load(rid).events
    origin = int(ev["start"].min())
    t0, t1 = (origin + round(float(v) * 1000) for v in window.split(":"))
    rec = server["store"].get_run(rid)
    span = rec.span_ns
    assert 0.25 * span < t0 - rec.start_ns < 0.35 * span and 0.2 * span < t1 - t0 < 0.3 * span
    busy_shown = int(css(browser, "#tl-range .range-device")[0].get_attribute("data-busy-ns"))
    # independent: the union of the device's kernels / memcpys / memsets clipped to the range
    gpu = ev[ev["kind"].isin([0, 1, 2]) & (ev["end"] > t0) & (ev["start"] < t1)]
    expected = _union_ns(np.clip(gpu["start"].to_numpy(), t0, t1), np.clip(gpu["end"].to_numpy(), t0, t1))
    assert busy_shown == expected > 0
    cli = _cli_window_busy(rid, str(server["store"].path), window)
    if cli is not None:
        assert busy_shown == cli
    css(browser, "#tl-analyze-range")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-range-findings"), what="the findings of the range")
    shoot(browser, shots, "timeline_range", keep=True)


def test_kernel_row_opens_its_instances(browser, server, shots):
    open_page(browser, server, f"/kernels?run={server['a']}", "#kernels-table td")
    cell = css(browser, "#kernels-table tbody tr:nth-child(3) td[data-dash-column='name']")[0]
    name = cell.text
    cell.click()
    wait_for(browser, lambda: urlparse(browser.current_url).path == "/timeline", what="the timeline")
    wait_for(browser, lambda: css(browser, "#tl-match") and "matches" in css(browser, "#tl-match")[0].text, what="matches")
    q = parse_qs(urlparse(browser.current_url).query)
    assert q["q"] == [name]
    # the kernels table's count for that kernel (summed over its launch configurations) = matches
    assert css(browser, "#tl-match")[0].text.startswith("1 / ")
    shoot(browser, shots, "kernel_to_timeline")


def test_compare_preselects_the_related_baseline(browser, server, shots):
    """graphs/graph/nsys's baseline is graphs/eager/nsys (same workload and backend, the workload's
    first variant), not the newest run."""
    b = run_named(server, "graphs/graph/nsys")
    expected = run_named(server, "graphs/eager/nsys")
    open_page(browser, server, f"/compare?b={b}", "#compare-devices td")
    q = parse_qs(urlparse(browser.current_url).query)
    assert q.get("a") == [expected] or expected in css(browser, "#compare-permalink")[0].get_attribute("href")
    text = css(browser, "#compare-result h3")[0].text
    assert "graphs/eager/nsys" in text and "graphs/graph/nsys" in text
    shoot(browser, shots, "compare_default", keep=True)


def test_runs_page_lists_each_run_once(browser, server):
    open_page(browser, server, "/", "#runs-page .run-item")
    ids = [c.text for c in css(browser, "#runs-list code")]
    assert len(ids) == len(set(ids)) == len(server["store"].runs())


def test_real_click_on_a_kernel_links_its_launch(browser, server, shots):
    """With drag = select, a plain click on a kernel still selects it (a real mouse click)."""
    rec = server["store"].get_run(server["a"])
    open_page(browser, server, f"/timeline?run={server['a']}&t0={rec.start_ns}&t1={rec.start_ns + 200_000}", GRAPH)
    settle(browser)
    where = browser.execute_script(
        f"""const gd = document.querySelector('{GRAPH}');
        const i = gd.data.findIndex(t => t.name === 'kernels' && t.mode === 'markers');
        if (i < 0) return null;
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        const t = gd.data[i];
        return [box.left + xa._offset + xa.l2p(t.x[0]), box.top + ya._offset + ya.l2p(t.y[0]), t.customdata[0][3]];"""
    )
    assert where is not None
    x, y, corr = where
    browser.execute_script("window.scrollTo(0, 0)")
    actions = ActionBuilder(browser)
    actions.pointer_action.move_to_location(int(x), int(y)).click()
    actions.perform()
    wait_for(browser, lambda: css(browser, "#tl-selection-list li"), what="the linked events after a real click")
    assert f"correlation {int(corr)}: 2 linked event(s)" in css(browser, "#tl-selection")[0].text
