"""The HTML report opened in a real headless Chromium: every figure renders with data, offline, with no
console errors and no resource loads; the screenshot goes to a temporary directory (conftest.screenshots_path)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from test_reports import CORPUS, HOSTILE, analysis_of, hostile_analysis, synthetic_timeline
from tl_hygiene import missing_browser, screenshots_path

from tracelab.api import report as write_report
from tracelab.errors import BadInput

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser())),
]


@pytest.fixture()
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tracelab-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,3000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


_STATE = """
var divs = Array.from(document.querySelectorAll('div.fig'));
return divs.map(function (d) {
  var traces = (d._fullData || []).map(function (t) {
    var n = 0;
    ['x', 'y', 'z'].forEach(function (k) { if (t[k] && t[k].length > n) n = t[k].length; });
    return n;
  });
  return {id: d.id, plotted: d.classList.contains('js-plotly-plot'),
          svgs: d.querySelectorAll('.main-svg').length, traces: traces,
          marks: d.querySelectorAll('.point, .heatmaplayer image, .scatterlayer path.js-line').length};
});
"""


def _wait_rendered(driver, timeout: float = 60.0) -> list[dict]:
    deadline = time.time() + timeout
    state: list[dict] = []
    while time.time() < deadline:
        state = driver.execute_script(_STATE)
        if state and all(s["plotted"] and s["svgs"] > 0 for s in state):
            return state
        time.sleep(0.25)
    return state


def _check_report(driver, report: Path, min_figures: int) -> None:
    driver.get(report.as_uri())
    state = _wait_rendered(driver)
    assert len(state) >= min_figures, state
    for fig in state:
        assert fig["plotted"] and fig["svgs"] > 0, fig
        assert fig["traces"] and all(n > 0 for n in fig["traces"]), fig  # every trace has data
        assert fig["marks"] > 0, fig  # and drew something
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    # offline: nothing was fetched, and the console has no errors (CSP violations would be errors)
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def _screenshot(driver, name: str) -> Path:
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.3)
    shot = screenshots_path() / name
    assert driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    return shot


def test_html_report_renders_in_chromium(browser, tmp_path: Path):
    base = synthetic_timeline(gap_us=60, source="baseline.json", seed=1)
    pwn = ('<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>", "<svg onload=window.__pwned=3>")
    tl = synthetic_timeline(iterations=40, names=(*HOSTILE, *pwn), gpu_name='<img src=x onerror="window.__pwned=4">')
    report = write_report(tmp_path / "report.html", hostile_analysis(tl), tl, against=(analysis_of(base), base))
    _check_report(browser, report, min_figures=12)
    sm_lanes = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.fig')).filter(d => (d._fullData || [])"
        ".some(t => t.type === 'heatmap' && t.z.length === 132)).length"
    )
    assert sm_lanes == 1  # the estimated SM lanes of the (hostile-named) H100
    # the hostile names are shown as text, and no script of theirs ran
    body = browser.find_element("tag name", "body").text
    assert HOSTILE[0] in body and HOSTILE[1] in body
    assert all(p in body for p in pwn)
    assert browser.execute_script("return window.__pwned === undefined")


CORPUS_TRACE = CORPUS / "tracelens" / "h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_TRACE.exists(), reason="corpus absent")
def test_corpus_html_report_renders_in_chromium(browser, tmp_path: Path):
    """A real H100 trace: estimated per-SM lanes, utilization heatmap and kernel figures all draw."""
    from tracelab import io as parsers

    tl = parsers.load_trace(CORPUS_TRACE)
    report = write_report(tmp_path / "owlv2.html", analysis_of(tl), tl)
    assert report.stat().st_size < 5_000_000
    _check_report(browser, report, min_figures=9)
    heatmaps = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.fig')).filter(d => (d._fullData || [])"
        ".some(t => t.type === 'heatmap')).map(d => d._fullData[0].z.length)"
    )
    assert len(heatmaps) >= 2 and max(heatmaps) >= 132  # the SM lanes of the H100: one row per SM


def test_demo_report_renders_in_chromium(browser, tmp_path: Path):
    """A bundled run recorded on an H200 (green contexts, measured per-SM lanes) against its sequential
    baseline: every figure draws; the screenshot for the docs is taken from this one."""
    demo = pytest.importorskip("tracelab.demo")
    parsers = pytest.importorskip("tracelab.io")
    try:
        run = demo.demo_run("green_contexts-green_ctx-nsys", cache=tmp_path / "cache")
        base = demo.demo_run("green_contexts-sequential-nsys", cache=tmp_path / "cache")
    except BadInput as exc:  # not bundled in this build
        pytest.skip(f"bundled runs not available: {exc}")
    tl, tl_base = parsers.load_trace(run), parsers.load_trace(base)
    report = write_report(tmp_path / "green_ctx.html", analysis_of(tl), tl, against=(analysis_of(tl_base), tl_base))
    assert report.stat().st_size < 5_000_000
    _check_report(browser, report, min_figures=12)
    sm = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.fig')).filter(d => (d._fullData || [])"
        ".some(t => t.type === 'heatmap' && /measured/.test((d.layout.title || {}).text || ''))).length"
    )
    assert sm == 1  # measured SM lanes (probe kernels), per green-context partition
    _screenshot(browser, "report-screenshot.png")
