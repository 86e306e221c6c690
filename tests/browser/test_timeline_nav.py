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
from test_pages import (
    HAVE_BROWSER,
    TIMELINE,
    click_drawn,
    css,
    open_page,
    severe_console_errors,
    tl_state,
    wait_for,
    wait_timeline,
)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

ROOT = Path(__file__).resolve().parents[2]
README_SHOTS = ROOT / "docs" / "screenshots"


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
    if keep and os.environ.get("TRACELAB_UPDATE_SCREENSHOTS") == "1":  # README's images, refreshed on request only
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, README_SHOTS / path.name)
    return path


def run_named(server, name: str) -> str:
    return next(r.id for r in server["store"].runs() if r.name == name)


def settle(driver):
    wait_for(
        driver,
        lambda: driver.execute_script(
            "return !document.querySelector('[data-dash-is-loading=\"true\"]')"
        ),
        what="callbacks to settle",
    )


def idle_pixels(driver, row: int) -> float:
    """The fraction of the canvas's columns where something is painted on the middle line of `row`
    (pixels read back from the canvas)."""
    return driver.execute_script(
        """const root = document.getElementById('tl-canvas-root');
        const c = root.querySelector('canvas.tl-main'), ctx = c.getContext('2d');
        const box = c.getBoundingClientRect(), p = window.tracelabTimeline.pointAt(0, arguments[0]);
        const y = Math.round((p[1] - box.top) * c.height / box.height);
        const px = ctx.getImageData(0, y, c.width, 1).data;
        let painted = 0;
        for (let i = 0; i < c.width; i++) {
          const r = px[4 * i], g = px[4 * i + 1], b = px[4 * i + 2];
          if (Math.abs(r - 252) + Math.abs(g - 247) + Math.abs(b - 246) > 30) { painted++; }  // not the row's background
        }
        return painted / c.width;""",
        row,
    )


def test_idle_lane_at_whole_run_zoom_on_graphs_eager(browser, server, shots):
    """graphs/eager is ~92 % idle: at whole-run zoom its idle row must show it, gaps by cause."""
    rid = run_named(server, "graphs/eager/nsys")
    rec = server["store"].get_run(rid)
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    st = wait_timeline(browser)
    causes = sorted({n for n in st["legend"] if n.startswith("idle (")})
    assert causes, st["legend"]
    assert "idle, all (thickness = idle fraction)" in st["legend"]
    idle_row = st["rowKinds"].index("idle")
    assert st["rows"][idle_row].startswith("idle")
    # the whole run is in view
    a, b = st["window"]
    assert a == 0 and abs(b - rec.span_ns) < 1_000
    # the analysis says the device is busy under 20 % of its span; the idle row is painted across
    # most of the canvas (the idle between tiny kernels, and the gaps by cause on top)
    from tracelab.analyses import analyze

    dev = analyze(server["store"].load(rid)).devices[0]
    assert dev.busy_ns / dev.span_ns < 0.2
    assert idle_pixels(browser, idle_row) > 0.6
    shoot(browser, shots, "timeline_idle_graphs_eager", keep=True)
    assert severe_console_errors(browser) == []


def test_w_zooms_and_d_pans(browser, server, shots):
    rid = run_named(server, "graphs/eager/nsys")
    rec = server["store"].get_run(rid)
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    before = wait_timeline(browser)
    body = browser.find_element("tag name", "body")
    body.click()
    ActionChains(browser).send_keys("w").perform()
    # the canvas redraws the new window at once, from the tiles it holds
    zoomed = wait_for(browser, lambda: tl_state(browser)["draws"] > before["draws"] and tl_state(browser), what="redraw")
    w0 = before["window"][1] - before["window"][0]
    assert zoomed["window"][1] - zoomed["window"][0] == pytest.approx(0.6 * w0, rel=1e-6)  # W keeps 60 %
    # ... and the page follows: the URL carries the window
    def url_window():
        q = parse_qs(urlparse(browser.current_url).query)
        return (int(q["t0"][0]), int(q["t1"][0])) if "t0" in q else None

    t0, t1 = wait_for(browser, lambda: (url_window() or (0, rec.span_ns))[1] - url_window()[0] < 0.9 * rec.span_ns
                      and url_window(), what="the URL of the zoomed view")
    assert t1 - t0 == pytest.approx(0.6 * rec.span_ns, rel=0.01)
    wait_timeline(browser)
    ActionChains(browser).send_keys("d").perform()
    wait_for(
        browser,
        lambda: int(parse_qs(urlparse(browser.current_url).query)["t0"][0]) != t0,
        what="the panned view in the URL",
    )
    q2 = parse_qs(urlparse(browser.current_url).query)
    u0, u1 = int(q2["t0"][0]), int(q2["t1"][0])
    assert u0 > t0 and u1 > t1  # moved right
    assert u1 - u0 <= t1 - t0 + 1_000  # same width (clamped at the run's end at most)
    wait_timeline(browser)
    shoot(browser, shots, "timeline_keys")
    # the wheel zooms in around the mouse: a real wheel event over the canvas, at 25 % of its width
    before = wait_timeline(browser)
    browser.execute_script("window.scrollTo(0, 0)")
    box = browser.execute_script(
        "const r = document.querySelector('#tl-canvas-root canvas.tl-over').getBoundingClientRect();"
        " return [r.left, r.top, r.width];"
    )
    ActionChains(browser).scroll(int(box[0] + 0.25 * box[2]), int(box[1] + 30), 0, -200).perform()
    wheeled = wait_for(browser, lambda: tl_state(browser)["window"] != before["window"] and tl_state(browser),
                       what="the wheel's zoom")
    (a0, b0), (a1, b1) = before["window"], wheeled["window"]
    assert b1 - a1 < b0 - a0  # zoomed in
    pivot0, pivot1 = a0 + 0.25 * (b0 - a0), a1 + 0.25 * (b1 - a1)
    assert pivot1 == pytest.approx(pivot0, abs=0.01 * (b0 - a0))  # around the mouse


def test_search_highlights_counts_and_steps(browser, server, shots):
    """The synthetic baseline run has 8 steps x 5 kernels; kernel j of step i is gemm_kernel_{j % 2}
    except one hostile name: 39 gemm kernels."""
    open_page(browser, server, f"/timeline?run={server['a']}", TIMELINE)
    wait_timeline(browser)
    box = css(browser, "#tl-search")[0]
    assert box.get_attribute("type") == "search"
    box.send_keys("GEMM_kernel", Keys.ENTER)
    wait_for(browser, lambda: "matches" in css(browser, "#tl-match")[0].text, what="the match count")
    assert css(browser, "#tl-match")[0].text.startswith("39 matches")
    st = wait_for(browser, lambda: (tl_state(browser) or {}).get("matchesDrawn") and tl_state(browser), what="outlines")
    assert "search matches" in st["legend"] and st["matchesDrawn"] == 39  # all in view, each outlined
    css(browser, "#tl-next")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("1 / 39"), what="first match")
    css(browser, "#tl-next")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("2 / 39"), what="second match")
    # the view is on the second gemm kernel: step 0, kernel 1 (+20 µs .. +45 µs from the run start)
    rec = server["store"].get_run(server["a"])
    q = wait_for(
        browser,
        lambda: int(parse_qs(urlparse(browser.current_url).query)["t1"][0]) < rec.end_ns
        and parse_qs(urlparse(browser.current_url).query),
        what="the URL of the match",
    )
    assert int(q["t0"][0]) <= rec.start_ns + 30_000 and int(q["t1"][0]) >= rec.start_ns + 45_000
    assert q["q"] == ["GEMM_kernel"]
    st = wait_timeline(browser)
    assert st["window"][0] <= 30_000 and st["window"][1] >= 45_000
    shoot(browser, shots, "timeline_search", keep=True)


def test_quick_next_clicks_end_on_the_last_match(browser, server, shots):
    """Three clicks on "next" without waiting end on the third match: the third gemm kernel of the run is
    step 0's kernel 3 (+70 µs .. +85 µs; kernel 2 has the hostile name)."""
    open_page(browser, server, f"/timeline?run={server['a']}", TIMELINE)
    wait_timeline(browser)
    css(browser, "#tl-search")[0].send_keys("GEMM_kernel", Keys.ENTER)
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("39 matches"), what="the match count")
    for _ in range(3):
        css(browser, "#tl-next")[0].click()

    def settled():
        st = tl_state(browser)
        text = css(browser, "#tl-match")[0].text
        return st and st.get("complete") and text.startswith("3 / 39") and 70_000 <= sum(st["window"]) / 2 <= 85_000

    wait_for(browser, settled, what="the third match, its count and its window")
    css(browser, "#tl-prev")[0].click()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("2 / 39"), what="back to the second")
    wait_for(browser, lambda: 30_000 <= sum(tl_state(browser)["window"]) / 2 <= 45_000, what="its window")


def test_a_late_window_answer_does_not_undo_the_next_step(browser, server, shots):
    """The answer to the window of match 1 comes back after the step to match 2 (a busy server, a slow
    canvas): the count and the view end on match 2. Made deterministic in the page: the canvas moves
    0.5 s after a step, the server's answers to window reports arrive 0.6 s late, and the second click
    comes 0.8 s after the first. The second gemm kernel is step 0's kernel 1 (+30 µs .. +45 µs)."""
    open_page(browser, server, f"/timeline?run={server['a']}", TIMELINE)
    wait_timeline(browser)
    css(browser, "#tl-search")[0].send_keys("GEMM_kernel", Keys.ENTER)
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("39 matches"), what="the match count")
    browser.execute_script(
        "const f = window.fetch; window.fetch = function (url, opts) {"
        " const p = f.apply(this, arguments);"
        " if (String(url).includes('_dash-update-component') && opts && String(opts.body).includes('tl-window')) {"
        "   return p.then(r => new Promise(done => setTimeout(() => done(r), 600))); }"
        " return p; };"
        " const t = window.tracelabTimeline, g = t.goto;"
        " t.goto = function () { const a = arguments; setTimeout(() => g.apply(t, a), 500); };"
    )
    css(browser, "#tl-next")[0].click()
    clicked = time.time()
    wait_for(browser, lambda: css(browser, "#tl-match")[0].text.startswith("1 / 39"), what="the first match")
    time.sleep(max(0.0, 0.8 - (time.time() - clicked)))
    css(browser, "#tl-next")[0].click()
    time.sleep(3.0)  # every answer, late or not, has arrived
    assert css(browser, "#tl-match")[0].text.startswith("2 / 39")
    st = wait_timeline(browser)
    assert 30_000 <= sum(st["window"]) / 2 <= 45_000
    q = parse_qs(urlparse(browser.current_url).query)
    assert int(q["t0"][0]) + int(q["t1"][0]) == 2 * (server["store"].get_run(server["a"]).start_ns + 37_500)


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
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    wait_timeline(browser)
    plot = css(browser, "#tl-canvas-root canvas.tl-over")[0]
    browser.execute_script("arguments[0].scrollIntoView(true); window.scrollBy(0, -80);", plot)
    box = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.width, r.height];", plot
    )
    left, top, w, _h = box
    y = int(top + 40)
    # a real mouse drag across 30 % .. 55 % of the plot
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
    # the canvas opens on the kernel's first instance, outlined as a match
    ev = server["store"].load(server["a"]).events
    strings = server["store"].strings(server["a"])
    first = ev[ev["name"] == strings.index(name)].iloc[0]
    origin = int(ev["start"].min())
    st = wait_for(browser, lambda: (tl_state(browser) or {}).get("matchesDrawn") and tl_state(browser), what="outline")
    assert st["window"][0] <= first["start"] - origin and first["end"] - origin <= st["window"][1]
    assert st["window"][1] - st["window"][0] < (ev["end"].max() - origin) / 10
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
    """A plain click on a kernel (a real mouse click on the canvas) selects it; a drag does not."""
    rec = server["store"].get_run(server["a"])
    open_page(browser, server, f"/timeline?run={server['a']}&t0={rec.start_ns}&t1={rec.start_ns + 200_000}", TIMELINE)
    wait_timeline(browser)
    browser.execute_script("window.scrollTo(0, 0)")
    kernel = click_drawn(browser, "it[3] === 'kernels' && it[6] === 'gemm_kernel_1'")
    wait_for(browser, lambda: css(browser, "#tl-selection-list li"), what="the linked events after a real click")
    assert f"correlation {int(kernel[5])}: 2 linked event(s)" in css(browser, "#tl-selection")[0].text
    assert "gemm_kernel_1" in css(browser, "#tl-selection")[0].text
    # the launch -> kernel arrows of the view: one per launch whose kernel is in view too
    st = tl_state(browser)
    drawn = browser.execute_script("return window.tracelabTimeline.drawnItems()")
    launches = {int(it[5]) for it in drawn if it[3] == "API calls" and it[5] >= 0}
    gpu = {int(it[5]) for it in drawn if it[3] in ("kernels", "memcpy", "memset") and it[5] >= 0}
    assert st["flows"] == len(launches & gpu) > 0


def test_hover_shows_the_whole_gap_evidence(browser, server, shots):
    """Hovering a gap on the idle row shows its cause, length and the whole evidence (wrapped, not
    cut), as the analysis wrote it."""
    rid = server["a"]
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    st = wait_timeline(browser)
    from tracelab.analyses import analyze
    from tracelab.render.text.gap_evidence import gap_evidence

    a = analyze(server["store"].load(rid))
    gap = a.gaps[0]
    rec = server["store"].get_run(rid)
    mid = ((gap.start_ns + gap.end_ns) / 2) - rec.start_ns
    browser.execute_script("window.scrollTo(0, 0)")
    x, y = browser.execute_script("return window.tracelabTimeline.pointAt(arguments[0], arguments[1])",
                                  mid, st["rowKinds"].index("idle"))
    actions = ActionBuilder(browser)
    actions.pointer_action.move_to_location(int(x), int(y))
    actions.perform()
    evidence = gap_evidence(a, [gap])[0]
    tip = wait_for(browser, lambda: evidence in (css(browser, ".tl-tooltip")[0].text.replace("\n", " ")) and
                   css(browser, ".tl-tooltip")[0], what="the gap's evidence in the tooltip")
    assert tip.text.startswith(f"idle ({gap.cause})")
    assert browser.execute_script("const t = arguments[0]; return t.scrollWidth <= t.clientWidth + 1", tip)
    shoot(browser, shots, "timeline_gap_tooltip", keep=True)


def test_page_controls_drive_the_canvas(browser, server):
    """The lane checkboxes, the arrows checkbox, 'Zoom out ×3', 'Whole run' and 'Clear selection'
    act on the canvas (through the page's clientside bridges)."""
    rec = server["store"].get_run(server["a"])
    open_page(browser, server, f"/timeline?run={server['a']}&t0={rec.start_ns}&t1={rec.start_ns + 200_000}", TIMELINE)
    st = wait_timeline(browser)
    assert st["flows"] > 0 and any("tid 1" in r for r in st["rows"])
    browser.execute_script("window.scrollTo(0, 0)")
    flows_box = css(browser, "#tl-flows input")[0]
    flows_box.click()
    wait_for(browser, lambda: tl_state(browser)["flows"] == 0, what="no arrows")
    flows_box.click()
    wait_for(browser, lambda: tl_state(browser)["flows"] == st["flows"], what="the arrows again")
    host = next(e for e in css(browser, "#tl-show label") if e.text.strip() == "host threads")
    host.find_element("tag name", "input").click()
    wait_for(browser, lambda: not any(r.startswith("pid ") for r in (tl_state(browser) or {"rows": ["pid"]})["rows"]),
             what="the host rows hidden")
    assert any(r.startswith("NVTX") for r in wait_timeline(browser)["rows"])  # the other groups stay
    css(browser, "#tl-zoom-out")[0].click()
    wait_for(browser, lambda: tl_state(browser)["window"] == [0, 600_000], what="zoomed out x3 (clamped at 0)")
    css(browser, "#tl-full")[0].click()
    wait_for(browser, lambda: tl_state(browser)["window"] == [0, rec.span_ns], what="the whole run")
    kernel = None
    browser.execute_script("window.tracelabTimeline.setWindow(0, 200000)")
    wait_timeline(browser)
    browser.execute_script("window.scrollTo(0, 0)")
    kernel = click_drawn(browser, "it[3] === 'kernels' && it[5] >= 0")
    wait_for(browser, lambda: (tl_state(browser) or {}).get("highlighted") == 1, what="the kernel outlined (host hidden)")
    assert kernel is not None
    css(browser, "#tl-clear")[0].click()
    wait_for(browser, lambda: tl_state(browser)["highlighted"] == 0 and not css(browser, "#tl-selection-list li"),
             what="the selection cleared")


def test_critical_path_lane_is_drawn(browser, server, shots):
    """Issue 24: each rank with steps gets a critical-path lane, painted across its steps (the path
    tiles every step: independent check from the run's steps in the store's timeline), with its
    categories in the legend."""
    from tracelab.analyses.steps.infer import find_steps

    rid = server["a"]
    rec = server["store"].get_run(rid)
    steps = find_steps(server["store"].load(rid)).steps
    covered = sum(s.end_ns - s.start_ns for s in steps) / rec.span_ns
    open_page(browser, server, f"/timeline?run={rid}", TIMELINE)
    st = wait_for(
        browser,
        lambda: any(n.startswith("critical path: ") for n in (tl_state(browser) or {}).get("legend", []))
        and tl_state(browser),
        what="the critical path in the legend",
    )
    row = st["rowKinds"].index("critical")
    assert st["rows"][row] == "critical path"
    assert idle_pixels(browser, row) >= 0.8 * covered
    shoot(browser, shots, "timeline_critical_path")
    assert severe_console_errors(browser) == []
