"""StringIds -> the Timeline string table.

nsys stores every name (kernel, API call, NVTX text registered by id, thread, domain) once in
StringIds and refers to it by integer id. We intern each StringIds value once (a per-distinct-string
loop), keep an id -> interned-id array, and map whole id columns through it with numpy.
"""

from __future__ import annotations

import threading

import numpy as np

from tracelab.io.nsys.db import NsysDb
from tracelab.io.nsys.util import distinct
from tracelab.model import StringInterner


class NsysStrings:
    def __init__(self, db: NsysDb) -> None:
        self.interner = StringInterner()
        self._lock = threading.Lock()  # tables are read in parallel threads
        rows = db.rows("SELECT id, value FROM StringIds") if db.has("StringIds", "id", "value") else []
        ids = np.array([r[0] for r in rows if isinstance(r[0], int)], dtype=np.int64)
        size = int(ids.max()) + 1 if len(ids) and ids.min() >= 0 else 0
        if size > 50_000_000:  # absurd sparse ids: fall back to a sorted search
            size = 0
        self._dense = np.full(size + 1, -1, dtype=np.int32)  # last slot: unknown ids
        self._sorted_ids = np.zeros(0, dtype=np.int64)
        self._sorted_vals = np.zeros(0, dtype=np.int32)
        interned = np.array(
            [self.interner.intern("" if v is None else str(v)) for i, v in rows if isinstance(i, int)],
            dtype=np.int32,
        )
        self._text = {i: ("" if v is None else str(v)) for i, v in rows if isinstance(i, int)}
        if size:
            self._dense[ids] = interned
        elif len(ids):
            order = np.argsort(ids)
            self._sorted_ids, self._sorted_vals = ids[order], interned[order]

    def map_ids(self, ids: np.ndarray) -> np.ndarray:
        """StringIds ids -> interned ids (-1 for NULL / unknown ids)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self._sorted_ids):
            pos = np.clip(np.searchsorted(self._sorted_ids, ids), 0, len(self._sorted_ids) - 1)
            return np.where(self._sorted_ids[pos] == ids, self._sorted_vals[pos], -1).astype(np.int32)
        last = len(self._dense) - 1
        return self._dense[np.where((ids >= 0) & (ids < last), ids, last)]

    def value(self, sid: int) -> str:
        """The text of one StringIds id ('' when unknown)."""
        return self._text.get(int(sid), "")

    def intern(self, s: str) -> int:
        with self._lock:
            return self.interner.intern(s)

    def intern_array(self, values) -> np.ndarray:
        with self._lock:
            return self.interner.intern_array(values)

    @property
    def strings(self) -> tuple[str, ...]:
        return self.interner.strings


def compact(
    strings: tuple[str, ...], columns: dict[str, np.ndarray], keys=("name", "category")
) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """Drop strings no event uses (StringIds holds thread names, file paths, ...) and renumber the
    rest in text order."""
    used = [columns[k] for k in keys if k in columns and len(columns[k])]
    if not used:
        return (), columns
    allids = distinct(np.concatenate(used))
    allids = allids[allids >= 0]
    # sorted by text, so the table does not depend on the order names were interned in
    allids = np.array(sorted(allids.tolist(), key=strings.__getitem__), dtype=np.int64)
    remap = np.full(len(strings) + 1, -1, dtype=np.int32)
    remap[allids] = np.arange(len(allids), dtype=np.int32)
    out = dict(columns)
    for k in keys:
        if k in out:
            ids = out[k]
            out[k] = remap[np.where(ids >= 0, ids, len(strings))]
    return tuple(strings[i] for i in allids.tolist()), out
