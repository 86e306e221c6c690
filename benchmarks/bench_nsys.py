"""Parse, store import and analyze of a big nsys export, with rows/s.

    python benchmarks/make_big_nsys.py          # once: .scratch/B/big_nsys.sqlite (1M kernels)
    python benchmarks/bench_nsys.py [PATH]

Prints one line per stage (wall seconds, events/s, and the process's CPU seconds, which are the
steadier number on a shared machine) and the total of parse + store import + analyze,
which is what `tracelab import` followed by `tracelab analyze` costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracelab.model import EventKind
from tracelab.parsers.nsys import load_nsys_sqlite

DEFAULT = ROOT / ".scratch" / "B" / "big_nsys.sqlite"


def stage(label: str, rows: int, fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"{label:14s} {dt:7.2f} s   {rows / dt / 1e6:6.2f} M events/s   (cpu {cpu:.2f} s)", flush=True)
    return out, dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--no-store", action="store_true")
    args = ap.parse_args(argv)
    if not args.path.exists():
        print(f"{args.path}: not found (run benchmarks/make_big_nsys.py first)", file=sys.stderr)
        return 2
    size = args.path.stat().st_size
    # warm the page cache so the first stage does not pay for the disk
    with args.path.open("rb") as fh:
        while fh.read(1 << 24):
            pass
    t, c = time.perf_counter(), time.process_time()
    tl = load_nsys_sqlite(args.path)
    t_parse, cpu = time.perf_counter() - t, time.process_time() - c
    n = len(tl.events)
    kernels = int((tl.events["kind"] == int(EventKind.KERNEL)).sum())
    print(f"{args.path.name}: {size / 1e6:.0f} MB, {n:,d} events ({kernels:,d} kernels)")
    print(
        f"{'parse':14s} {t_parse:7.2f} s   {n / t_parse / 1e6:6.2f} M events/s   (cpu {cpu:.2f} s)",
        flush=True,
    )
    total = t_parse
    try:
        from tracelab.parsers import trace_fingerprint
    except ImportError:
        fingerprint = f"bench-{time.time_ns()}"
    else:
        fingerprint, dt = stage("fingerprint", n, lambda: trace_fingerprint(args.path))
        fingerprint = f"{fingerprint}-{time.time_ns()}"  # a fresh store each run anyway
        total += dt
    if not args.no_store:
        try:
            from tracelab.store import Store
        except ImportError as exc:  # engineer D's store not there yet
            print(f"store          skipped ({exc})")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                store = Store(Path(tmp) / "bench.db")
                _, dt = stage(
                    "store import",
                    n,
                    lambda: store.import_timeline(tl, source_path=args.path, fingerprint=fingerprint),
                )
                total += dt
                store.close()
    try:
        from tracelab.analyses import analyze
    except ImportError as exc:
        print(f"analyze        skipped ({exc})")
    else:
        result, dt = stage("analyze", n, lambda: analyze(tl))
        total += dt
        print(
            f"  {len(result.gaps):,d} gaps, findings: {', '.join(f.rule for f in result.findings) or 'none'}"
        )
    print(f"total          {total:7.2f} s   (parse + fingerprint + store import + analyze)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
