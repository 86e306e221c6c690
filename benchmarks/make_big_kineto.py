"""Make a large Kineto trace by repeating one trace N times back to back.

Each copy is shifted in time by (span of the trace + 1 ms) times its index, and gets fresh
correlation ids, External ids and flow ids (offset by copy index x (largest id + 1)), so the copies
do not alias: every launch still matches exactly its own kernels. Everything outside traceEvents
(deviceProperties, distributedInfo, ...) is kept from the input.

    python benchmarks/make_big_kineto.py ../shared/corpus/hta/df_index_resolver__df_index_resolver.json.gz \
        /tmp/big_kineto.json --copies 16

The input is only read. The output is plain JSON (or gzip when its name ends in .gz).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import orjson

_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return orjson.loads(raw)


def _max_id(events: list[dict]) -> int:
    best = 0
    for e in events:
        v = e.get("id")
        if isinstance(v, int) and v > best:
            best = v
        a = e.get("args")
        if a:
            for key in ("correlation", "External id", "external id"):
                v = a.get(key)
                if isinstance(v, int) and v > best:
                    best = v
    return best


def make_big(src: Path, dst: Path, copies: int) -> tuple[int, int]:
    """Write the repeated trace; returns (events written, bytes written)."""
    doc = _load(src)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = int(t1 - t0) + 1000  # µs
    id_step = _max_id(events) + 1
    # remember the original values that change from copy to copy
    orig = [(e, e.get("ts"), e.get("id"), e.get("args")) for e in events]
    arg_keys = [
        (
            a,
            tuple(
                (k, a[k]) for k in ("correlation", "External id", "external id") if isinstance(a.get(k), int)
            ),
        )
        for _, _, _, a in orig
        if isinstance(a, dict)
    ]
    opener = gzip.open if dst.name.endswith(".gz") else open
    written = 0
    with opener(dst, "wb") as out:
        out.write(orjson.dumps(doc)[:-1])
        out.write(b', "traceEvents": [\n' if doc else b'{"traceEvents": [\n')
        for c in range(copies):
            dt, di = c * shift, c * id_step
            for e, ts, fid, _ in orig:
                if isinstance(ts, (int, float)):
                    e["ts"] = ts + dt
                if isinstance(fid, int):
                    e["id"] = fid + di
            for a, pairs in arg_keys:
                for k, v in pairs:
                    a[k] = v + di
            # one event per line, spaced like Python's json module (the layout Kineto's writer is close to)
            body = ",\n".join(map(_dumps, events)).encode()
            if c:
                out.write(b",\n")
            out.write(body)
            written += len(events)
        out.write(b"\n]}\n")
    return written, dst.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--copies", type=int, default=16)
    args = ap.parse_args(argv)
    t = time.perf_counter()
    n, size = make_big(args.src, args.dst, args.copies)
    print(
        f"wrote {args.dst}: {n} events, {size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
