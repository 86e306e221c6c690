"""The Gaps page's draw time in headless Chromium (issue 28: 2.1-3.0 s cold, 1.3-1.6 s warm on a
sync_pitfalls run; target <= 1 s, like the timeline), this checkout side by side with another version of
tracelab (by default the commit before issue 28's Gaps page work, unpacked with `git archive`), on the
same store.

For each version: a dashboard server in its own process and a fresh Chromium profile; then for each run
(the bundled sync_pitfalls/item_every_step runs: 253 and 248 gaps): navigation start -> the gaps chart
drawn with its points and the gaps table's first rows there (measured in the page with
performance.now(), the frame after both are in the DOM). "cold": the first load of the run after the
server started (the server analyses the run then); "warm": reloads after that (median of --repeats).

    /work/venv/bin/python benchmarks/bench_gaps_page.py [--baseline-commit 896d260] [--repeats 5] [--rounds 3]

The versions alternate, one freshly started server each (A B, B A, ...: a shared machine's load changes),
and each line gives the 1-minute load average before and after it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_browser import release_tree, start_server

# installed before any page script runs: when the gaps chart (with its points) and the table are drawn
GAPS_DRAWN = """
(function () {
  function drawn() {
    var f = document.querySelector('#gaps-graph');
    var points;
    if (f && f.hasAttribute('data-svg')) {  // the SVG chart in the page (this version): its points drawn
      points = f.querySelector('circle');
    } else if (f && f.tagName === 'IFRAME') {  // the SVG chart in an iframe (01ab8c7): its points there
      points = f.contentDocument && f.contentDocument.querySelector('circle');
    } else {  // the Plotly chart (older versions): drawn with its points
      var gd = document.querySelector('#gaps-graph .js-plotly-plot');
      points = gd && gd._fullData && gd._fullData.length > 0 &&
        gd.querySelector('.scatterlayer .point, .gl-canvas-context, canvas');
    }
    return points && document.querySelector('#gaps-table td');
  }
  function check() {
    if (drawn()) { requestAnimationFrame(function () { window.__gapsDrawn = performance.now(); }); return; }
    requestAnimationFrame(check);
  }
  requestAnimationFrame(check);
})();
"""

RUNS = ("sync_pitfalls/item_every_step/torch", "sync_pitfalls/item_every_step/nsys")


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--window-size=1500,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_page_load_timeout(120)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": GAPS_DRAWN})
    return driver


def gaps_drawn(driver, url: str) -> float:
    """Seconds from navigation start to the drawn Gaps page."""
    driver.get(url)
    end = time.time() + 120
    while time.time() < end:
        t = driver.execute_script("return window.__gapsDrawn || null")
        if t:
            return float(t) / 1e3
        time.sleep(0.02)
    raise RuntimeError(f"the gaps page was not drawn at {url}")


def measure(
    label: str, src: Path, db: Path, ids: dict[str, str], repeats: int, browser_warmup: int = 1
) -> dict[str, tuple[float, float]]:
    proc, base = start_server(src, db)
    driver = browser(Path(tempfile.mkdtemp(prefix="bench-chromium-")))
    out = {}
    try:
        for _ in range(browser_warmup):  # the browser's own start-up is not the page's
            driver.get(base + "/")
        for name, rid in ids.items():
            url = f"{base}/gaps?run={rid}"
            load = os.getloadavg()[0]
            cold = gaps_drawn(driver, url)
            warm = statistics.median(gaps_drawn(driver, url) for _ in range(repeats))
            out[name] = (cold, warm)
            print(
                f"{label:>10}  {name:40} cold {cold:5.2f} s   warm {warm:5.2f} s (median of {repeats})"
                f"   load {load:4.1f} -> {os.getloadavg()[0]:4.1f}",
                flush=True,
            )
    finally:
        driver.quit()
        proc.kill()
        proc.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-commit", default="896d260", help="the version to compare with")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="servers started per version, alternating")
    ap.add_argument("--browser-warmup", type=int, default=1,
                    help="loads of the Runs page before the first Gaps page (default 1; with 2 the first Gaps page "
                         "was 0.2-0.8 s faster for both versions at load 10: Chromium's script caching)")
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()

    from tracelab.demo import demo_run
    from tracelab.io import load_trace
    from tracelab.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="bench-gaps-"))
    db = tmp / "store.db"
    store = Store(db)
    ids = {}
    for name in RUNS:
        path = demo_run(name.replace("/", "-"), tmp / "runs")
        fingerprint = name.replace("/", "-").ljust(64, "0")
        ids[name] = store.import_timeline(
            load_trace(path), source_path=str(path), fingerprint=fingerprint, name=name
        )
    versions = [("this", ROOT)]
    if not args.skip_baseline:
        versions.insert(0, (args.baseline_commit, release_tree(args.baseline_commit, tmp / "baseline")))
    # the versions alternate (A B, B A, A B, ...): a shared machine's load changes during a run
    rounds: dict[str, list[dict[str, tuple[float, float]]]] = {label: [] for label, _ in versions}
    for r in range(args.rounds):
        for label, src in versions if r % 2 == 0 else versions[::-1]:
            rounds[label].append(measure(label, src, db, ids, args.repeats, args.browser_warmup))
    print()
    print(f"median over {args.rounds} round(s), each a freshly started server (cold: its first load of the run)")
    print(f"{'run':40} " + "  ".join(f"{label + ' cold':>12} {label + ' warm':>12}" for label, _ in versions))
    for name in RUNS:
        cells = []
        for label, _ in versions:
            cold = statistics.median(m[name][0] for m in rounds[label])
            warm = statistics.median(m[name][1] for m in rounds[label])
            cells.append(f"{cold:>10.2f} s {warm:>10.2f} s")
        print(f"{name:40} " + "  ".join(cells))


if __name__ == "__main__":
    main()
