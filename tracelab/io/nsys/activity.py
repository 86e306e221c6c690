"""GPU-side CUPTI activity tables -> event column arrays.

Each reader returns a dict of EVENT_COLUMNS arrays (missing columns take the model defaults in
build_timeline) plus `_gpid` (the exporting process's globalPid, used to keep processes apart and
dropped before the Timeline is built). One SQL query per table, selecting only the columns used.
"""

from __future__ import annotations

import numpy as np

from tracelab.io.nsys.db import NsysDb, col_or, fetch_int_columns, quote_ident
from tracelab.io.nsys.enums import (
    COPY_LABEL,
    MEM_LABEL,
    SYNC_LABEL,
    apply_lookup,
    copy_kind_table,
    mem_kind_table,
    sync_kind_table,
)
from tracelab.io.nsys.strings import NsysStrings
from tracelab.io.nsys.util import factorize
from tracelab.model.api_names import comm_mask
from tracelab.model.grouping import any_of
from tracelab.model.kinds import NO_STREAM, CopyKind, EventKind, Flag, MemKind, SyncKind

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


# column names some exports use to say a kernel was launched with programmatic stream
# serialization (PDL); matched case-insensitively
_PDL_HINTS = ("programmatic", "pdl")


def _common(db: NsysDb, table: str) -> tuple[list[str], list[str]]:
    names = ["start", "end", "device", "context", "green_context", "stream", "correlation", "_gpid"]
    exprs = ['"start"', col_or(db, table, "end", str(NULL_END)) if "end" in db.columns(table) else '"start"',
             *(col_or(db, table, c) for c in ("deviceId", "contextId", "greenContextId", "streamId", "correlationId",
                                             "globalPid"))]
    return names, exprs


NULL_END = -(1 << 62)  # what a NULL `end` reads as: _parse shows those with zero length, with a note
_TIMED = {KERNEL: (EventKind.KERNEL, "kernels"), MEMCPY: (EventKind.MEMCPY, "memory copies"),
          MEMSET: (EventKind.MEMSET, "memsets")}


def _generated(db: NsysDb, table: str, column: str) -> bool:
    """Whether `column` is a generated (or hidden) column of `table`: PRAGMA table_info leaves those out,
    so the parser does not read them (a formula in the file is no recorded time)."""
    rows = db.rows(f"PRAGMA table_xinfo({quote_ident(table)})")
    return any(str(r[1]) == column and r[6] != 0 for r in rows)


def missing_column_notes(db: NsysDb, kind: np.ndarray, null_end: np.ndarray) -> list[str]:
    """Notes for GPU work whose duration or stream the export does not hold: a kernel/memcpy/memset
    table without an `end` column (or with `end` only generated), `end` NULL, or no `streamId`.
    Such work is shown with zero length / on stream -1, which changes busy time, gaps and overlap."""
    notes: list[str] = []
    for table, (k, label) in _TIMED.items():
        if table not in db.tables:
            continue
        mine = kind == int(k)
        n = int(mine.sum())
        if n == 0:
            continue
        cols = db.columns(table)
        if "end" not in cols:
            why = (" (end is only a generated column: a formula in the file, not a recorded time)"
                   if _generated(db, table, "end") else "")
            notes.append(f"{table} has no end column{why}: {n:,} {label} shown with zero length "
                         "(their busy time, gaps and overlap are not measured)")
        else:
            nulls = int((null_end & mine).sum())
            if nulls:
                notes.append(f"{nulls:,} of {n:,} {label} have no end time (end is NULL in {table}): shown with zero "
                             "length (their busy time, gaps and overlap are not measured)")
        if "streamId" not in cols:
            notes.append(f"{table} has no streamId column: {n:,} {label} placed on stream -1 "
                         "(overlap between streams is not measured)")
    return notes


def _finish_common(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    stream = cols["stream"]
    cols["stream"] = np.where(stream == NO_STREAM, -1, stream)
    green = cols["green_context"]
    cols["green_context"] = np.where(green > 0, green, -1)
    node = cols.get("graph_node")
    if node is not None:
        cols["graph_node"] = np.where(node > 0, node, -1)
    return cols


def _name_expr(db: NsysDb, table: str, candidates: tuple[str, ...]) -> str:
    for c in candidates:
        if c in db.columns(table):
            # nsys stores names as StringIds ids; a post-processed text value is treated as unknown
            return f"CASE WHEN typeof({quote_ident(c)}) = 'integer' THEN {quote_ident(c)} ELSE -1 END"
    return "-1"


def read_kernels(
    db: NsysDb, strings: NsysStrings, kernel_names: str = "demangled"
) -> dict[str, np.ndarray] | None:
    if KERNEL not in db.tables:
        return None
    order = ("demangledName", "shortName", "mangledName")
    if kernel_names == "short":
        order = ("shortName", "demangledName", "mangledName")
    names, exprs = _common(db, KERNEL)
    extra = {
        "_name": _name_expr(db, KERNEL, order),
        "grid_x": col_or(db, KERNEL, "gridX"),
        "grid_y": col_or(db, KERNEL, "gridY"),
        "grid_z": col_or(db, KERNEL, "gridZ"),
        "block_x": col_or(db, KERNEL, "blockX"),
        "block_y": col_or(db, KERNEL, "blockY"),
        "block_z": col_or(db, KERNEL, "blockZ"),
        "registers": col_or(db, KERNEL, "registersPerThread"),
        "shared_mem": (
            f"{col_or(db, KERNEL, 'staticSharedMemory', '0')} + {col_or(db, KERNEL, 'dynamicSharedMemory', '0')}"
            if db.has(KERNEL, "staticSharedMemory") or db.has(KERNEL, "dynamicSharedMemory")
            else "-1"
        ),
        "graph_node": col_or(db, KERNEL, "graphNodeId"),
        "graph_id": col_or(db, KERNEL, "graphId"),
    }
    pdl_cols = [c for c in db.columns(KERNEL) if any(h in c.lower() for h in _PDL_HINTS)]
    if pdl_cols:
        extra["_pdl"] = " + ".join(f"(coalesce({quote_ident(c)}, 0) != 0)" for c in pdl_cols)
    cols = fetch_int_columns(db, KERNEL, names + list(extra), exprs + list(extra.values()))
    cols = _finish_common(cols)
    cols["kind"] = np.full(len(cols["start"]), int(EventKind.KERNEL), dtype=np.int8)
    cols["name"] = strings.map_ids(cols.pop("_name"))
    flags = np.zeros(len(cols["start"]), dtype=np.int16)
    flags[cols["graph_node"] > 0] |= Flag.GRAPH
    pdl = cols.pop("_pdl", None)
    if pdl is not None:
        flags[pdl > 0] |= Flag.PDL
    if len(flags):
        uniq, inverse = factorize(cols["name"])  # classify each distinct name once
        flags[comm_mask(strings.strings, uniq)[inverse]] |= Flag.COMM
    cols["flags"] = flags
    return cols


def _named(strings: NsysStrings, codes: np.ndarray, label) -> np.ndarray:
    """Each row's name id: `label(code)` interned once per distinct code."""
    uniq, inverse = factorize(codes)
    ids = np.array([strings.intern(label(int(c))) for c in uniq.tolist()], dtype=np.int32)
    return ids[inverse] if len(uniq) else np.zeros(0, dtype=np.int32)


def _memcpy_names(strings: NsysStrings, copy: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """'Memcpy HtoD (Pageable -> Device)', as Kineto names them; one string per distinct combination."""
    code = copy.astype(np.int64) * 64 + src.astype(np.int64) * 8 + dst.astype(np.int64)
    return _named(strings, code, lambda c: f"{COPY_LABEL[CopyKind(c // 64)]} "
                                           f"({MEM_LABEL[MemKind(c // 8 % 8)]} -> {MEM_LABEL[MemKind(c % 8)]})")


def _copy_rows(db: NsysDb, table: str, kind: EventKind, extra: dict[str, str]) -> dict[str, np.ndarray]:
    """The rows of a memcpy or memset table: the common columns, `extra` (name -> SQL expression) and
    graphNodeId, then their kind and the GRAPH flag of those launched as graph nodes."""
    names, exprs = _common(db, table)
    extra = {**extra, "graph_node": col_or(db, table, "graphNodeId")}
    cols = _finish_common(fetch_int_columns(db, table, names + list(extra), exprs + list(extra.values())))
    n = len(cols["start"])
    cols["kind"] = np.full(n, int(kind), dtype=np.int8)
    flags = np.zeros(n, dtype=np.int16)
    flags[cols["graph_node"] > 0] |= Flag.GRAPH
    cols["flags"] = flags
    return cols


def read_memcpys(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    if MEMCPY not in db.tables:
        return None
    extra = {
        "bytes": col_or(db, MEMCPY, "bytes"),
        "_copy": col_or(db, MEMCPY, "copyKind", "0"),
        "_src": col_or(db, MEMCPY, "srcKind", "-1"),
        "_dst": col_or(db, MEMCPY, "dstKind", "-1"),
    }
    cols = _copy_rows(db, MEMCPY, EventKind.MEMCPY, extra)
    mem = mem_kind_table(db)
    cols["copy_kind"] = apply_lookup(copy_kind_table(db), cols.pop("_copy"))
    cols["src_mem"] = apply_lookup(mem, cols.pop("_src"))
    cols["dst_mem"] = apply_lookup(mem, cols.pop("_dst"))
    cols["name"] = _memcpy_names(strings, cols["copy_kind"], cols["src_mem"], cols["dst_mem"])
    return cols


def read_memsets(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    if MEMSET not in db.tables:
        return None
    extra = {"bytes": col_or(db, MEMSET, "bytes"), "_mem": col_or(db, MEMSET, "memKind", "-1")}
    cols = _copy_rows(db, MEMSET, EventKind.MEMSET, extra)
    cols["dst_mem"] = apply_lookup(mem_kind_table(db), cols.pop("_mem"))
    cols["name"] = _named(strings, cols["dst_mem"], lambda m: f"Memset ({MEM_LABEL[MemKind(m)]})")
    return cols


def read_syncs(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    """CUPTI synchronization records: the host waited (start..end) on a stream, event or context."""
    if SYNC not in db.tables:
        return None
    names, exprs = _common(db, SYNC)
    type_col = "syncType" if "syncType" in db.columns(SYNC) else "deprecatedSyncType"
    cols = _finish_common(fetch_int_columns(db, SYNC, names + ["_type"], exprs + [col_or(db, SYNC, type_col, "0")]))
    n = len(cols["start"])
    cols["sync_kind"] = apply_lookup(sync_kind_table(db), cols.pop("_type"))
    cols["kind"] = np.full(n, int(EventKind.SYNC), dtype=np.int8)
    cols["name"] = _named(strings, cols["sync_kind"], lambda k: SYNC_LABEL.get(SyncKind(k), "Sync"))
    blocking = any_of(cols["sync_kind"], [int(SyncKind.STREAM), int(SyncKind.DEVICE), int(SyncKind.EVENT)])
    cols["flags"] = np.where(blocking, Flag.BLOCKING, 0).astype(np.int16)
    return cols


def read_cuda_events(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    """cudaEventRecord activity: an instant on a stream (kind SYNC, sync kind NONE, 'Event Record')."""
    if CUDA_EVENT not in db.tables or "timestamp" not in db.columns(CUDA_EVENT):
        return None
    names, exprs = _common(db, CUDA_EVENT)
    exprs[0] = '"timestamp"'
    exprs[1] = '"timestamp"'
    cols = _finish_common(fetch_int_columns(db, CUDA_EVENT, names, exprs, where='"timestamp" IS NOT NULL'))
    n = len(cols["start"])
    cols["kind"] = np.full(n, int(EventKind.SYNC), dtype=np.int8)
    cols["name"] = np.full(n, strings.intern("Event Record"), dtype=np.int32)
    return cols
