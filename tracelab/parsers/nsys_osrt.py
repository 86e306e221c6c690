"""OS runtime calls (nsys `--trace=osrt`): OSRT_API rows -> host events of their thread.

OSRT_API holds the libc / pthread calls nsys traced on each thread (read, write, poll, sleep,
clock_nanosleep, pthread_cond_wait, sem_wait, ioctl, ...) that lasted at least `--osrt-threshold`
(1 µs by default): start, end, globalTid, nameId (StringIds), nestingLevel, returnValue, callchainId
(the table's own comments in an export; checked on nsys 2025.3.1 / schema 3.20 and the corpus's
schema-3.13 export). Each call becomes an EventKind.OTHER event on its thread whose `category` is
OS_CALL_CATEGORY, so the gap analysis can tell "the thread was blocked in the OS" from "busy on the
host" (tracelab.analyses.host). Zero-length rows ("OS runtime libraries profiling started" markers)
hold no time and are skipped.
"""

from __future__ import annotations

import numpy as np

from ..model import EventKind
from ..model.kinds import OS_CALL_CATEGORY
from .nsys_db import NsysDb, col_or, fetch_int_columns
from .nsys_host import pid_of, tid_of
from .nsys_strings import NsysStrings

OSRT = "OSRT_API"


def read_osrt(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    """The OS runtime calls of an export as event columns (None without an OSRT_API table)."""
    if OSRT not in db.tables or not db.has(OSRT, "start", "end"):
        return None
    names = ["start", "end", "_gtid", "_name"]
    exprs = ['"start"', '"end"', col_or(db, OSRT, "globalTid"), col_or(db, OSRT, "nameId")]
    cols = fetch_int_columns(db, OSRT, names, exprs, '"end" > "start"')
    n = len(cols["start"])
    gtid = cols.pop("_gtid")
    cols["_gpid"] = np.where(gtid >= 0, gtid & ~0xFFFFFF, -1)
    cols["pid"] = pid_of(gtid)
    cols["tid"] = tid_of(gtid)
    cols["kind"] = np.full(n, int(EventKind.OTHER), dtype=np.int8)
    cols["name"] = strings.map_ids(cols.pop("_name"))
    cols["category"] = np.full(n, strings.intern(OS_CALL_CATEGORY), dtype=np.int32)
    return cols


def keep_os_calls_of_host_threads(cols: dict[str, np.ndarray], category: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """Only the OS calls of threads that also made CUDA API calls or NVTX ranges: the gap analysis reads the
    launching threads' calls, and the others (nsys's and the CUDA driver's helper threads polling for the
    whole session) would stretch the run far past its last GPU or CUDA event (a `poll` of 100 ms after the
    capture range on the bundled graphs/eager run). How many were left out goes into the notes."""
    kind = cols["kind"]
    os_call = (kind == int(EventKind.OTHER)) & (cols["category"] == category)
    if not os_call.any():
        return cols, []
    host = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER), int(EventKind.NVTX_RANGE),
                          int(EventKind.NVTX_MARK)])
    key = lambda m: (cols["pid"][m].astype(np.int64) << 32) | (cols["tid"][m].astype(np.int64) & 0xFFFFFFFF)
    drop = os_call.copy()
    drop[os_call] = ~np.isin(key(os_call), np.unique(key(host)))
    n = int(drop.sum())
    if n == 0:
        return cols, []
    keep = ~drop
    threads = int(np.unique(key(drop)).size)
    note = (f"{n} OS runtime call{'s' * (n != 1)} on {threads} thread{'s' * (threads != 1)} without CUDA calls or "
            "NVTX ranges left out (helper threads)")
    return {k: v[keep] for k, v in cols.items()}, [note]
