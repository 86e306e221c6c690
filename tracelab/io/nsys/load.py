"""Nsight Systems SQLite exports (schema 2.9 through 3.25 and later) -> Timeline.

    load_nsys_sqlite(path)          parse an export (opened read-only, never modified)
    find_nsys()                     locate an nsys binary
    export_nsys_rep(rep, out_dir)   run `nsys export --type sqlite` (MissingDependency without nsys)

Tables read: CUPTI_ACTIVITY_KIND_{KERNEL,MEMCPY,MEMSET,SYNCHRONIZATION,CUDA_EVENT,RUNTIME,DRIVER},
NVTX_EVENTS, OSRT_API (OS runtime calls), StringIds, ThreadNames, PROCESSES, TARGET_INFO_{GPU,CUDA_DEVICE,CUDA_CONTEXT_INFO},
META_DATA_EXPORT / EXPORT_META_DATA and the ENUM_* tables. Whatever is missing is stated in
meta.notes. Host launches and GPU work are linked by correlationId (made unique across processes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from tracelab.errors import TraceFormatError
from tracelab.io.nsys.activity import NULL_END, missing_column_notes
from tracelab.io.nsys.db import ACTIVITY_TABLES, NsysDb, open_export, sqlite_error
from tracelab.io.nsys.export import export_nsys_rep, find_nsys
from tracelab.io.nsys.health import read_health
from tracelab.io.nsys.host import host_of, pid_of
from tracelab.io.nsys.links import fill_graph_ids, link_host_and_gpu, separate_processes
from tracelab.io.nsys.memory import read_memory
from tracelab.io.nsys.nccl import nccl_collective_args
from tracelab.io.nsys.osrt import OS_CALL_CATEGORY, OSRT, keep_os_calls_of_host_threads
from tracelab.io.nsys.ranks import assign_process_ranks
from tracelab.io.nsys.read import distinct_pairs, merge_sorted, read_tables
from tracelab.io.nsys.strings import NsysStrings, compact
from tracelab.io.nsys.target import (
    KNOWN_SCHEMA_MAJOR,
    export_meta,
    green_streams,
    process_names,
    read_contexts,
    read_devices,
    schema_major,
    schema_version,
    thread_names,
)
from tracelab.io.nsys.util import distinct
from tracelab.io.validate import (
    check_devices,
    json_safe,
    launch_link_notes,
    neutralize_names,
    validate_columns,
)
from tracelab.model import ContextInfo, EventKind, RunMeta, Timeline, build_timeline
from tracelab.model.grouping import any_of
from tracelab.model.timeline import is_constant

__all__ = ["export_nsys_rep", "find_nsys", "load_nsys_sqlite"]

_MISSING_NOTES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "no CUPTI_ACTIVITY_KIND_KERNEL table: kernel activity was not traced",
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "no CUPTI_ACTIVITY_KIND_RUNTIME table: CUDA API calls were not traced, so GPU work is not linked "
        "to host launches and gap causes are unknown"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": "no CUPTI_ACTIVITY_KIND_MEMCPY table: no memory copies were recorded",
    "CUPTI_ACTIVITY_KIND_MEMSET": "no CUPTI_ACTIVITY_KIND_MEMSET table: no memsets were recorded",
    "NVTX_EVENTS": "no NVTX_EVENTS table: no NVTX ranges were recorded",
}
T = TypeVar("T")
_GPU_KINDS = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))


def _green_from_contexts(
    cols: dict[str, np.ndarray], contexts, streams: dict[tuple[int, int], int], on_device: np.ndarray
) -> None:
    """Work whose contextId is itself a green context (TARGET_INFO_CUDA_CONTEXT_INFO.isGreenContext)
    sits in that green context even when the export has no greenContextId column."""
    green = [c for c in contexts if c.is_green]
    if not green:
        return
    if is_constant(cols["green_context"]):  # a broadcast view (no green context in the tables): written below
        cols["green_context"] = cols["green_context"].copy()
    todo = on_device & (cols["green_context"] < 0)
    for c in green:
        hit = todo & (cols["rank"] == c.rank) & (cols["device"] == c.device) & (cols["context"] == c.context)
        cols["green_context"][hit] = c.green_context
    # or whose stream TARGET_INFO_CUDA_STREAM puts in a green context
    pid = pid_of(cols["_gpid"])
    for (spid, stream), ctx in streams.items():
        hit = on_device & (cols["green_context"] < 0) & (cols["stream"] == stream) & (pid == spid)
        cols["green_context"][hit] = ctx


def _undescribed_green_contexts(
    cols: dict[str, np.ndarray], contexts: list[ContextInfo], on_device: np.ndarray
) -> list[ContextInfo]:
    """A ContextInfo (SM count unknown) for each green context that work runs in but
    TARGET_INFO_CUDA_CONTEXT_INFO does not describe, so every partition is listed."""
    rows = on_device & (cols["green_context"] >= 0)
    if not rows.any():
        return []
    keys = pd.DataFrame({k: cols[k][rows] for k in ("rank", "device", "green_context", "context")}).drop_duplicates(
        ["rank", "device", "green_context"])
    known = {(c.rank, c.device, c.green_context) for c in contexts if c.is_green}
    return [ContextInfo(rank=int(r), device=int(d), context=int(g), is_green=True, parent_context=int(c), green_context=int(g))
            for r, d, g, c in keys.itertuples(index=False) if (int(r), int(d), int(g)) not in known]


def _syncs_on_the_ranks_gpu(cols: dict[str, np.ndarray], gpu: np.ndarray, kind: np.ndarray) -> list[str]:
    """Synchronization records on a GPU the rank never ran work on (exports whose sync records carry
    device 0 whatever the process used) go to the rank's GPU when it used exactly one; a note counts them.
    Without it, a process on GPU 1 would show a second, empty device 0."""
    sync = kind == int(EventKind.SYNC)
    if not sync.any() or not gpu.any():
        return []
    # the distinct (rank, device) pairs by one hash pass (np.unique(axis=1) sorted 2M rows: 2 s)
    devices_of: dict[int, list[int]] = {}
    for r, d in distinct_pairs(cols["rank"][gpu], cols["device"][gpu]):
        devices_of.setdefault(r, []).append(d)
    only = {r: ds[0] for r, ds in devices_of.items() if len(ds) == 1}
    if not only:
        return []
    rk = cols["rank"]
    target = np.array([only.get(int(r), -2) for r in range(int(rk.max()) + 1)], dtype=np.int64)
    rows = np.flatnonzero(sync)  # the sync records alone (not a mask over every event per step)
    r = rk[rows]
    want = np.where(r >= 0, target[np.clip(r, 0, target.size - 1)], -2)
    move = (want >= 0) & (cols["device"][rows] != want)
    if not move.any():
        return []
    device = cols["device"].copy()
    device[rows[move]] = want[move]
    cols["device"] = device
    return [f"{int(move.sum())} synchronization records named a GPU their rank ran no work on: placed on the rank's GPU"]


def _in_background(fn: Callable[..., T], *args: Any) -> Future[T]:
    """fn(*args) started on a thread of its own; `.result()` waits for it (and raises its error)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-check")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


def _check_is_nsys(db: NsysDb) -> None:
    if any(t in db.tables for t in ACTIVITY_TABLES):
        return
    if "StringIds" in db.tables or "META_DATA_EXPORT" in db.tables or "EXPORT_META_DATA" in db.tables:
        raise TraceFormatError(
            "Nsight Systems export without CUDA or NVTX tables (no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS): "
            "nothing to analyze; record with --trace=cuda,nvtx",
            db.path,
        )
    raise TraceFormatError(
        "SQLite database but not an Nsight Systems export (no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)",
        db.path,
    )


def _schema_notes(db: NsysDb, emeta: dict[str, str]) -> list[str]:
    """What the export's version, slicing and missing tables mean for the analysis, in words."""
    notes: list[str] = []
    version = schema_version(emeta)
    major = schema_major(version)
    if not version:
        notes.append("export schema version unknown (no META_DATA_EXPORT / EXPORT_META_DATA table)")
    elif major is not None and major > KNOWN_SCHEMA_MAJOR:
        notes.append(f"export schema {version} is newer than tracelab knows (3.x): parsed on a best-effort basis")
    if "DERIVED_WINDOW_NS" in emeta:
        source = emeta.get("DERIVED_FROM", "a larger export")
        notes.append(f"time-sliced export (window {emeta['DERIVED_WINDOW_NS']} ns of {source}): "
                     "work and launches outside the window are missing")
    notes += [msg for table, msg in _MISSING_NOTES.items() if table not in db.tables]
    cuda_event = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
    if cuda_event in db.tables and "timestamp" not in db.columns(cuda_event) and db.count(cuda_event):
        notes.append("CUPTI_ACTIVITY_KIND_CUDA_EVENT has no timestamp column in this schema: event records skipped")
    return notes


def _counts(kind: np.ndarray, open_ranges: int) -> dict[str, int]:
    return {
        "kernels": int((kind == int(EventKind.KERNEL)).sum()),
        "memcpys": int((kind == int(EventKind.MEMCPY)).sum()),
        "memsets": int((kind == int(EventKind.MEMSET)).sum()),
        "syncs": int((kind == int(EventKind.SYNC)).sum()),
        "runtime_calls": int((kind == int(EventKind.RUNTIME)).sum()),
        "driver_calls": int((kind == int(EventKind.DRIVER)).sum()),
        "nvtx": int(any_of(kind, [int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)]).sum()),
        "unterminated_nvtx_ranges": open_ranges,
    }


def _parse(db: NsysDb, kernel_names: str) -> Timeline:
    _check_is_nsys(db)
    emeta = export_meta(db)
    version = schema_version(emeta)
    notes = list(db.notes) + _schema_notes(db, emeta)
    strings = NsysStrings(db)
    cols, open_ranges = _read_columns(db, strings, kernel_names, notes)
    kind = cols["kind"]
    gpu = any_of(kind, _GPU_KINDS)
    no_device = gpu & (cols["device"] < 0)
    if no_device.any():
        cols["device"] = np.where(no_device, 0, cols["device"])
        notes.append(f"{int(no_device.sum())} GPU operations have no deviceId: placed on device 0")
    cols, gpu, processes = _assign_ranks(db, cols, gpu, notes)
    kind = cols["kind"]
    notes += separate_processes(cols, gpu, processes)
    fill_graph_ids(db, cols)
    stats, link_notes = link_host_and_gpu(
        cols, strings, gpu, has_api=any(t in db.tables for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")))
    notes += link_notes
    # checked on a thread of its own while the rest is parsed (sorts and searches: numpy releases the GIL);
    # no column it reads is written in place below. Its notes go where they were always placed.
    link_checks = _in_background(
        launch_link_notes, kind, cols["start"], cols["correlation"], cols["flags"], cols["name"], strings.strings
    )
    link_checks_at = len(notes)
    if open_ranges:
        notes.append(f"{open_ranges} NVTX ranges never ended; shown with zero length")
    counts = {**_counts(kind, open_ranges), **stats}
    if OSRT in db.tables:  # OS runtime calls were traced (even if none lasted past the threshold)
        os_call = (kind == int(EventKind.OTHER)) & (cols["category"] == strings.intern(OS_CALL_CATEGORY))
        counts["os_calls"] = int(os_call.sum())
    notes += _syncs_on_the_ranks_gpu(cols, gpu, kind)
    on_device = (cols["device"] >= 0) & (gpu | (kind == int(EventKind.SYNC)))
    used_devices = distinct_pairs(cols["rank"][on_device], cols["device"][on_device])
    devices, described = read_devices(db, used_devices)
    devices, device_notes = check_devices(devices)
    notes += device_notes
    if used_devices and not described:
        notes.append("no TARGET_INFO_GPU table: GPU names and limits are unknown")
    rank_of_pid = {}
    host_pids = cols["pid"] >= 0
    for r, p in distinct_pairs(cols["rank"][host_pids], cols["pid"][host_pids]):
        rank_of_pid.setdefault(p, r)
    contexts = read_contexts(db, rank_of_pid)
    _green_from_contexts(cols, contexts, green_streams(db), on_device)
    contexts += _undescribed_green_contexts(cols, contexts, on_device)
    extra = _extra(db, emeta, strings, cols, host_pids)
    notes[link_checks_at:link_checks_at] = link_checks.result()
    del cols["_gpid"]
    table, cols = compact(strings.strings, cols)
    table, renamed = neutralize_names(table)
    if renamed:
        notes.append(f"{renamed} names held Unicode direction controls or were over 1 MiB: shown with them replaced / cut")
    names = sorted({d.name for d in devices if d.name})
    ranks = tuple(int(r) for r in distinct(cols["rank"])) or (0,)
    meta = RunMeta(source=str(db.path), format="nsys", ranks=ranks, schema_version=version, gpu=", ".join(names),
                   notes=tuple(notes), stats=counts, extra=json_safe(extra))
    return build_timeline(cols, table, meta, devices=devices, contexts=contexts)


def _read_columns(db: NsysDb, strings: NsysStrings, kernel_names: str, notes: list[str]) -> tuple[dict, int]:
    """(the events of every table merged in start order and validated, NVTX ranges never ended); what was
    clamped or dropped goes into `notes`."""
    parts, open_ranges = read_tables(db, strings, kernel_names)
    parts, os_notes = keep_os_calls_of_host_threads(parts, strings.intern(OS_CALL_CATEGORY))
    cols = merge_sorted(parts)
    notes += os_notes
    null_end = cols["end"] == NULL_END
    notes += missing_column_notes(db, cols["kind"], null_end)
    if null_end.any():
        cols["end"] = np.where(null_end, cols["start"], cols["end"])
    backwards = cols["end"] < cols["start"]
    if backwards.any():  # CUPTI writes 0 for unknown end times
        cols["end"] = np.where(backwards, cols["start"], cols["end"])
        notes.append(f"{int(backwards.sum())} events end before they start (unknown end time): shown with zero length")
    # nsys times are ns since the session start: a NULL (-1) or negative start is not a time
    cols, checks = validate_columns(cols, strings.strings, db.path, min_time_ns=0)
    notes += checks
    return cols, open_ranges


def _assign_ranks(db: NsysDb, cols: dict, gpu: np.ndarray, notes: list[str]) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """cols["rank"]: one rank per host (hardware id) when an export merges several machines, else one
    per process that used a GPU; the events of processes left out are dropped (said in `notes`). Also
    the distinct globalPids of the columns returned (None when rows were dropped: the caller finds them)."""
    gpid = cols["_gpid"]
    processes = distinct(gpid[gpid >= 0])  # one hash pass over the events, shared with the steps below
    uniq_hosts = distinct(host_of(processes))  # the hosts of the few distinct processes
    if len(uniq_hosts) > 1:
        cols["rank"] = np.searchsorted(uniq_hosts, host_of(gpid)).astype(np.int32)
        notes.append(f"export spans {len(uniq_hosts)} hosts: one rank per host")
    else:  # one host: one rank per process that used a GPU (nsys profile torchrun ...)
        keep, rank_notes = assign_process_ranks(db, cols, gpu, processes)
        notes += rank_notes
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
            gpu = gpu[keep]
            return cols, gpu, None
    return cols, gpu, processes


def _extra(db: NsysDb, emeta: dict, strings: NsysStrings, cols: dict, host_pids: np.ndarray) -> dict:
    """RunMeta.extra: the export's versions, process and thread names, health, memory, and (several
    ranks) the collectives' sizes from NCCL's payloads."""
    kind = cols["kind"]
    threads = distinct_pairs(cols["pid"][host_pids], cols["tid"][host_pids])
    pids = {p for p, _ in threads}
    extra = {
        "export": {k: emeta[k] for k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION", "DERIVED_WINDOW_NS") if k in emeta},
        "process_names": {str(p): n for p, n in process_names(db).items() if p in pids},
        "thread_names": thread_names(db, strings, threads),
        "health": read_health(db),
    }
    memory = read_memory(db)
    if memory is not None:
        extra["memory"] = memory
    if len(distinct(cols["rank"])) > 1:  # several ranks: the collectives' sizes from NCCL's payloads
        kern = np.flatnonzero(kind == int(EventKind.KERNEL))
        ids = np.unique(cols["name"][kern])
        nccl = ids[[str(strings.strings[int(i)] if 0 <= i < len(strings.strings) else "").startswith("nccl")
                    for i in ids.tolist()]]
        args = nccl_collective_args(db, cols, kern[np.isin(cols["name"][kern], nccl)])
        if args:
            extra["rank_extra"] = args
    return extra


def load_nsys_sqlite(path: str | Path, *, kernel_names: str = "demangled") -> Timeline:
    """Parse an Nsight Systems SQLite export into a Timeline.

    kernel_names: "demangled" (default; the names Kineto shows, so nsys and torch runs compare by
    name) or "short" (nsys shortName, e.g. `par_ranged2d_kernel`).
    Raises TraceFormatError (one line naming the file) for anything that is not a readable export.
    """
    db = open_export(path)
    try:
        return _parse(db, kernel_names)
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise sqlite_error(exc, db.path) from None
    finally:
        db.close()
