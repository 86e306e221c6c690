"""The last step of a Kineto parse: the accumulated columns (`pieces._Parsed`) checked and turned into a
Timeline, with the notes, stats, flags, copy kinds, devices and run metadata."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracelab.errors import TraceFormatError
from tracelab.io.kineto.columns import assemble
from tracelab.io.kineto.devices import copy_info, devices_from_properties, is_mtia, listed_names
from tracelab.io.kineto.kinds import _IS_API, _IS_GPU, LOG_KEYS, MAX_LOG_LINES
from tracelab.io.validate import (
    check_devices,
    check_rank,
    json_safe,
    launch_link_notes,
    neutralize_names,
    validate_columns,
)
from tracelab.model import EventKind, Flag, RunMeta, Timeline, build_timeline
from tracelab.model.api_names import classify_api_ids, comm_mask
from tracelab.model.grouping import member, sorted_unique

if TYPE_CHECKING:
    from pathlib import Path

    from tracelab.io.kineto.pieces import _Parsed

_TOP_KEYS = (
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "trace_id",
    "cuda_runtime_version",
    "cuda_driver_version",
    "hip_runtime_version",
    "roctracer_version",
)


def finish(parsed: _Parsed, path: Path, top: dict, rank: int | None) -> Timeline:
    """The Timeline of everything `parsed` accumulated; `top` is the JSON outside traceEvents."""
    parsed._flush()
    if "traceEvents" not in top and top:
        raise TraceFormatError("no traceEvents array (not a Kineto / Chrome trace)", path)
    pool, threads = parsed.pool
    # the [memory] instants' columns meanwhile on a scan thread (numpy: mostly without the GIL)
    memory = pool.submit(_memory, parsed) if pool is not None and parsed.memory_parts else None
    cols = parsed.columns.result(pool, threads) if parsed.columns is not None else assemble(parsed.parts)
    memory = memory.result() if memory is not None else _memory(parsed)
    parsed.close()
    parsed.parts = []
    notes: list[str] = []
    strings, renamed = neutralize_names(parsed.strings)
    if renamed:
        notes.append(
            f"{renamed} names held Unicode direction controls or were over 1 MiB: shown with them "
            "replaced / cut"
        )
    _refuse_placeless(cols, strings, path)
    cols, checks = validate_columns(cols, strings, path)
    notes += checks
    kind = cols["kind"]
    n = len(kind)
    if n == 0:
        what = "an empty traceEvents array" if parsed.n_total == 0 else f"{parsed.n_total} events, none with a duration"
        raise TraceFormatError(f"empty trace: {what} (nothing to show)", path)
    stats: dict[str, int] = {"trace_events": parsed.n_total}
    notes += _dropped_notes(parsed)
    rank, rank_source = _rank(top, rank, path)
    flags = _flags(cols, strings, stats)
    notes += launch_link_notes(kind, cols["start"], cols["correlation"], flags, cols["name"], strings)
    copy_kind, src_mem, dst_mem = _copy_columns(kind, cols["name"], strings)
    gpu = _IS_GPU[kind.view(np.uint8)]
    stats.update(
        kernels=int((kind == int(EventKind.KERNEL)).sum()),
        memcpys=int((kind == int(EventKind.MEMCPY)).sum()),
        memsets=int((kind == int(EventKind.MEMSET)).sum()),
        host_api_calls=int(_IS_API[kind.view(np.uint8)].sum()),
        events=n,
        skipped_instant_events=parsed.n_dropped_instant,
        skipped_flow_events=parsed.n_flows,
    )
    if not gpu.any():
        what = "MTIA accelerator trace: its device events are not GPU work" if is_mtia(top) else "no kernel/memcpy/memset events"
        notes.append(f"no GPU activity ({what}); only host-side events were loaded")
    if stats["orphan_gpu_events"]:
        notes.append(f"{stats['orphan_gpu_events']} GPU events have no matching launch in the trace (flagged ORPHAN)")
    used = sorted(
        {int(d) for d in sorted_unique(cols["device"][gpu | (kind == int(EventKind.GPU_ANNOTATION))]) if d >= 0}
    )
    del gpu  # per-event temporaries: free before the model is built
    devices, device_notes = check_devices(devices_from_properties(top, rank, used))
    notes += device_notes
    gpu_names = sorted({d.name for d in devices if d.name})
    if not used:  # no GPU work recorded: still say which accelerator the trace lists
        gpu_names = [str(json_safe(n))[:256] for n in listed_names(top)]
    meta = RunMeta(
        source=str(path),
        format="kineto",
        ranks=(rank,),
        schema_version=str(top.get("schemaVersion", "")),
        gpu=", ".join(gpu_names),
        notes=tuple(notes),
        stats=stats,
        extra=_extra(parsed, top, rank_source, memory),
    )
    cols.update(
        rank=np.int32(rank), copy_kind=copy_kind, src_mem=src_mem, dst_mem=dst_mem, sync_kind=cols["sync_kind"],
        flags=flags,
    )
    return build_timeline(cols, strings, meta, devices=devices, consume=True)


def _refuse_placeless(cols: dict[str, np.ndarray], strings: list[str], path: Path) -> None:
    """GPU events with no device or stream: nothing names a lane for them, no place on any GPU."""
    kind = cols["kind"]
    placeless = _IS_GPU[kind.view(np.uint8)] & ((cols["device"] < 0) | (cols["stream"] < 0))
    if placeless.any():
        example = strings[cols["name"][np.flatnonzero(placeless)[0]]][:60]
        raise TraceFormatError(
            f"{int(placeless.sum())} GPU event(s) (kernel/memcpy/memset) have no stream or device in args "
            f"nor a numeric pid/tid, so they cannot be placed on a GPU lane (e.g. {example!r})",
            path,
        )


def _dropped_notes(parsed: _Parsed) -> list[str]:
    """What the pieces dropped, clamped or placed by a fallback, one note each."""
    notes = []
    if parsed.n_bad_ts:
        notes.append(f"{parsed.n_bad_ts} events without a timestamp were skipped")
    if parsed.n_bad_time:
        notes.append(
            f"{parsed.n_bad_time} events with a timestamp or duration outside the valid range "
            f"(|ts| < 2^62 ns, 0 <= dur <= 2^53 ns) were dropped, e.g. {parsed.bad_time_example}"
        )
    if parsed.n_negative_dur:
        notes.append(f"{parsed.n_negative_dur} events with a negative duration are shown with zero length")
    if parsed.n_not_complete:
        gpu = f", {parsed.n_not_complete_gpu} of them GPU kernels/copies/memsets" if parsed.n_not_complete_gpu else ""
        notes.append(
            f"{parsed.n_not_complete} events are not complete 'X' events (e.g. 'B'/'E' begin/end pairs){gpu}: "
            "not read, so their time is missing from every figure"
        )
    if parsed.n_lane_from_pid:
        notes.append(
            f"{parsed.n_lane_from_pid} GPU events have no args.device / args.stream: placed on the lane of "
            f"their pid (device) and tid (stream), e.g. {parsed.lane_example!r}"
        )
    return notes


def _rank(top: dict, rank: int | None, path: Path) -> tuple[int, str]:
    """(the rank, where it came from): the argument, distributedInfo, or 0 by default."""
    source = "argument" if rank is not None else "default"
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else None
    if rank is None and dist is not None and dist.get("rank") is not None:
        rank, source = check_rank(dist["rank"], path), "distributedInfo"
    return (0 if rank is None else rank), source


def _flags(cols: dict[str, np.ndarray], strings: list[str], stats: dict[str, int]) -> np.ndarray:
    """Each event's flags (sync / launch kinds of API calls into cols["sync_kind"], COMM kernels, ORPHAN
    GPU work without a launch, GRAPH work of graph launches); stats gets orphan_gpu_events."""
    kind = cols["kind"]
    n = len(kind)
    api_rows = np.flatnonzero(_IS_API[kind.view(np.uint8)])  # rows, not masks: each use is a gather
    flags = np.zeros(n, dtype=np.int16)
    sync_kind = cols["sync_kind"]
    if len(api_rows):
        s, f = classify_api_ids(strings, cols["name"][api_rows])
        sync_kind[api_rows] = s
        flags[api_rows] = f
    kern = np.flatnonzero(kind == int(EventKind.KERNEL))
    if len(kern):
        flags[kern] |= np.where(comm_mask(strings, cols["name"][kern]), Flag.COMM, 0).astype(np.int16)
    corr = cols["correlation"]
    api_corr = corr[api_rows]
    launches = sorted_unique(api_corr[api_corr >= 0])
    gpu_rows = np.flatnonzero(_IS_GPU[kind.view(np.uint8)])
    orphan = gpu_rows[~member(corr[gpu_rows], launches)]
    flags[orphan] |= Flag.ORPHAN
    stats["orphan_gpu_events"] = len(orphan)
    graph_names = np.array([i for i, s in enumerate(strings) if "GraphLaunch" in s], dtype=np.int32)
    if len(graph_names):
        graph_corr = sorted_unique(corr[api_rows[member(cols["name"][api_rows], graph_names)]])
        graph_corr = graph_corr[graph_corr >= 0]
        flags[gpu_rows[member(corr[gpu_rows], graph_corr)]] |= Flag.GRAPH
        if len(graph_corr):
            # CUPTI gives kernels launched on the device (the bodies of conditional WHILE / IF graph
            # nodes) correlation 0: they belong to a graph even though no host call launched them.
            flags[gpu_rows[corr[gpu_rows] == 0]] |= Flag.GRAPH
    return flags


def _copy_columns(kind: np.ndarray, names: np.ndarray, strings: list[str]) -> tuple[np.ndarray, ...]:
    """(copy_kind, src_mem, dst_mem) of memcpys and memsets, from their names (one lookup per name)."""
    n = len(kind)
    copy_kind = np.zeros(n, dtype=np.int8)
    src_mem = np.zeros(n, dtype=np.int8)
    dst_mem = np.zeros(n, dtype=np.int8)
    for k in (EventKind.MEMCPY, EventKind.MEMSET):
        rows = np.flatnonzero(kind == int(k))
        if not len(rows):
            continue
        uniq, inv = np.unique(names[rows], return_inverse=True)
        table = np.array([copy_info(strings[u], k) for u in uniq.tolist()], dtype=np.int8).reshape(-1, 3)
        copy_kind[rows], src_mem[rows], dst_mem[rows] = table[inv, 0], table[inv, 1], table[inv, 2]
    return copy_kind, src_mem, dst_mem


def _memory(parsed: _Parsed) -> dict[str, Any] | None:
    """The `[memory]` instants (profile_memory=True) read piece by piece, as RunMeta.extra["memory"]."""
    if not parsed.memory_parts:
        return None
    from tracelab.io.kineto.memory import memory_document

    return memory_document(parsed.memory_parts, parsed.n_memory)


def _extra(parsed: _Parsed, top: dict, rank_source: str, memory: dict[str, Any] | None) -> dict[str, Any]:
    """RunMeta.extra: the schema, where the rank came from, the top-level keys kept, memory, collectives."""
    extra: dict[str, Any] = {"kineto_schema": "2021" if parsed.legacy else "current", "rank_source": rank_source}
    for key in _TOP_KEYS:
        if key in top:
            extra[key] = json_safe(top[key])
    if memory is not None:
        extra["memory"] = memory
    health = _health(parsed, top)
    if health:
        extra["health"] = health
    if parsed.comm_args:
        extra["collective_args"] = parsed.comm_args
    return extra


def _health(parsed: _Parsed, top: dict) -> dict[str, Any]:
    """What the trace says about its own completeness, in the nsys health record's shape
    (tracelab.io.nsys.health): Kineto's log arrays and the CUPTI overhead intervals."""
    out: dict[str, Any] = {}
    log = {k: [str(x)[:500] for x in top[k][:MAX_LOG_LINES]] for k in LOG_KEYS if isinstance(top.get(k), list)}
    if log:
        out["log"] = log
    if parsed.overhead_start:
        order = np.argsort(np.asarray(parsed.overhead_start, dtype=np.int64), kind="stable").tolist()
        out["overhead"] = {
            "start": [parsed.overhead_start[i] for i in order], "end": [parsed.overhead_end[i] for i in order],
            "pid": [-1] * len(order), "tid": [-1] * len(order),  # CUPTI's, on no process of the program
            "name": [parsed.overhead_name[i][:200] for i in order],
        }
    return out
