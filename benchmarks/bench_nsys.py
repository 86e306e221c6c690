"""Parse, store import and analyze of a big nsys export, with rows/s, CPU seconds and peak memory.

    python benchmarks/make_big_nsys.py          # once: .scratch/B/big_nsys.sqlite (1M kernels)
    python benchmarks/bench_nsys.py [PATH] [--baseline DIR] [--repeats N]

Each run is a child process (so its peak RSS is its own) that prints one line per stage: wall seconds,
events/s, and the CPU seconds of the process (user + sys, all threads), which are the steadier number
on a shared machine; then the total of parse + fingerprint + store import + analyze, which is what
`tracelab import` followed by `tracelab analyze` costs, its CPU seconds and the peak RSS. The store
import is `api.store_timeline`, as `tracelab import` calls it: the events and the dashboard's overview
of the run (computed from the events, stored with them).
`--baseline DIR` (another checkout, e.g. `git archive main | tar -x -C DIR`) runs the same stages with
that code too, alternating with this checkout `--repeats` times, and prints, stage by stage, the best
wall and CPU seconds of each side and their ratios, then the ratios of the best totals.

The parse reads integer columns through the stdlib sqlite3 (group_concat per rowid range, parsed by numpy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".scratch" / "B" / "big_nsys.sqlite"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(path: Path) -> dict:
    """The stages, in this process, with the code on sys.path[0]."""
    from tracelab.analyses import analyze
    from tracelab.api import store_timeline
    try:
        from tracelab.io import trace_fingerprint
        from tracelab.io.nsys.load import load_nsys_sqlite
    except ImportError:  # a baseline from before issue 26's layout
        from tracelab.io import trace_fingerprint
        from tracelab.io.nsys.load import load_nsys_sqlite
    from tracelab.model import EventKind
    from tracelab.store import Store

    with path.open("rb") as fh:  # warm the page cache so the first stage does not pay for the disk
        while fh.read(1 << 24):
            pass
    stages: dict[str, tuple[float, float]] = {}

    def stage(label: str, fn):
        t, c = time.perf_counter(), _cpu()
        out = fn()
        stages[label] = (time.perf_counter() - t, _cpu() - c)
        return out

    tl = stage("parse", lambda: load_nsys_sqlite(path))
    fp = stage("fingerprint", lambda: trace_fingerprint(path))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
        # what `tracelab import` stores: the events and the dashboard's overview of the run
        stage("store import", lambda: store_timeline(tl, store, source_path=path, fingerprint=f"{fp}-bench"))
        store.close()
    result = stage("analyze", lambda: analyze(tl))
    return {
        "events": len(tl.events),
        "kernels": int((tl.events["kind"] == int(EventKind.KERNEL)).sum()),
        "gaps": len(result.gaps),
        "findings": [f.rule for f in result.findings],
        "stages": stages,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def run(root: Path, path: Path) -> dict:
    code = (
        f"import sys, json; sys.path.insert(0, {str(root)!r}); sys.path.insert(1, {str(ROOT / 'benchmarks')!r});"
        f" import bench_nsys; print(json.dumps(bench_nsys.child(__import__('pathlib').Path({str(path)!r}))))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{root}: child failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(lines[-1])


def report(label: str, r: dict) -> None:
    n = r["events"]
    print(f"{label}: {n:,d} events ({r['kernels']:,d} kernels), {r['gaps']:,d} gaps, findings: "
          f"{', '.join(r['findings']) or 'none'}")
    for name, (dt, cpu) in r["stages"].items():
        print(f"  {name:14s} {dt:7.2f} s   {n / dt / 1e6:6.2f} M events/s   (cpu {cpu:.2f} s)")
    wall = sum(dt for dt, _ in r["stages"].values())
    cpu = sum(c for _, c in r["stages"].values())
    print(f"  {'total':14s} {wall:7.2f} s   (cpu {cpu:.2f} s; peak RSS {r['peak_rss'] / 2**30:.2f} GiB)", flush=True)


def _totals(r: dict) -> tuple[float, float]:
    return sum(dt for dt, _ in r["stages"].values()), sum(c for _, c in r["stages"].values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--baseline", type=Path, help="another checkout to run the same stages with")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    if not args.path.exists():
        print(f"{args.path}: not found (run benchmarks/make_big_nsys.py first)", file=sys.stderr)
        return 2
    layouts = ("io/nsys/load.py", "parsers/nsys.py")  # since issue 26, before it
    if args.baseline is not None and not any((args.baseline / "tracelab" / p).is_file() for p in layouts):
        print(f"{args.baseline}: not a tracelab checkout", file=sys.stderr)
        return 2
    print(f"{args.path.name}: {args.path.stat().st_size / 1e6:.0f} MB; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    roots = [("this checkout", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    best: dict[str, tuple[float, float, float]] = {}
    stage_best: dict[str, dict[str, tuple[float, float]]] = {}
    for i in range(max(1, args.repeats)):
        for label, root in roots if i % 2 == 0 else roots[::-1]:  # alternate the order
            r = run(root, args.path)
            report(f"{label} (run {i + 1})", r)
            wall, cpu = _totals(r)
            mine = stage_best.setdefault(label, {})
            for name, (dt, c) in r["stages"].items():
                old = mine.get(name, (dt, c))
                mine[name] = (min(dt, old[0]), min(c, old[1]))
            prev = best.get(label)
            best[label] = (min(wall, prev[0]) if prev else wall, min(cpu, prev[1]) if prev else cpu,
                           r["peak_rss"] if not prev else min(r["peak_rss"], prev[2]))
    if args.baseline is not None:
        a, b = stage_best["this checkout"], stage_best["baseline"]
        print(f"best of {args.repeats} per stage:  {'this checkout':>22s}  {'baseline':>22s}  {'ratio':>14s}")
        for name in a:
            (aw_, ac_), (bw_, bc_) = a[name], b.get(name, (float("nan"), float("nan")))
            print(f"  {name:14s}  {aw_:7.2f} s (cpu {ac_:6.2f})  {bw_:7.2f} s (cpu {bc_:6.2f})"
                  f"  {bw_ / aw_:5.2f}x / {bc_ / max(ac_, 1e-9):5.2f}x cpu")
        (aw, ac, am), (bw, bc, bm) = best["this checkout"], best["baseline"]
        print(f"best of {args.repeats}: this checkout {aw:.2f} s wall / {ac:.2f} s cpu / {am / 2**30:.2f} GiB"
              f" vs baseline {bw:.2f} s / {bc:.2f} s / {bm / 2**30:.2f} GiB"
              f" ({bw / aw:.2f}x wall, {bc / ac:.2f}x cpu)")
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
