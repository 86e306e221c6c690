"""Build a big Nsight Systems export by replicating the rows of a real one.

    python benchmarks/make_big_nsys.py [--source CORPUS_FILE] [--kernels 1000000] [--out PATH]

Every activity table (kernels, copies, memsets, syncs, CUDA events, runtime/driver calls, NVTX) is
copied N times; copy i is shifted by i x (the source's time span + 1 ms) and its correlation ids by
i x (max correlationId + 1), so launches still pair with their own kernels. The source is opened
read-only; the result goes to .scratch (never into the corpus).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import sys
import time
from pathlib import Path

from tracelab.io.nsys.db import ACTIVITY_TABLES

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
DEFAULT_SOURCE = CORPUS / "pipit" / "perlmutter-cloverleaf-cuda.sqlite"
DEFAULT_OUT = ROOT / ".scratch" / "B" / "big_nsys.sqlite"

TABLES = ACTIVITY_TABLES  # the tables the parser reads
TIME_COLUMNS = ("start", "end", "timestamp")


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def make_big(source: Path, out: Path, kernels: int) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    shutil.copyfile(source, tmp)  # the source is only read
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    present = [
        t for t in TABLES if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()
    ]
    n_kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = max(1, math.ceil(kernels / max(n_kernels, 1)))
    lo, hi, corr = None, None, 0
    for t in present:
        cols = _columns(con, t)
        tcol = [c for c in TIME_COLUMNS if c in cols]
        if tcol:
            a, b = con.execute(f'SELECT min("{tcol[0]}"), max("{tcol[-1]}") FROM "{t}"').fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        if "correlationId" in cols:
            corr = max(corr, con.execute(f'SELECT coalesce(max(correlationId), 0) FROM "{t}"').fetchone()[0])
    shift = (hi - lo) + 1_000_000
    corr_stride = corr + 1
    con.execute("CREATE TEMP TABLE reps (i INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO reps VALUES (?)", [(i,) for i in range(1, copies)])
    for t in present:
        cols = _columns(con, t)
        exprs = []
        for c in cols:
            if c in TIME_COLUMNS:
                exprs.append(f'o."{c}" + reps.i * {shift}')
            elif c == "correlationId":
                exprs.append(f'o."{c}" + reps.i * {corr_stride}')
            else:
                exprs.append(f'o."{c}"')
        con.execute(f'CREATE TEMP TABLE orig AS SELECT * FROM "{t}"')
        quoted = ", ".join(f'"{c}"' for c in cols)
        con.execute(
            f'INSERT INTO "{t}" ({quoted}) SELECT {", ".join(exprs)} FROM orig AS o, reps ORDER BY reps.i'
        )
        con.execute("DROP TABLE orig")
        con.commit()
    con.close()
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if not args.source.exists():
        print(f"{args.source}: source export not found", file=sys.stderr)
        return 2
    if CORPUS in args.out.resolve().parents:
        print("refusing to write into the corpus", file=sys.stderr)
        return 2
    t = time.perf_counter()
    out = make_big(args.source, args.out, args.kernels)
    con = sqlite3.connect(out.resolve().as_uri() + "?mode=ro", uri=True)
    counts = {
        t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        for t in TABLES
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()
    }
    con.close()
    print(f"{out}  ({out.stat().st_size / 1e6:.0f} MB, {time.perf_counter() - t:.1f} s)")
    for t, n in counts.items():
        print(f"  {t:40s} {n:>10,d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
