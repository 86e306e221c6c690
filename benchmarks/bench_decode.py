"""One big Kineto trace decoded serially vs in parallel processes (tracelab.parsers.kineto_parallel),
with a model of the gain on more cores.

    python benchmarks/bench_decode.py TRACE [--workers 2] [--repeat 2]

Each run is a child process (its own peak RSS); serial and parallel alternate, the best of each is
reported. The parallel runs also report where the time went: the main process reading, decompressing
and cutting the array (`read_cut`), the workers' decode time summed over pieces (`decode`), and the
merge after the last piece. Model for n cores: T(n) = start + max(read_cut, decode / n) + merge, i.e.
decoding spreads over the workers while the main process keeps cutting; read_cut and merge stay serial.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from tracelab.parsers import kineto, kineto_parallel
workers = int(sys.argv[2])
t = time.perf_counter()
if workers == 1:
    tl = kineto.load_kineto(sys.argv[1])
else:
    tl = kineto_parallel.load_kineto_parallel(sys.argv[1], workers=workers)
s = time.perf_counter() - t
print(json.dumps({"seconds": s, "events": len(tl.events), "stats": kineto_parallel.last_stats,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run(trace: Path, workers: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(trace), str(workers), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    with open("/proc/loadavg") as f:
        print(
            f"{args.trace} ({args.trace.stat().st_size / 1e6:.0f} MB on disk); load average {f.read().split()[0]}"
        )
    serial, parallel = [], []
    for _ in range(args.repeat):
        serial.append(run(args.trace, 1))
        parallel.append(run(args.trace, args.workers))
    s = min(serial, key=lambda r: r["seconds"])
    p = min(parallel, key=lambda r: r["seconds"])
    assert s["events"] == p["events"]
    print(
        f"serial          {s['seconds']:6.2f} s  peak RSS {s['peak_rss'] / 2**30:.2f} GiB  ({s['events']:,} events)"
    )
    print(
        f"parallel x{args.workers:<4d} {p['seconds']:6.2f} s  peak RSS {p['peak_rss'] / 2**30:.2f} GiB (main process)"
        f"  speed-up {s['seconds'] / p['seconds']:.2f}x"
    )
    st = p["stats"]
    print(
        f"  parallel run: start {st['start']:.2f} s, main read+cut {st['read_cut']:.2f} s, waited {st['wait']:.2f} s,"
        f" workers' decode {st['decode']:.2f} s over {st['pieces']} pieces, merge {st['merge']:.2f} s"
    )
    for n in (2, 4, 8, 16):
        t = st["start"] + max(st["read_cut"], st["decode"] / n) + st["merge"]
        print(f"  model {n:2d} cores: {t:6.2f} s ({s['seconds'] / t:.1f}x the serial run)")
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
