"""Host-side tables -> event column arrays: CUDA runtime / driver API calls and NVTX.

globalTid packs hardware id, VM id, pid and tid: pid = (globalTid >> 24) & 0xFFFFFF,
tid = globalTid & 0xFFFFFF (nsys "Serialized process and thread identifiers").
"""

from __future__ import annotations

import numpy as np

from tracelab.io.nsys.db import NsysDb, col_or, fetch_int_columns, fetch_texts, quote_ident
from tracelab.io.nsys.strings import NsysStrings
from tracelab.io.nsys.util import factorize
from tracelab.model import EventKind
from tracelab.model.api_names import classify_api_ids
from tracelab.model.grouping import any_of

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"

# NVTX_EVENTS.eventType (ENUM_NSYS_EVENT_TYPE)
NVTX_MARK_TYPES = (34, 65)  # NvtxMark, NvtxtMark
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop, start/end (and the nvtxt variants)
NVTX_DOMAIN_CREATE = 75
# eventClass of CUPTI_ACTIVITY_KIND_RUNTIME rows (ENUM_NSYS_EVENT_CLASS): 1 = CUDA driver
EVENT_CLASS_DRIVER = 1


def pid_of(global_id: np.ndarray) -> np.ndarray:
    return np.where(global_id >= 0, (global_id >> 24) & 0xFFFFFF, -1)


def tid_of(global_tid: np.ndarray) -> np.ndarray:
    return np.where(global_tid >= 0, global_tid & 0xFFFFFF, -1)


def host_of(global_id: np.ndarray) -> np.ndarray:
    """The hardware (host) id byte of a globalPid / globalTid."""
    return np.where(global_id >= 0, (global_id >> 56) & 0xFF, 0)


def set_thread(cols: dict[str, np.ndarray], gtid: np.ndarray) -> None:
    """The thread columns of rows from their globalTid: `_gpid` (the process's globalPid), pid and tid."""
    cols["_gpid"] = np.where(gtid >= 0, gtid & ~0xFFFFFF, -1)
    cols["pid"] = pid_of(gtid)
    cols["tid"] = tid_of(gtid)


def read_api(db: NsysDb, table: str, strings: NsysStrings, kind: EventKind) -> dict[str, np.ndarray] | None:
    """CUDA runtime or driver API calls (RUNTIME rows of the driver's event class are driver calls)."""
    if table not in db.tables:
        return None
    names = ["start", "end", "_gtid", "correlation", "_name", "_class"]
    exprs = ['"start"', col_or(db, table, "end", '"start"'), col_or(db, table, "globalTid"),
             col_or(db, table, "correlationId"), col_or(db, table, "nameId"), col_or(db, table, "eventClass", "-1")]
    cols = fetch_int_columns(db, table, names, exprs)
    n = len(cols["start"])
    set_thread(cols, cols.pop("_gtid"))
    klass = cols.pop("_class")
    kinds = np.full(n, int(kind), dtype=np.int8)
    kinds[klass == EVENT_CLASS_DRIVER] = int(EventKind.DRIVER)
    cols["kind"] = kinds
    cols["name"] = strings.map_ids(cols.pop("_name"))
    uniq, inverse = factorize(cols["name"])  # classify each distinct API name once
    sync, flags = classify_api_ids(strings.strings, uniq)
    cols["sync_kind"] = sync[inverse] if n else np.zeros(0, np.int8)
    cols["flags"] = flags[inverse] if n else np.zeros(0, np.int16)
    return cols


def _domain_names(db: NsysDb, strings: NsysStrings) -> dict[int, int]:
    """domainId -> interned domain name (from the NvtxDomainCreate rows)."""
    if not db.has(NVTX, "domainId", "eventType"):
        return {}
    text = quote_ident("text") if "text" in db.columns(NVTX) else "NULL"
    text_id = quote_ident("textId") if "textId" in db.columns(NVTX) else "NULL"
    out: dict[int, int] = {}
    for dom, txt, tid in db.rows(
        f'SELECT "domainId", {text}, {text_id} FROM {quote_ident(NVTX)} WHERE "eventType" = ?', (NVTX_DOMAIN_CREATE,)
    ):
        name = txt if isinstance(txt, str) else (strings.value(tid) if isinstance(tid, int) else "")
        if isinstance(dom, int) and name:
            out[dom] = strings.intern(name)
    return out


def read_nvtx(db: NsysDb, strings: NsysStrings) -> tuple[dict[str, np.ndarray] | None, int]:
    """NVTX ranges and marks on their host thread; category = the NVTX domain name (-1: default
    domain). Returns the columns and the number of ranges that never ended."""
    if NVTX not in db.tables or "eventType" not in db.columns(NVTX):
        return None, 0
    types = NVTX_MARK_TYPES + NVTX_RANGE_TYPES
    where = f'"eventType" IN ({", ".join(str(t) for t in types)})'
    names = ["start", "_end", "_type", "_gtid", "_text_id", "_domain", "_has_text"]
    exprs = ['"start"', col_or(db, NVTX, "end"), '"eventType"', col_or(db, NVTX, "globalTid"), col_or(db, NVTX, "textId"),
             col_or(db, NVTX, "domainId", "0"), '("text" IS NOT NULL)' if "text" in db.columns(NVTX) else "0"]
    cols = fetch_int_columns(db, NVTX, names, exprs, where)  # rowid order, as the text query below
    n = len(cols["start"])
    name = strings.map_ids(cols.pop("_text_id"))
    has_text = cols.pop("_has_text") > 0
    if has_text.any():
        texts = fetch_texts(db, NVTX, "text", where)
        name[has_text] = strings.intern_array(texts)
    etype = cols.pop("_type")
    end = cols.pop("_end")
    mark = any_of(etype, NVTX_MARK_TYPES)
    open_range = ~mark & (end < cols["start"])
    cols["end"] = np.where(mark | open_range, cols["start"], end)
    cols["kind"] = np.where(mark, int(EventKind.NVTX_MARK), int(EventKind.NVTX_RANGE)).astype(np.int8)
    set_thread(cols, cols.pop("_gtid"))
    cols["name"] = name
    domains = _domain_names(db, strings)
    dom = cols.pop("_domain")
    category = np.full(n, -1, dtype=np.int32)
    for did, sid in domains.items():
        category[dom == did] = sid
    cols["category"] = category
    return cols, int(open_range.sum())
