"""Every dashboard page in a real headless Chromium: it loads, shows its content, and the key
interactions work (gap click -> timeline range, zoom -> re-queried view and URL, compare deltas).
Screenshots of every page go to docs/screenshots/."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from tl_hygiene import missing_browser

HAVE_BROWSER = (
    Path(shutil.which("chromium") or "/usr/bin/chromium").exists()
    and Path(shutil.which("chromedriver") or "/usr/bin/chromedriver").exists()
)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason=str(missing_browser()))]

TIMEOUT = 30


def wait_for(driver, predicate, timeout: float = TIMEOUT, what: str = "condition"):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - element not there yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last}); url={driver.current_url}")


def css(driver, selector):
    return driver.find_elements("css selector", selector)


def open_page(driver, server, path: str, ready: str):
    driver.get(server["url"] + path)
    wait_for(driver, lambda: css(driver, ready), what=ready)
    # let Dash finish pending callbacks (the loading spinners go away)
    wait_for(
        driver,
        lambda: driver.execute_script(
            "return !document.querySelector('._dash-loading') && !document.querySelector('[data-dash-is-loading=\"true\"]')"
        ),
        what="callbacks to settle",
    )


def shoot(driver, screenshots, name: str):
    height = driver.execute_script(
        "return Math.min(Math.max(document.documentElement.scrollHeight, document.body.scrollHeight) + 120, 2600)"
    )
    driver.set_window_size(1500, max(900, int(height)))
    time.sleep(0.8)
    driver.save_screenshot(str(screenshots / f"{name}.png"))
    driver.set_window_size(1500, 1000)


def severe_console_errors(driver):
    return [
        e
        for e in driver.get_log("browser")
        if e.get("level") == "SEVERE" and "favicon" not in e.get("message", "")
    ]


TIMELINE = "#tl-canvas-root canvas.tl-main"


def tl_state(driver):
    """What the canvas timeline draws now (window.tracelabTimeline.state(): window in ns from the run
    start, level, rows, legend, counts), or None before it has its data."""
    return driver.execute_script("return window.tracelabTimeline ? window.tracelabTimeline.state() : null")


def wait_timeline(driver, what: str = "the timeline drawn with all its detail"):
    """The canvas drew its current window from tiles of the right level (no coarser stand-ins)."""
    return wait_for(driver, lambda: (tl_state(driver) or {}).get("complete") and tl_state(driver), what=what)


def click_drawn(driver, predicate_js: str):
    """A real mouse click in the middle of the first event drawn one by one that `predicate_js` (a JS
    expression over `it` = [start, end, row, class, pos, correlation, name]) accepts; that event."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    it = driver.execute_script(
        f"return window.tracelabTimeline.drawnItems().find(it => {predicate_js}) || null"
    )
    assert it is not None, "no such event drawn"
    x, y = driver.execute_script(
        "return window.tracelabTimeline.pointAt(arguments[0], arguments[1])", (it[0] + it[1]) / 2, it[2]
    )
    actions = ActionBuilder(driver)
    actions.pointer_action.move_to_location(int(x), int(y)).click()
    actions.perform()
    return it


PAGES = [
    ("runs", "/", "#runs-page .run-item"),
    ("timeline", "/timeline?run={a}", TIMELINE),
    ("gaps", "/gaps?run={a}", "#gaps-table td"),
    ("overlap", "/overlap?run={a}", "#overlap-matrix-0-0 .js-plotly-plot"),
    ("kernels", "/kernels?run={a}", "#kernels-table td"),
    ("compare", "/compare?a={a}&b={b}", "#compare-devices td"),
]


@pytest.mark.parametrize("name,path,ready", PAGES, ids=[p[0] for p in PAGES])
def test_page_loads(browser, server, screenshots, name, path, ready):
    open_page(browser, server, path.format(**server), ready)
    body = browser.find_element("tag name", "body").text
    assert "Unknown run" not in body and "Traceback" not in body and "Error" not in body.split("\n")[0]
    assert not css(browser, "#error"), body[:300]
    if name == "runs":
        assert "baseline" in body and "variant" in body and "Import a trace" in body
    if name == "timeline":
        labels = "|".join(wait_timeline(browser)["rows"])
        assert "stream 7" in labels and "green ctx 5" in labels and "tid 1" in labels
        shown = [e.text for e in css(browser, "#tl-canvas-root .tl-row-label")]  # the row labels, as text
        assert "|".join(shown) == labels
    if name == "kernels":
        assert "attention_kernel" in body and "128×1×1" in body
    # hostile kernel / NVTX names are shown as text, never run as markup
    assert not browser.execute_script(
        "return [...document.scripts].some(s => s.textContent.includes(\"alert('k')\"))"
    )
    assert not css(browser, "img[src='x']")
    assert severe_console_errors(browser) == []
    shoot(browser, screenshots, name)


def test_bad_run_gives_clear_page(browser, server, screenshots):
    open_page(browser, server, "/timeline?run=does-not-exist", "#error-message")
    msg = css(browser, "#error-message")[0].text
    assert "no run with id or name 'does-not-exist'" in msg
    shoot(browser, screenshots, "bad_run")
    open_page(browser, server, f"/timeline?run={server['a']}&t0=abc", "#error-message")
    assert "integer number of nanoseconds" in css(browser, "#error-message")[0].text
    # the page head asked the timeline's data routes for those URLs at once: they answered 400
    errors = [e["message"] for e in severe_console_errors(browser)]
    assert errors and all("/api/timeline/" in m and "status of 400" in m for m in errors), errors


def test_gap_click_changes_timeline_range(browser, server, screenshots):
    rec = server["store"].get_run(server["a"])
    open_page(browser, server, f"/gaps?run={server['a']}", "#gaps-table td")
    first_row = "#gaps-table tbody tr:nth-child(1)"  # the longest gap (plain HTML table, issue 28)
    from tracelab.analyses import analyze
    from tracelab.text_format import fmt_ns, fmt_offset

    gap = max(analyze(server["store"].load(server["a"])).gaps, key=lambda g: (g.duration_ns, -g.start_ns))
    # the position and length read as the CLI and the reports write them (the one formatter)
    assert css(browser, f"{first_row} td[data-col='at']")[0].text == fmt_offset(gap.start_ns, rec.start_ns)
    assert css(browser, f"{first_row} td[data-col='duration']")[0].text == fmt_ns(gap.duration_ns)
    row = css(browser, first_row)[0]
    length = int(row.get_attribute("data-end-ns")) - int(row.get_attribute("data-start-ns"))
    assert length == gap.duration_ns
    gap_start = gap.start_ns
    # a real mouse click on the row's cause cell: the row's link covers the whole row
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    x, y = browser.execute_script(
        "var b = arguments[0].getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]",
        css(browser, f"{first_row} td[data-col='cause']")[0],
    )
    actions = ActionBuilder(browser)
    actions.pointer_action.move_to_location(int(x), int(y)).click()
    actions.perform()
    wait_for(
        browser, lambda: urlparse(browser.current_url).path == "/timeline", what="navigation to the timeline"
    )
    q = parse_qs(urlparse(browser.current_url).query)
    assert q["run"] == [server["a"]]
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert t0 < gap_start and gap_start + length < t1  # the gap, with context on both sides
    assert t1 - t0 < (rec.end_ns - rec.start_ns) / 2  # a zoomed-in view, not the whole run
    # the canvas shows exactly that window (ns from the run start)
    a, b = wait_timeline(browser)["window"]
    assert abs(a - (t0 - rec.start_ns)) < 1 and abs(b - (t1 - rec.start_ns)) < 1
    assert css(browser, "#tl-info")[0].text.startswith("window ")
    shoot(browser, screenshots, "timeline_gap")


def test_timeline_zoom_requeries_and_updates_url(browser, server, screenshots):
    open_page(browser, server, f"/timeline?run={server['a']}", TIMELINE)
    wait_timeline(browser)
    before = css(browser, "#tl-info")[0].text
    # zoom to the first 200 µs of the run, as the keys and the wheel do
    browser.execute_script("window.tracelabTimeline.setWindow(0, 200000)")
    wait_for(
        browser,
        lambda: (
            css(browser, "#tl-info")[0].text != before and "window 200.0 µs" in css(browser, "#tl-info")[0].text
        ),
        what="the zoomed view",
    )
    rec = server["store"].get_run(server["a"])
    q = wait_for(
        browser,
        lambda: parse_qs(urlparse(browser.current_url).query).get("t1") == [str(rec.start_ns + 200_000)]
        and parse_qs(urlparse(browser.current_url).query),
        what="URL window",
    )
    assert q["t0"] == [str(rec.start_ns)]
    href = css(browser, "#tl-permalink")[0].get_attribute("href")
    assert f"t1={rec.start_ns + 200_000}" in href
    st = wait_timeline(browser)
    assert st["window"] == [0, 200_000] and st["level"] > 0  # the detail tiles of that window
    assert browser.execute_script("return document.getElementById('tl-canvas-root').dataset.axisUnit") == "µs"
    shoot(browser, screenshots, "timeline_zoom")


def test_compare_page_shows_deltas(browser, server):
    open_page(browser, server, f"/compare?a={server['a']}&b={server['b']}", "#compare-devices td")
    headline = css(browser, "#compare-headline")[0].text
    assert "span" in headline and "→" in headline
    cells = [c.text for c in css(browser, "#compare-devices td[data-dash-column='metric']")]
    deltas = [c.text for c in css(browser, "#compare-devices td[data-dash-column='delta']")]
    idle_delta = deltas[cells.index("idle")]
    assert idle_delta.startswith("-") and idle_delta != "-0 ns"
    # swapping the runs flips the sign (the dropdown callback re-renders the comparison)
    open_page(browser, server, f"/compare?a={server['b']}&b={server['a']}", "#compare-devices td")
    cells = [c.text for c in css(browser, "#compare-devices td[data-dash-column='metric']")]
    deltas = [c.text for c in css(browser, "#compare-devices td[data-dash-column='delta']")]
    assert deltas[cells.index("idle")].startswith("+")


def test_click_kernel_highlights_its_launch(browser, server, screenshots):
    rec = server["store"].get_run(server["a"])
    open_page(browser, server, f"/timeline?run={server['a']}&t0={rec.start_ns}&t1={rec.start_ns + 200_000}", TIMELINE)
    wait_timeline(browser)
    browser.execute_script("window.scrollTo(0, 0)")
    kernel = click_drawn(browser, "it[3] === 'kernels' && it[5] >= 0")  # a real mouse click on a kernel
    wait_for(browser, lambda: css(browser, "#tl-selection-list li"), what="the linked events")
    clicked = int(kernel[5])
    text = css(browser, "#tl-selection")[0].text
    assert f"correlation {clicked}: 2 linked event(s)" in text
    assert "runtime" in text and "kernel" in text and "cudaLaunchKernel" in text
    st = wait_for(browser, lambda: (tl_state(browser) or {}).get("highlighted") == 2 and tl_state(browser),
                  what="both linked events outlined")
    assert "selected (correlated)" in st["legend"]
    shoot(browser, screenshots, "timeline_selection")


CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def test_upload_errors_and_import(browser, server, tmp_path):
    open_page(browser, server, "/", "#upload-zone input[type=file]")
    file_input = css(browser, "#upload-zone input[type=file]")[0]
    big = tmp_path / "huge<b>.json"
    big.write_bytes(b"0" * (8 * 2**20 + 1))
    file_input.send_keys(str(big))
    msg = wait_for(browser, lambda: css(browser, "#upload-message")[0].text, what="too-large message")
    assert "huge<b>.json: file too large" in msg and "8,388,608 bytes" in msg
    bad = tmp_path / "broken.json"
    bad.write_bytes(b'{"traceEvents": [ {"ph": "X", "na')
    css(browser, "#upload-zone input[type=file]")[0].send_keys(str(bad))
    wait_for(browser, lambda: css(browser, "#upload-result.upload-error"), what="bad-file message")
    text = css(browser, "#upload-result")[0].text
    assert text.startswith("broken.json") and "\n" not in text.strip()
    good = CORPUS / "hta" / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    if good.exists():
        css(browser, "#upload-zone input[type=file]")[0].send_keys(str(good))
        wait_for(browser, lambda: css(browser, "#upload-result.upload-ok"), what="import message")
        assert (
            "imported critical_path__cuda_event_sync__event_sync_trace.json.gz as run"
            in css(browser, "#upload-result")[0].text
        )
        assert "critical_path__cuda_event_sync" in css(browser, "#runs-list")[0].text


def test_recorded_runs_render(browser, server, screenshots):
    """Every run recorded on a real GPU that ships with the project (demo runs, test fixtures)."""
    if not server["recorded"]:
        pytest.skip("no recorded runs in this checkout yet")
    for i, rid in enumerate(server["recorded"]):
        for page, ready in (("timeline", TIMELINE), ("gaps", "#gaps-page"),
                            ("overlap", "#overlap-page"), ("kernels", "#kernels-table")):
            open_page(browser, server, f"/{page}?run={rid}", ready)
            assert not css(browser, "#error"), css(browser, "body")[0].text[:300]
            if page == "timeline":
                assert wait_timeline(browser)["items"] > 0
            if i == 0:
                shoot(browser, screenshots, f"recorded_{page}")
        assert severe_console_errors(browser) == []
