"""Store benchmark: import a trace into a fresh store, load it back, run window queries.

    python benchmarks/bench_store.py TRACE            # e.g. a file from benchmarks/make_big_kineto.py

Prints events, parse time (not the store's), import time and events/s, load time, store size, and
the median time of 20 window queries (1% of the span each) on all lanes. The store is a temporary
file, removed at the end; the trace is only read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracelab.io import load_trace, trace_fingerprint
from tracelab.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    args = ap.parse_args()

    t = time.perf_counter()
    tl = load_trace(args.trace)
    parse_s = time.perf_counter() - t
    n = len(tl.events)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        store = Store(db)
        fingerprint = trace_fingerprint(args.trace)
        t, c = time.perf_counter(), time.process_time()
        rid = store.import_timeline(tl, source_path=str(args.trace), fingerprint=fingerprint)
        import_s, import_cpu = time.perf_counter() - t, time.process_time() - c
        t = time.perf_counter()
        back = Store(db).load(rid)
        load_s = time.perf_counter() - t
        assert back.events.equals(tl.events), "loaded events differ"
        start, end = int(tl.events["start"].min()), int(tl.events["end"].max())
        width = max((end - start) // 100, 1)
        times, rows = [], []
        for i in range(20):
            t0 = start + (end - start - width) * i // 19
            t = time.perf_counter()
            rows.append(len(store.window(rid, t0, t0 + width)))
            times.append(time.perf_counter() - t)
        store.close()
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    print(f"events           {n:,}")
    print(f"parse            {parse_s:.2f} s (parser, not the store)")
    print(
        f"store import     {import_s:.2f} s  ({n / import_s / 1e6:.2f} M events/s, one transaction;"
        f" {import_cpu:.2f} s CPU)"
    )
    print(f"store load       {load_s:.2f} s  (identical Timeline)")
    print(f"store size       {size / 1e6:.0f} MB")
    print(
        f"window query     {1e3 * statistics.median(times):.1f} ms median over 20 windows of 1% of the span "
        f"({int(statistics.median(rows)):,} events each)"
    )


if __name__ == "__main__":
    main()
