"""Multi-rank import: N rank files parsed serially vs on a local Dask cluster, with per-worker peak memory.

The rank files are the corpus 8-rank DLRM set (param/dlrm_kineto_8rank, ~0.9 MB each) copied N/8 times
into a temporary directory as worker{i}.json (the rank comes from the number in the name). Each
configuration runs `tracelab.distributed.parse_rank_set` + merge + one-transaction store import in its
own child process, so each peak RSS is its own:

    python benchmarks/bench_ranks.py [--ranks 64 256] [--workers 2] [--corpus ../shared/corpus]

Prints per N and mode: parse (files -> columns, on the workers), merge, store import, total seconds,
the main process's peak RSS and every worker's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time, tempfile, os
sys.path.insert(0, sys.argv[3])
if __name__ == "__main__":
    t0 = time.perf_counter()
    from tracelab import distributed
    from tracelab.parsers.detect import merge_rank_parts
    from tracelab.store import Store
    t1 = time.perf_counter()
    workers = int(sys.argv[2])
    files, parts = distributed.parse_rank_set(sys.argv[1], workers=workers)
    t2 = time.perf_counter()
    tl = merge_rank_parts(sys.argv[1], files, [p.timeline() for p in parts])
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, Store(os.path.join(d, "t.db")) as store:
        store.import_timeline(tl, source_path=sys.argv[1], fingerprint="0" * 64)
        t4 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "parse_s": t2 - t1, "merge_s": t3 - t2, "store_s": t4 - t3,
                      "events": len(tl.events), "ranks": len(tl.meta.ranks),
                      "main_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "workers": sorted(distributed.worker_peak_rss(parts).values()),
                      "main_pid": os.getpid(), "pids": sorted(distributed.worker_peak_rss(parts))}))
"""


def make_rank_dir(src: Path, n: int, out: Path) -> int:
    files = sorted(src.glob("*.json"))
    total = 0
    for i in range(n):
        f = files[i % len(files)]
        dst = out / f"worker{i}.json"
        shutil.copyfile(f, dst)
        total += dst.stat().st_size
    return total


def run(directory: Path, workers: int) -> dict:
    script = Path(tempfile.mkdtemp(prefix="bench-ranks-")) / "child.py"  # spawned workers re-import __main__
    script.write_text(CHILD)
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(directory), str(workers), str(ROOT)],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
    finally:
        shutil.rmtree(script.parent, ignore_errors=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="local Dask workers")
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    args = ap.parse_args(argv)
    src = args.corpus / "param" / "dlrm_kineto_8rank"
    if not src.is_dir():
        print(f"needs the corpus 8-rank DLRM set at {src}", file=sys.stderr)
        return 2
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    for n in args.ranks:
        with tempfile.TemporaryDirectory(prefix=f"ranks{n}-") as d:
            size = make_rank_dir(src, n, Path(d))
            print(f"{n} rank files, {size / 1e6:.0f} MB of JSON")
            for label, w in (("serial", 1), (f"dask x{args.workers}", args.workers)):
                r = run(Path(d), w)
                total = r["parse_s"] + r["merge_s"] + r["store_s"]
                gib = [f"{b / 2**30:.2f}" for b in r["workers"]]
                where = "main process" if r["pids"] == [r["main_pid"]] else "workers"
                print(
                    f"  {label:9s} parse {r['parse_s']:6.2f} s  merge {r['merge_s']:5.2f} s  store {r['store_s']:5.2f} s"
                    f"  total {total:6.2f} s  ({r['events']:,} events, {r['ranks']} ranks)"
                    f"  main peak RSS {r['main_peak_rss'] / 2**30:.2f} GiB; {where} peak RSS GiB {', '.join(gib)}"
                )
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
