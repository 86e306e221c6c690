"""Parse + analyze throughput: tracelab beside Holistic Trace Analysis (HTA) on the same Kineto file.

Each side runs in its own child process of this one (so each peak RSS is its own):
- tracelab: `load_trace` + `tracelab.analyses.analyze`;
- HTA (PyPI `traceinsight`, a benchmark-only dependency kept in its own venv): TraceAnalysis (parse)
  + temporal breakdown + idle time breakdown + communication/computation overlap.

    python benchmarks/bench_parse.py ../shared/corpus/hta/df_index_resolver__df_index_resolver.json.gz \
        --hta-python .scratch/A/hta-venv/bin/python

Prints, for each: seconds (parse, analyze, total), MB/s of uncompressed JSON, trace events/s and peak
RSS. Set up the HTA venv with:  python -m venv hta-venv && hta-venv/bin/pip install traceinsight==0.6.1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRACELAB_WORKER = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
t0 = time.perf_counter()
from tracelab.parsers import load_trace
try:
    from tracelab.analyses import analyze
except ImportError:
    analyze = None
t1 = time.perf_counter()
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tl = load_trace(sys.argv[1])
t2 = time.perf_counter()
devices = None
if analyze is not None:
    result = analyze(tl)
    devices = [(d.rank, d.device, d.busy_ns, d.span_ns) for d in result.devices]
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "parse_s": t2 - t1, "analyze_s": t3 - t2 if analyze else None,
                  "events": int(tl.meta.stats.get("trace_events", len(tl.events))), "kept": len(tl.events),
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "base_rss": base_rss,
                  "devices": devices}))
"""

HTA_WORKER = r"""
import json, os, resource, sys, tempfile, time, logging, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
d = tempfile.mkdtemp(prefix="hta-bench-")
src = sys.argv[1]
os.symlink(os.path.abspath(src), os.path.join(d, os.path.basename(src)))
a = TraceAnalysis(trace_dir=d)
t2 = time.perf_counter()
ranks = sorted(a.t.traces.keys())
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_comm_comp_overlap(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "parse_s": t2 - t1, "analyze_s": t3 - t2,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "base_rss": base_rss}))
"""


def uncompressed_size(path: Path) -> int:
    with open(path, "rb") as f:
        magic = f.read(2)
        if magic != b"\x1f\x8b":
            return path.stat().st_size
    size = 0
    with gzip.open(path, "rb") as g:  # exact, also for multi-member files
        while block := g.read(1 << 24):
            size += len(block)
    return size


def run_worker(python: str, code: str, args: list[str], timeout: float) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{python} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return json.loads(lines[-1])


def report(label: str, r: dict, mb: float, events: int) -> None:
    analyze_s = r.get("analyze_s")
    total = r["parse_s"] + (analyze_s or 0.0)
    print(
        f"{label:9s} parse {r['parse_s']:7.2f} s  analyze {analyze_s if analyze_s is not None else float('nan'):6.2f} s"
        f"  total {total:7.2f} s  {mb / total:7.1f} MB/s  {events / total / 1e6:6.3f} M events/s"
        f"  peak RSS {r['peak_rss'] / 2**30:5.2f} GiB (after imports {r['base_rss'] / 2**30:4.2f} GiB)"
        f"  with imports {r['import_s'] + total:7.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tracelab vs HTA: parse + analyze one Kineto trace")
    ap.add_argument("trace", type=Path)
    ap.add_argument(
        "--hta-python",
        default=os.environ.get("HTA_PYTHON", ""),
        help="python of a venv with traceinsight installed (skip HTA when empty)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the best is reported")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    trace = args.trace.resolve()
    size = uncompressed_size(trace)
    mb = size / 1e6
    print(f"file: {trace}  ({trace.stat().st_size / 1e6:.1f} MB on disk, {mb:.1f} MB JSON)")
    runs = [
        run_worker(sys.executable, TRACELAB_WORKER, [str(trace), str(ROOT)], args.timeout)
        for _ in range(args.repeat)
    ]
    best = min(runs, key=lambda r: r["parse_s"] + (r["analyze_s"] or 0))
    events = best["events"]
    print(f"trace events: {events}  (tracelab keeps {best['kept']} as timeline events)")
    if best["analyze_s"] is None:
        print("note: tracelab.analyses.analyze not available; tracelab time is parse only")
    report("tracelab", best, mb, events)
    if args.hta_python:
        hruns = [
            run_worker(args.hta_python, HTA_WORKER, [str(trace)], args.timeout) for _ in range(args.repeat)
        ]
        hbest = min(hruns, key=lambda r: r["parse_s"] + r["analyze_s"])
        report("HTA", hbest, mb, events)
        t_ours = best["parse_s"] + (best["analyze_s"] or 0)
        t_hta = hbest["parse_s"] + hbest["analyze_s"]
        w_ours, w_hta = t_ours + best["import_s"], t_hta + hbest["import_s"]
        print(
            f"speed-up {t_hta / t_ours:.1f}x ({w_hta / w_ours:.1f}x with imports)"
            f"   peak RSS ratio {best['peak_rss'] / hbest['peak_rss']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
