"""Read every activity table of an export into column arrays and merge them in start order."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import msgspec
import numpy as np
import pandas as pd

from tracelab.io.nsys.activity import read_cuda_events, read_kernels, read_memcpys, read_memsets, read_syncs
from tracelab.io.nsys.db import NsysDb, QueryPool
from tracelab.io.nsys.host import DRIVER, RUNTIME, read_api, read_nvtx
from tracelab.io.nsys.osrt import OSRT, read_osrt
from tracelab.io.nsys.strings import NsysStrings
from tracelab.model import EVENT_COLUMNS, EventKind
from tracelab.model.timeline import DEFAULTS

# columns the parser itself works on after the merge (the others may stay absent)
_ALWAYS = {"kind", "start", "end", "rank", "device", "context", "green_context", "stream", "pid", "tid", "name",
           "category", "correlation", "flags", "graph_node", "graph_id", "_gpid"}
# columns the parser changes in place after the merge (so never a read-only broadcast view)
_WRITTEN_IN_PLACE = {"flags"}
_WIDE = {"device", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers"}


def merge_sorted(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack per-table column dicts in start order (one scatter per column and table: no
    concatenate-then-reorder pass); a column a table lacks takes the model default. A table's column
    that holds one value (a GPU table's pid, a host table's device, a kind) is written as that value,
    or not at all when it is the default. Columns are filled on `cpu_count` threads (numpy releases
    the GIL while it scatters). Consumes `parts`: each input column is dropped once placed."""
    lengths = [len(p["start"]) for p in parts]
    n = sum(lengths)
    starts = np.concatenate([p["start"] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    where = np.empty(n, dtype=np.int64)
    where[order] = np.arange(n, dtype=np.int64)
    del order, starts
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    slots = [where[a:b] for a, b in itertools.pairwise(bounds.tolist())]
    keys = [c for c in EVENT_COLUMNS if c != "lane"] + ["_gpid"]
    having = {k: [(part.pop(k), slot) for part, slot in zip(parts, slots) if k in part] for k in keys}

    def fill(key: str) -> np.ndarray | None:
        default = DEFAULTS.get(key, -1)
        mine = having.pop(key)
        if not mine and key not in _ALWAYS:
            return None  # build_timeline fills the default
        ranges = [(int(v.min()), int(v.max())) if len(v) else (default, default) for v, _ in mine]
        dtype = EVENT_COLUMNS.get(key, "int64")
        # int32 model columns stay int64 here when a value is out of their range: validate_columns
        # reports those before the cast (launch attributes in range are merged as int32 at once)
        if key in _WIDE and (key == "device" or any(lo < -1 or hi >= 1 << 31 for lo, hi in ranges)):
            dtype = "int64"
        filled = len(mine) < len(parts)
        # the values of the rows: each table's one value (when its rows agree), the default for tables without it
        held = [(lo, hi) for (v, _), (lo, hi) in zip(mine, ranges) if len(v)]
        values = {lo for lo, _ in held} | ({default} if filled else set())
        if key not in _WRITTEN_IN_PLACE and n and all(lo == hi for lo, hi in held) and len(values) == 1:
            # one value in every row: a read-only broadcast view, as build_timeline makes of a missing
            # column (a run's rank, an export without green contexts or graphs: no memory per row)
            return np.broadcast_to(np.asarray(values.pop(), dtype=dtype), (n,))
        col = np.full(n, default, dtype=dtype) if filled else np.empty(n, dtype=dtype)
        for (values, slot), (lo, hi) in zip(mine, ranges):
            if len(values) and lo == hi:
                if not (filled and lo == default):
                    col[slot] = values[0]
            else:
                col[slot] = values
        return col

    workers = min(os.cpu_count() or 1, 4)
    if workers > 1 and n >= PARALLEL_MIN_ROWS:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nsys-merge") as pool:
            cols = list(pool.map(fill, keys))
    else:
        cols = [fill(k) for k in keys]
    return {k: c for k, c in zip(keys, cols) if c is not None}


PARALLEL_MIN_ROWS = 200_000  # below this, reading the tables one after the other is as fast


def read_tables(db: NsysDb, strings: NsysStrings, kernel_names: str) -> tuple[list[dict[str, np.ndarray]], int]:
    """Every activity table as column arrays, in a fixed order. Big exports are read in parallel:
    one thread per table (its own read-only connection) drives the table's reader, and the readers'
    row-range queries all run on one pool of `cpu_count` threads (QueryPool), so every core stays
    busy until the last range is parsed, whichever table is biggest."""
    tasks: list[tuple[str, Callable]] = [
        ("CUPTI_ACTIVITY_KIND_KERNEL", lambda d: read_kernels(d, strings, kernel_names)),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", lambda d: read_memcpys(d, strings)),
        ("CUPTI_ACTIVITY_KIND_MEMSET", lambda d: read_memsets(d, strings)),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", lambda d: read_syncs(d, strings)),
        ("CUPTI_ACTIVITY_KIND_CUDA_EVENT", lambda d: read_cuda_events(d, strings)),
        (RUNTIME, lambda d: read_api(d, RUNTIME, strings, EventKind.RUNTIME)),
        (DRIVER, lambda d: read_api(d, DRIVER, strings, EventKind.DRIVER)),
        ("NVTX_EVENTS", lambda d: read_nvtx(d, strings)),
        (OSRT, lambda d: read_osrt(d, strings)),
    ]
    tasks = [(t, fn) for t, fn in tasks if t in db.tables]
    sizes = {t: db.rows_estimate(t) for t, _ in tasks}
    cores = os.cpu_count() or 1
    if cores > 1 and len(tasks) > 0 and sum(sizes.values()) >= PARALLEL_MIN_ROWS:
        pool = QueryPool(db, cores)
        shared = msgspec.structs.replace(db, pool=pool)

        def run(fn: Callable):
            own = shared.reopen()
            try:
                return fn(own)
            finally:
                own.close()

        try:
            with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="nsys-table") as readers:
                # biggest tables first, so their row ranges are queued first
                order = sorted(range(len(tasks)), key=lambda i: -sizes[tasks[i][0]])
                futures = {i: readers.submit(run, tasks[i][1]) for i in order}
                results = [futures[i].result() for i in range(len(tasks))]
        finally:
            pool.close()
    else:
        results = [fn(db) for _, fn in tasks]
    parts: list[dict[str, np.ndarray]] = []
    open_ranges = 0
    for (table, _), res in zip(tasks, results):
        if table == "NVTX_EVENTS":
            res, open_ranges = res
        if res is not None and len(res["start"]):
            parts.append(res)
    return parts, open_ranges


def distinct_pairs(a: np.ndarray, b: np.ndarray) -> set[tuple[int, int]]:
    """Distinct (a, b) pairs of two non-negative integer columns (hashing one combined key;
    Python only per distinct pair)."""
    if not len(a):
        return set()
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    keys = pd.unique(a * (1 << 32) + (b & 0xFFFFFFFF))
    return {(int(k) >> 32, int(k) & 0xFFFFFFFF) for k in keys.tolist()}
