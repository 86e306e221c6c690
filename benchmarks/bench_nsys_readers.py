"""The nsys parse with its integer columns read two ways, each in its own child process:

- `sqlite3`: the stdlib module, vectorized (tracelab's reader: group_concat per rowid range, parsed by
  numpy, ranges on a thread pool);
- `adbc`: `adbc-driver-sqlite` -> Arrow -> numpy (`pip install adbc-driver-sqlite pyarrow`), one
  `SELECT coalesce(e, -1), ...` per table through the same read-only URI, put in place of
  `fetch_int_columns` for the measurement.

    python benchmarks/bench_nsys_readers.py [EXPORT] [--repeats 2]

Prints wall and CPU (user + sys) seconds of `load_nsys_sqlite` and the peak RSS per reader, best of the
repeats, and checks that both give the same Timeline columns.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".scratch" / "B" / "big_nsys.sqlite"

CHILD = r"""
import hashlib, json, resource, sys, time
import numpy as np
reader, path = sys.argv[1], sys.argv[2]
if reader == "adbc":
    import adbc_driver_sqlite.dbapi as adbc
    from tracelab.io.nsys import activity, db as nsys_db, host, osrt

    def fetch_int_columns(db, table, names, exprs, where=""):
        t = nsys_db.quote_ident(table)
        cond = f" WHERE {where}" if where else ""
        cols = ", ".join(f"coalesce({e}, -1)" for e in exprs)
        with adbc.connect(db.uri) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {cols} FROM {t} NOT INDEXED{cond}")
            got = cur.fetch_arrow_table()
        return {n: got.column(i).to_numpy().astype(np.int64, copy=False) for i, n in enumerate(names)}

    for mod in (activity, host, osrt):
        mod.fetch_int_columns = fetch_int_columns
from tracelab.io.nsys.load import load_nsys_sqlite
with open(path, "rb") as fh:
    while fh.read(1 << 24):
        pass
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
tl = load_nsys_sqlite(path)
wall = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
h = hashlib.sha256()
for k in sorted(tl.cols):
    h.update(k.encode()); h.update(np.ascontiguousarray(tl.cols[k]).tobytes())
print(json.dumps({"wall": wall, "cpu": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                  "rss_gib": r1.ru_maxrss / 2**20, "events": tl.n_events, "digest": h.hexdigest()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("export", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    best: dict[str, dict] = {}
    for _ in range(args.repeats):
        for reader in ("sqlite3", "adbc"):
            out = subprocess.run([sys.executable, "-c", CHILD, reader, str(args.export)], env=env,
                                 capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            if reader not in best or got["wall"] < best[reader]["wall"]:
                best[reader] = got
    print(f"load average {os.getloadavg()[0]:.1f}; {args.export}")
    for reader, got in best.items():
        print(f"{reader:8s} parse {got['wall']:6.2f} s wall  {got['cpu']:6.2f} s CPU  {got['rss_gib']:.2f} GiB  "
              f"{got['events']:,} events  {got['digest'][:12]}")
    same = len({g["digest"] for g in best.values()}) == 1
    print("same Timeline columns" if same else "DIFFERENT Timeline columns")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
