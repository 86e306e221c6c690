"""Timeline latency in a real browser: headless Chromium over a ~1M-event run (built by
bench_dashboard.py), this checkout side by side with another version of tracelab (by default the
last Plotly timeline, main at git commit 3233203, unpacked with `git archive`) in the same run, on the
same store.

For each version: a dashboard server in its own process, a fresh Chromium profile; then
- first draw: navigation start -> the timeline drawn with all the detail of its first view (measured
  in the page with performance.now(); "cold": fresh server and empty browser cache; "warm": page
  reloads after that). Canvas timeline: the first draw at which every tile of the view is there
  (`window.__tlFirstComplete`); Plotly timeline (older versions): the figure's first draw;
- zoom / pan: a new window, as the W/S/A/D keys and the wheel set it. Canvas timeline:
  `tracelabTimeline.setWindow` -> the next frame drawn from the tiles the browser holds ("zoom",
  "pan"), and -> the frame with all the window's tiles ("detail"); Plotly timeline: Plotly.relayout ->
  the server's figure for that window drawn (both columns: the browser draws nothing sooner).

    .venv/bin/python benchmarks/bench_browser.py [--events 1000000] [--baseline-commit 3233203]
                                                 [--baseline-src DIR] [--repeats 3]

Targets (issue 12) on the 2-core machine: first draw <= 0.8 s, zoom / pan <= 150 ms median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SERVER = """
import logging, sys
from werkzeug.serving import make_server
from tracelab.store import Store
from app import create_app
app = create_app(Store(sys.argv[1]))
logging.getLogger("werkzeug").setLevel(logging.ERROR)
srv = make_server("127.0.0.1", 0, app.server, threaded=True)
print(srv.server_port, flush=True)
srv.serve_forever()
"""

# installed before any page script runs: records when the timeline is first drawn in full
FIRST_DRAW = """
(function () {
  function drawn() {
    if (window.__tlFirstComplete) { return window.__tlFirstComplete; }  // the canvas timeline
    var gd = document.querySelector('#tl-graph .js-plotly-plot');  // the Plotly timeline
    return gd && gd._fullData && gd._fullData.length > 0 && gd.querySelector('canvas') && gd._fullLayout;
  }
  function check() {
    var d = drawn();
    if (typeof d === 'number') { window.__firstDraw = d; return; }
    if (d) {
      requestAnimationFrame(function () { window.__firstDraw = performance.now(); });
      return;
    }
    requestAnimationFrame(check);
  }
  requestAnimationFrame(check);
})();
"""

# one zoom / pan of the Plotly timeline: relayout to [a, b] (ns from the run start) and wait for the
# server's redraw
ZOOM_PLOTLY = """
const [a, b, done] = arguments;
const gd = document.querySelector('#tl-graph .js-plotly-plot');
const dataBefore = gd.data;
const unit = gd.layout.xaxis.title.text.includes('µs') ? 1e3 : 1e6;
const t0 = performance.now();
const give_up = t0 + 60000;
// the server's view is drawn when Plotly.react replaced the figure's data (a relayout never does;
// the info line may read the same after a short pan); one more frame lets it paint
const poll = () => {
  if (performance.now() > give_up) { done([-1, -1, -1]); return; }
  if (gd.data !== dataBefore) {
    requestAnimationFrame(() => {
      const req = performance.getEntriesByType('resource')
        .filter(e => e.name.includes('_dash-update-component') && e.startTime >= t0);
      const server = req.length ? Math.max(...req.map(e => e.responseEnd)) - t0 : -1;
      const dt = performance.now() - t0;
      done([dt, dt, server]);
    });
    return;
  }
  requestAnimationFrame(poll);
};
window.Plotly.relayout(gd, {'xaxis.range': [a / unit, b / unit]});
requestAnimationFrame(poll);
"""

# one zoom / pan of the canvas timeline: setWindow (what the keys and the wheel call) -> the next frame
# drawn from the tiles held -> the frame with all the window's tiles
ZOOM_CANVAS = """
const [a, b, done] = arguments;
const tl = window.tracelabTimeline;
const before = tl.state().draws;
const t0 = performance.now();
const give_up = t0 + 60000;
let frame = -1;
const poll = () => {
  const s = tl.state();
  if (performance.now() > give_up) { done([frame, -1, -1]); return; }
  if (s.draws > before && frame < 0) { frame = s.lastDraw - t0; }
  if (s.draws > before && s.complete) {
    const req = performance.getEntriesByType('resource')
      .filter(e => e.name.includes('/api/timeline/tile') && e.startTime >= t0);
    const server = req.length ? Math.max(...req.map(e => e.responseEnd)) - t0 : 0;
    done([frame, s.lastDraw - t0, server]);
    return;
  }
  requestAnimationFrame(poll);
};
tl.setWindow(a, b);
requestAnimationFrame(poll);
"""


def release_tree(commit: str, dest: Path) -> Path:
    """The tracelab source at `commit`, unpacked from `git archive` (no worktree metadata touched)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def start_server(src: Path, db: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(db)], cwd=src, env=env, stdout=subprocess.PIPE, text=True
    )
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise RuntimeError(f"the dashboard of {src} did not start")
    return proc, f"http://127.0.0.1:{port}"


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--window-size=1500,1000", f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(90)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FIRST_DRAW})
    return driver


def first_draw(driver, url: str) -> float:
    driver.get(url)
    end = time.time() + 120
    while time.time() < end:
        t = driver.execute_script("return window.__firstDraw || null")
        if t:
            return float(t) / 1e3
        time.sleep(0.05)
    raise RuntimeError(f"no timeline drawn at {url}")


def settle(driver) -> None:
    time.sleep(1.0)
    end = time.time() + 60
    while time.time() < end and driver.execute_script(
        "return !!document.querySelector('[data-dash-is-loading=\"true\"]')"
    ):
        time.sleep(0.1)


def measure(label: str, src: Path, db: Path, rid: str, span: int, repeats: int) -> dict[str, object]:
    proc, base = start_server(src, db)
    profile = Path(tempfile.mkdtemp(prefix="bench-chromium-"))
    driver = browser(profile)
    try:
        url = f"{base}/timeline?run={rid}"
        cold = first_draw(driver, url)
        warm = []
        for _ in range(repeats):
            warm.append(first_draw(driver, url))
        settle(driver)
        ops = []
        mid = 0.47 * span
        for frac in (0.5, 0.1, 0.01, 0.001, 0.0001, 0.3, 0.05):  # zooms, as bench_dashboard.py
            w = frac * span
            ops.append(("zoom", mid - w / 2, mid + w / 2))
            ops.append(("pan", mid - w / 4, mid + 3 * w / 4))  # D: a quarter of the window right
        canvas = bool(driver.execute_script("return !!window.tracelabTimeline"))
        times: dict[str, list[float]] = {"zoom": [], "pan": [], "detail": []}
        failed = 0
        waits: list[float] = []  # the last data response for the view (server + network)
        for kind, a, b in ops:
            frame, detail, server = driver.execute_async_script(ZOOM_CANVAS if canvas else ZOOM_PLOTLY, a, b)
            if detail < 0:  # no full redraw within 60 s: counted, not timed
                failed += 1
                print(f"  {label}: no full redraw within 60 s after a {kind} to [{a:.0f}, {b:.0f}] ns", flush=True)
            else:
                times[kind].append(frame / 1e3)
                times["detail"].append(detail / 1e3)
                waits.append(server / 1e3)
            settle(driver)
        payload = driver.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(e => e.name.includes('_dash-update-component') || e.name.includes('/api/timeline/'))"
            ".map(e => e.transferSize || e.encodedBodySize)"
        )
        cpu = server_cpu(proc.pid)
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=10)
    both = times["zoom"] + times["pan"] or [float("nan")]
    times = {k: v or [float("nan")] for k, v in times.items()}
    return {
        "label": label, "cold": cold, "warm": statistics.median(warm), "zoom": statistics.median(times["zoom"]),
        "pan": statistics.median(times["pan"]), "all": statistics.median(both), "max": max(both),
        "detail": statistics.median(times["detail"]), "detail_max": max(times["detail"]),
        "payload": statistics.median(payload) if payload else 0, "failed": failed,
        "wait": statistics.median(waits) if waits else float("nan"),
        "server_cpu": cpu,
    }


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process used so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, default=ROOT / ".scratch" / "bench" / "bench_dashboard.db")
    ap.add_argument("--baseline-commit", default="3233203")
    ap.add_argument("--baseline-src", type=Path, help="a tracelab source tree to compare with (skips git)")
    ap.add_argument("--repeats", type=int, default=3, help="warm page loads per version")
    ap.add_argument("--skip-baseline", action="store_true", help="measure this checkout only")
    ap.add_argument("--trace", type=Path, help="the trace repeated into the big run (bench_dashboard's default)")
    args = ap.parse_args()

    from bench_dashboard import DEFAULT_TRACE, ensure_overview, load, replicate

    trace = args.trace or next(
        (p / "shared" / DEFAULT_TRACE.relative_to(DEFAULT_TRACE.parents[2])
         for p in ROOT.parents if (p / "shared" / "corpus").is_dir()),
        DEFAULT_TRACE,
    )

    from tracelab.api import store_timeline
    from tracelab.store import Store

    args.db.parent.mkdir(parents=True, exist_ok=True)
    store = Store(args.db)
    fp = f"bench-dashboard:{trace.name}:{args.events}"
    rid = store.find_fingerprint(fp)
    if rid is None:
        big = replicate(load(trace), args.events)
        rid = store_timeline(big, store, source_path=trace, fingerprint=fp, name=f"bench-{args.events}")
    ensure_overview(store, rid)
    rec = store.get_run(rid)
    print(f"run {rid}: {rec.events:,} events, span {rec.span_ns / 1e9:.3f} s; load average {os.getloadavg()[0]:.1f}")

    results = []
    if not args.skip_baseline:
        tmp = Path(tempfile.mkdtemp(prefix="bench-release-"))
        baseline = args.baseline_src or release_tree(args.baseline_commit, tmp)
        label = f"commit {args.baseline_commit}" if args.baseline_src is None else str(baseline)
        results.append(measure(label, baseline, args.db, rid, rec.span_ns, args.repeats))
    results.append(measure("this checkout", ROOT, args.db, rid, rec.span_ns, args.repeats))
    print(f"{'version':<22} {'first draw cold':>15} {'warm':>7} {'zoom med':>9} {'pan med':>8} "
          f"{'all med':>8} {'max':>7} {'detail med':>10} {'max':>7} {'payload':>8} {'server':>7} {'srv CPU':>8}")
    for r in results:
        print(
            f"{r['label']:<22} {r['cold']:>14.2f}s {r['warm']:>6.2f}s {r['zoom'] * 1e3:>7.0f}ms "
            f"{r['pan'] * 1e3:>6.0f}ms {r['all'] * 1e3:>6.0f}ms {r['max'] * 1e3:>5.0f}ms "
            f"{r['detail'] * 1e3:>8.0f}ms {r['detail_max'] * 1e3:>5.0f}ms {r['payload'] / 1e3:>6.0f}kB "
            f"{r['wait'] * 1e3:>5.0f}ms {r['server_cpu']:>7.1f}s"
            + (f"  ({r['failed']} views never redrawn)" if r["failed"] else "")
        )
    print("zoom / pan: to the next frame; detail: to the frame with all of the window's data (the same for a")
    print("Plotly timeline, which draws nothing before the server's figure); server: the wait for the view's")
    print("last data response; srv CPU: the server process's user + system CPU over the whole measurement")
    print(f"targets: first draw <= 0.8 s, zoom / pan <= 150 ms median; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
