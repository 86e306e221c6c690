"""Columnar bulk I/O between numpy arrays and SQLite: executemany over chunks of zipped column lists
on the way in, one fetch into a 2-D int64 array on the way out. No per-event Python beyond the
tuple that sqlite3 itself needs."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Callable, Sequence
from itertools import repeat

import numpy as np

from .schema import quote

CHUNK = 100_000


def insert_columns(
    conn: sqlite3.Connection,
    table: str,
    run_id: str,
    names: Sequence[str],
    arrays: Sequence[np.ndarray],
    progress: Callable[[int], None] | None = None,
) -> None:
    """INSERT (run_id, *names) rows from equal-length arrays, in chunks."""
    cols = ", ".join(["run_id", *(quote(n) for n in names)])
    marks = ", ".join("?" * (len(names) + 1))
    sql = f"INSERT INTO {quote(table)} ({cols}) VALUES ({marks})"
    n = len(arrays[0]) if arrays else 0
    # millions of short-lived tuples would trigger the cyclic GC over and over, and each full pass
    # walks every object the caller holds (a parser's leftovers): 3x slower imports. Pause it.
    paused = gc.isenabled()
    gc.disable()
    try:
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            lists = [a[lo:hi].tolist() for a in arrays]
            conn.executemany(sql, zip(repeat(run_id, hi - lo), *lists))
            if progress is not None:
                progress(hi - lo)
    finally:
        if paused:
            gc.enable()


def fetch_matrix(conn: sqlite3.Connection, sql: str, params: Sequence, ncols: int) -> np.ndarray:
    """Run a query whose columns are all integers; return an (n, ncols) int64 array."""
    cur = conn.execute(sql, params)
    blocks = []
    while True:
        rows = cur.fetchmany(CHUNK)
        if not rows:
            break
        blocks.append(np.array(rows, dtype=np.int64))
    if not blocks:
        return np.zeros((0, ncols), dtype=np.int64)
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
