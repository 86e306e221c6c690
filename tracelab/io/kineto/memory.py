"""The `[memory]` instants of a Kineto trace (torch.profiler with `profile_memory=True`): one per allocation
or free by the caching allocator, args "Bytes" (+ allocated, - freed), "Total Allocated", "Total Reserved",
"Addr", "Device Id", "Device Type" (1 = CUDA, 0 = CPU). The main parser keeps complete events only; this
reader finds the instants in the raw text (a byte search for the name, each event object decoded alone), so
a trace without them costs one search. Kept in `RunMeta.extra["memory"]` (stored with the run)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson

MARK = b'"[memory]"'
MAX_EVENTS = 1_000_000
_BRACES = re.compile(rb"[{}]")


def _raw(path: Path) -> bytes:
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as g:
            return g.read()
    if head == b"\x28\xb5\x2f\xfd":
        import zstandard

        with open(path, "rb") as f:
            return zstandard.ZstdDecompressor().stream_reader(f).read()
    return path.read_bytes()


def _event_at(text: bytes, pos: int) -> dict | None:
    start = text.rfind(b"{", 0, pos)  # the fields before the name are flat: the event's own brace
    if start < 0:
        return None
    depth = 0
    for m in _BRACES.finditer(text, start):
        depth += 1 if m.group() == b"{" else -1
        if depth == 0:
            try:
                ev = orjson.loads(text[start : m.end()])
            except orjson.JSONDecodeError:
                return None
            return ev if isinstance(ev, dict) else None
    return None


def read_memory(path: str | Path) -> dict[str, Any] | None:
    """Columns of the trace's `[memory]` instants sorted by time (ns on the trace clock, as the parser
    converts µs): t, device (-1: host), bytes, allocated, reserved, addr; None when it has none."""
    text = _raw(Path(path))
    if MARK not in text:
        return None
    rows = []
    pos = text.find(MARK)
    while pos >= 0 and len(rows) < MAX_EVENTS:
        ev = _event_at(text, pos)
        if ev is not None and ev.get("name") == "[memory]" and isinstance(ev.get("args"), dict):
            a = ev["args"]
            try:
                ts = float(ev.get("ts"))
                rows.append((ts, int(a.get("Device Id", -1)) if int(a.get("Device Type", 1)) == 1 else -1,
                             int(a.get("Bytes", 0)), int(a.get("Total Allocated", -1)), int(a.get("Total Reserved", -1)),
                             int(a.get("Addr", 0)), int(ev.get("tid", -1)) if isinstance(ev.get("tid"), int) else -1))
            except (TypeError, ValueError):
                pass
        pos = text.find(MARK, pos + len(MARK))
    if not rows:
        return None
    ts = np.array([r[0] for r in rows], dtype=np.float64)
    whole = np.floor(ts)
    t = whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)  # as validate.us_to_ns_checked
    order = np.argsort(t, kind="stable")
    cols = {"t": t}
    for i, name in enumerate(("device", "bytes", "allocated", "reserved", "addr", "tid"), start=1):
        cols[name] = np.array([r[i] for r in rows], dtype=np.int64)
    return {k: v[order].tolist() for k, v in cols.items()} | {"source": "kineto [memory] instants",
                                                              "truncated": len(rows) >= MAX_EVENTS}
