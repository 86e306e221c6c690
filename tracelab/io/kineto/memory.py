"""The `[memory]` instants of a Kineto trace (torch.profiler with `profile_memory=True`): one per allocation
or free by the caching allocator, args "Bytes" (+ allocated, - freed), "Total Allocated", "Total Reserved",
"Addr", "Device Id", "Device Type" (1 = CUDA, 0 = CPU). They are read in the parser's one pass: the C scanner
(or its msgspec twin, tracelab/io/kineto/structs.py) keeps these args for every instant that has args, and
the parser keeps the instants named `[memory]` (`piece_work._memory`, bounded by `_Parsed._merge`). Integer
args follow the parser's rule (an integer, or a numeric string; anything else is unknown, -1; null is -1); an
absent arg takes the profiler's default (Device Type 1, Device Id -1, Bytes 0, Addr 0, the totals -1); an instant without a time
is dropped. Kept in `RunMeta.extra["memory"]` (stored with the run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tracelab.io.kineto.rows import Rows

MAX_EVENTS = 1_000_000
_FIELDS = ("bytes", "allocated", "reserved", "addr")  # MEMORY_ARGS after the device type and id


def piece_memory(rows: Rows, vals: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The `[memory]` instants of one piece: `rows` those instants, `vals` their MEMORY_ARGS
    (tracelab.io.kineto.rows) -> (ts in µs, columns device (-1: host), bytes, allocated, reserved, addr,
    tid), in file order, those without a time left out."""
    ts = rows.floats("ts")
    keep = ~np.isnan(ts)
    tid = rows.ints("tid")
    cols = {"device": np.where(vals[:, 0] == 1, vals[:, 1], -1)}
    cols |= {name: vals[:, 2 + i] for i, name in enumerate(_FIELDS)}
    cols["tid"] = tid
    return ts[keep], {k: np.asarray(v, dtype=np.int64)[keep] for k, v in cols.items()}


def memory_document(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], total: int) -> dict[str, Any] | None:
    """Columns of the `[memory]` instants (the pieces' `piece_memory`, in file order, at most MAX_EVENTS
    of the `total` seen) sorted by time (ns on the trace clock, as the parser converts µs): t, device
    (-1: host), bytes, allocated, reserved, addr, tid, as int64 arrays; None when there are none. "truncated" says whether
    the trace held more than were kept."""
    if not parts or not sum(len(p[0]) for p in parts):
        return None
    ts = np.concatenate([p[0] for p in parts])[:MAX_EVENTS]
    rest = {k: np.concatenate([p[1][k] for p in parts])[:MAX_EVENTS] for k in parts[0][1]}
    whole = np.floor(ts)
    t = whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)  # as validate.us_to_ns_checked
    order = np.argsort(t, kind="stable")
    cols = {"t": t} | rest
    # int64 arrays, not lists: a million instants as Python ints took ~220 MB (issue 26); the store writes
    # them as JSON lists (orjson's numpy option) and every reader takes either
    return {k: np.ascontiguousarray(v[order]) for k, v in cols.items()} | {"source": "kineto [memory] instants",
                                                                           "truncated": total >= MAX_EVENTS}
