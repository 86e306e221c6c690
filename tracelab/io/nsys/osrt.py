"""OS runtime calls (nsys `--trace=osrt`): OSRT_API rows -> host events of their thread.

OSRT_API holds the libc / pthread calls nsys traced on each thread (read, write, poll, sleep,
clock_nanosleep, pthread_cond_wait, sem_wait, ioctl, ...) that lasted at least `--osrt-threshold`
(1 µs by default): start, end, globalTid, nameId (StringIds), nestingLevel, returnValue, callchainId
(the table's own comments in an export; checked on nsys 2025.3.1 / schema 3.20 and the corpus's
schema-3.13 export). Each call becomes an EventKind.OTHER event on its thread whose `category` is
OS_CALL_CATEGORY, so the gap analysis can tell "the thread was blocked in the OS" from "busy on the
host" (tracelab.analyses.core.host). Zero-length rows ("OS runtime libraries profiling started" markers)
hold no time and are skipped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.io.nsys.db import NsysDb, col_or, fetch_int_columns
from tracelab.io.nsys.host import set_thread
from tracelab.io.nsys.strings import NsysStrings
from tracelab.model import EVENT_COLUMNS, EventKind
from tracelab.model.grouping import any_of, sorted_unique
from tracelab.model.kinds import OS_CALL_CATEGORY
from tracelab.model.timeline import DEFAULTS

OSRT = "OSRT_API"


def read_osrt(db: NsysDb, strings: NsysStrings) -> dict[str, np.ndarray] | None:
    """The OS runtime calls of an export as event columns (None without an OSRT_API table)."""
    if OSRT not in db.tables or not db.has(OSRT, "start", "end"):
        return None
    names = ["start", "end", "_gtid", "_name"]
    exprs = ['"start"', '"end"', col_or(db, OSRT, "globalTid"), col_or(db, OSRT, "nameId")]
    cols = fetch_int_columns(db, OSRT, names, exprs, '"end" > "start"')
    n = len(cols["start"])
    set_thread(cols, cols.pop("_gtid"))
    cols["kind"] = np.full(n, int(EventKind.OTHER), dtype=np.int8)
    cols["name"] = strings.map_ids(cols.pop("_name"))
    cols["category"] = np.full(n, strings.intern(OS_CALL_CATEGORY), dtype=np.int32)
    return cols


_HOST_KINDS = [int(EventKind.RUNTIME), int(EventKind.DRIVER), int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)]


def _column(part: dict[str, np.ndarray], key: str) -> np.ndarray:
    """A part's column as merge_sorted would place it (the model default where the part lacks it)."""
    if key in part:
        return part[key].astype(EVENT_COLUMNS[key], copy=False)
    return np.full(len(part["start"]), DEFAULTS[key], dtype=EVENT_COLUMNS[key])


def _thread_key(part: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    pid, tid = _column(part, "pid"), _column(part, "tid")
    if not rows.all():  # (a table of host calls only: its columns as they are, no gather)
        pid, tid = pid[rows], tid[rows]
    return (pid.astype(np.int64) << 32) | (tid.astype(np.int64) & 0xFFFFFFFF)


def keep_os_calls_of_host_threads(
    parts: list[dict[str, np.ndarray]], category: int
) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Only the OS calls of threads that also made CUDA API calls or NVTX ranges: the gap analysis reads the
    launching threads' calls, and the others (nsys's and the CUDA driver's helper threads polling for the
    whole session) would stretch the run far past its last GPU or CUDA event (a `poll` of 100 ms after the
    capture range on the bundled graphs/eager run). How many were left out goes into the notes.

    Works on read_tables' per-table parts, before merge_sorted: dropping rows of one part does not change
    the start order of the others, so the merged result is the one filtering after the merge gives, but
    only the parts holding OS calls are copied (not every column of every event). Parts left empty are
    removed, as read_tables does."""
    calls = []
    for part in parts:
        os_call = part["kind"] == int(EventKind.OTHER)
        if os_call.any():  # the category only of parts holding OTHER events (GPU and API tables hold none)
            os_call &= _column(part, "category") == category
        calls.append(os_call if os_call.any() else None)
    if all(c is None for c in calls):
        return parts, []
    host_keys = [
        pd.unique(_thread_key(part, host))
        for part in parts
        if (host := any_of(part["kind"], _HOST_KINDS)).any()
    ]
    host_threads = np.concatenate(host_keys) if host_keys else np.zeros(0, dtype=np.int64)
    out: list[dict[str, np.ndarray]] = []
    dropped: list[np.ndarray] = []
    for part, os_call in zip(parts, calls):
        if os_call is None:
            out.append(part)
            continue
        drop = os_call.copy()
        drop[os_call] = ~np.isin(_thread_key(part, os_call), host_threads)
        if drop.any():
            dropped.append(_thread_key(part, drop))
            part = {k: v[~drop] for k, v in part.items()}
        if len(part["start"]):
            out.append(part)
    n = sum(len(d) for d in dropped)
    if n == 0:
        return parts, []
    threads = int(sorted_unique(np.concatenate(dropped)).size)
    note = (f"{n} OS runtime call{'s' * (n != 1)} on {threads} thread{'s' * (threads != 1)} without CUDA calls or "
            "NVTX ranges left out (helper threads)")
    return out, [note]
