"""Multi-rank import and analysis: N rank files parsed serially vs on a local Dask cluster, with
per-worker peak memory, then `analyze` of the N-rank run.

The rank files are the corpus 8-rank DLRM set (param/dlrm_kineto_8rank, ~0.9 MB each) copied N/8 times
into a temporary directory as worker{i}.json (the rank comes from the number in the name). Each
configuration runs `tracelab.distributed.parse_rank_set` + merge + one-transaction store import in its
own child process, so each peak RSS is its own; the serial child then analyzes the run as
`tracelab analyze --json` does (`api.analyze` + the cross-rank part, `ranks.rank_analysis`):

    python benchmarks/bench_ranks.py [--ranks 64 256] [--workers 2] [--corpus ../shared/corpus]
                                     [--baseline DIR]

Prints per N and mode: parse (files -> columns, on the workers), merge, store import, total seconds,
the main process's peak RSS and every worker's peak RSS (a worker holds one rank's columns at a time, so
its peak stays flat as N grows); and the analysis's wall and CPU seconds and the process's peak RSS.
`--baseline DIR` (another checkout, e.g. `git archive main | tar -x -C DIR`) runs the serial import and
the analysis with that code too, in the same run, and prints the ratios.
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
    try:
        from tracelab.io.detect import merge_rank_parts
    except ImportError:  # a baseline from before issue 26's layout
        from tracelab.parsers.detect import merge_rank_parts
    from tracelab.store import Store
    t1, c1 = time.perf_counter(), time.process_time()
    workers = int(sys.argv[2])
    files, parts = distributed.parse_rank_set(sys.argv[1], workers=workers)
    t2 = time.perf_counter()
    tl = merge_rank_parts(sys.argv[1], files, [p.timeline() for p in parts])
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, Store(os.path.join(d, "t.db")) as store:
        store.import_timeline(tl, source_path=sys.argv[1], fingerprint="0" * 64)
        t4 = time.perf_counter()
    out = {"import_s": t1 - t0, "cpu_s": time.process_time() - c1,
           "parse_s": t2 - t1, "merge_s": t3 - t2, "store_s": t4 - t3,
           "events": len(tl.events), "ranks": len(tl.meta.ranks),
           "main_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "workers": sorted(distributed.worker_peak_rss(parts).values()),
           "main_pid": os.getpid(), "pids": sorted(distributed.worker_peak_rss(parts))}
    if sys.argv[4] == "analyze":
        import io
        from tracelab import api
        try:
            from tracelab.analyses.ranks.view import rank_analysis
            from tracelab.render.export.document import write_document
        except ImportError:  # a baseline from before issue 26's layout
            from tracelab.analyses.ranks import rank_analysis
            from tracelab.render.document import write_document
        del files, parts
        cpu0, w0 = time.process_time(), time.perf_counter()
        # what `analyze --json` does with the run: the analysis, the cross-rank part, the extras, the document
        analysis = api.analyze(tl)
        ranks = rank_analysis(tl, analysis)
        if hasattr(api, "document_extras"):
            extras = api.document_extras(tl, analysis, ranks)
        else:  # the baseline's analyze --json: the rank document
            from tracelab.analyses.ranks import rank_document_of
            extras = rank_document_of(ranks)
        write_document(analysis, io.BytesIO().write, extras)
        out.update({"analyze_s": time.perf_counter() - w0, "analyze_cpu_s": time.process_time() - cpu0,
                    "gaps": len(analysis.gaps), "collectives": len(ranks.collectives.calls),
                    "analyze_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    print(json.dumps(out))
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


def run(directory: Path, workers: int, root: Path = ROOT, analyze: bool = False) -> dict:
    script = Path(tempfile.mkdtemp(prefix="bench-ranks-")) / "child.py"  # spawned workers re-import __main__
    script.write_text(CHILD)
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(directory), str(workers), str(root), "analyze" if analyze else "-"],
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
    ap.add_argument("--baseline", type=Path, help="another checkout to run the serial import and analysis with")
    args = ap.parse_args(argv)
    src = args.corpus / "param" / "dlrm_kineto_8rank"
    if not src.is_dir():
        print(f"needs the corpus 8-rank DLRM set at {src}", file=sys.stderr)
        return 2
    if args.baseline is not None and not (args.baseline / "tracelab" / "distributed.py").is_file():
        print(f"{args.baseline}: not a tracelab checkout with tracelab/distributed.py", file=sys.stderr)
        return 2
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    for n in args.ranks:
        with tempfile.TemporaryDirectory(prefix=f"ranks{n}-") as d:
            size = make_rank_dir(src, n, Path(d))
            print(f"{n} rank files, {size / 1e6:.0f} MB of JSON")
            configs = [("serial", 1, ROOT), (f"dask x{args.workers}", args.workers, ROOT)]
            if args.baseline is not None:
                configs.append(("baseline", 1, args.baseline))
            analyses = {}
            for label, w, root in configs:
                r = run(Path(d), w, root, analyze=w == 1)
                total = r["parse_s"] + r["merge_s"] + r["store_s"]
                gib = [f"{b / 2**30:.2f}" for b in r["workers"]]
                where = "this process" if r["pids"] == [r["main_pid"]] else "workers"
                print(
                    f"  {label:9s} import {total:6.2f} s (parse {r['parse_s']:.2f}, merge {r['merge_s']:.2f},"
                    f" store {r['store_s']:.2f}; cpu here {r['cpu_s']:.2f} s)\n"
                    f"  {'':9s} {r['events']:,} events, {r['ranks']} ranks;"
                    f" peak RSS GiB: importing process {r['main_peak_rss'] / 2**30:.2f};"
                    f" parsed in {where}: {', '.join(gib)}"
                )
                if "analyze_s" in r:
                    analyses[label] = r
                    print(
                        f"  {label:9s} analyze {r['analyze_s']:6.2f} s (cpu {r['analyze_cpu_s']:.2f} s)"
                        f" {r['gaps']:,} gaps, {r['collectives']} collectives,"
                        f" peak RSS {r['analyze_peak_rss'] / 2**30:.2f} GiB"
                    )
            if "baseline" in analyses:
                a, b = analyses["serial"], analyses["baseline"]
                print(
                    f"  analyze: this checkout {a['analyze_cpu_s']:.2f} s cpu vs baseline {b['analyze_cpu_s']:.2f} s"
                    f" ({b['analyze_cpu_s'] / max(a['analyze_cpu_s'], 1e-9):.1f}x less cpu)"
                )
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
