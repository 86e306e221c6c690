"""nsys enum codes -> tracelab codes: copy direction, memory kind, sync type.

Exports carry ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND / ENUM_CUPTI_SYNC_TYPE tables (id, name,
label) from schema 3.x on; when a table is absent the documented CUPTI numeric values are used.
Lookups are small arrays indexed by the nsys code (one entry per distinct code, never per event).
"""

from __future__ import annotations

import numpy as np

from tracelab.io.nsys.db import NsysDb, quote_ident
from tracelab.model import CopyKind, MemKind, SyncKind

# name -> tracelab code, in the order of the codes (the documented CUPTI values: used when an export has no
# ENUM_* table). CUpti_ActivityMemcpyKind (also the ENUM_CUDA_MEMCPY_OPER ids in every export seen):
_COPY_BY_NAME = {
    "UNKNOWN": CopyKind.UNKNOWN, "HTOD": CopyKind.HTOD, "DTOH": CopyKind.DTOH, "HTOA": CopyKind.HTOD,
    "ATOH": CopyKind.DTOH, "ATOA": CopyKind.DTOD, "ATOD": CopyKind.DTOD, "DTOA": CopyKind.DTOD, "DTOD": CopyKind.DTOD,
    "HTOH": CopyKind.HTOH, "PTOP": CopyKind.PTOP, "UVM_HTOD": CopyKind.HTOD, "UVM_DTOH": CopyKind.DTOH,
    "UVM_DTOD": CopyKind.DTOD,
}
# CUpti_ActivityMemoryKind as nsys exports it (ENUM_CUDA_MEM_KIND)
_MEM_BY_NAME = {
    "PAGEABLE": MemKind.PAGEABLE, "PINNED": MemKind.PINNED, "DEVICE": MemKind.DEVICE, "ARRAY": MemKind.ARRAY,
    "MANAGED": MemKind.MANAGED, "DEVICE_STATIC": MemKind.DEVICE, "MANAGED_STATIC": MemKind.MANAGED,
    "UNKNOWN": MemKind.UNKNOWN,
}
# CUpti_ActivitySynchronizationType
_SYNC_BY_NAME = {
    "UNKNOWN": SyncKind.NONE, "EVENT_SYNCHRONIZE": SyncKind.EVENT, "STREAM_WAIT_EVENT": SyncKind.STREAM_WAIT_EVENT,
    "STREAM_SYNCHRONIZE": SyncKind.STREAM, "CONTEXT_SYNCHRONIZE": SyncKind.DEVICE,
}

# the names Kineto gives the same things, so that both formats show the same strings
COPY_LABEL = {CopyKind.UNKNOWN: "Memcpy", CopyKind.HTOD: "Memcpy HtoD", CopyKind.DTOH: "Memcpy DtoH",
              CopyKind.DTOD: "Memcpy DtoD", CopyKind.HTOH: "Memcpy HtoH", CopyKind.PTOP: "Memcpy PtoP"}
MEM_LABEL = {MemKind.UNKNOWN: "Unknown", MemKind.PAGEABLE: "Pageable", MemKind.PINNED: "Pinned", MemKind.DEVICE: "Device",
             MemKind.ARRAY: "Array", MemKind.MANAGED: "Managed"}
SYNC_LABEL = {SyncKind.NONE: "Unknown Sync", SyncKind.EVENT: "Event Sync", SyncKind.STREAM_WAIT_EVENT: "Stream Wait Event",
              SyncKind.STREAM: "Stream Sync", SyncKind.DEVICE: "Context Sync"}
MAX_ENUM_CODE = 4096


def _enum_rows(db: NsysDb, table: str) -> list[tuple[int, str]] | None:
    if not db.has(table, "id", "name"):
        return None
    rows = db.rows(f"SELECT id, name FROM {quote_ident(table)}")
    # enum codes are small: anything else (text, huge or negative ids) is ignored, never allocated for
    return [(i, str(n)) for i, n in rows if type(i) is int and 0 <= i < MAX_ENUM_CODE and n]


def _lookup(db: NsysDb, table: str, prefix: str, by_name: dict, unknown: int) -> np.ndarray:
    """Array indexed by nsys code -> tracelab code (codes beyond the table map to `unknown`); without the
    table, the codes are those of `by_name`'s order."""
    rows = _enum_rows(db, table)
    if rows is None:
        rows = list(enumerate(by_name))
    size = max([i for i, _ in rows] + [len(by_name) - 1]) + 1
    out = np.full(size + 1, int(unknown), dtype=np.int8)  # last slot: out-of-range codes
    for code, name in rows:
        if code < 0:
            continue
        key = name.upper()
        for p in prefix:
            if key.startswith(p):
                key = key[len(p) :]
                break
        out[code] = int(by_name.get(key, unknown))
    return out


def apply_lookup(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    idx = np.where((codes >= 0) & (codes < len(table) - 1), codes, len(table) - 1)
    return table[idx]


def copy_kind_table(db: NsysDb) -> np.ndarray:
    return _lookup(db, "ENUM_CUDA_MEMCPY_OPER", ("CUDA_MEMCPY_KIND_",), _COPY_BY_NAME, CopyKind.UNKNOWN)


def mem_kind_table(db: NsysDb) -> np.ndarray:
    return _lookup(db, "ENUM_CUDA_MEM_KIND", ("CUDA_MEMOPR_MEMORY_KIND_",), _MEM_BY_NAME, MemKind.UNKNOWN)


def sync_kind_table(db: NsysDb) -> np.ndarray:
    return _lookup(db, "ENUM_CUPTI_SYNC_TYPE", ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_",), _SYNC_BY_NAME, SyncKind.NONE)
