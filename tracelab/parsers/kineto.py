"""Kineto (PyTorch profiler) Chrome-trace JSON -> Timeline.

Both schemas are read: the current one (cats `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`,
`cuda_driver`, `cuda_sync`, `cpu_op`, `user_annotation`, `gpu_user_annotation`, `deviceProperties`,
`distributedInfo`, fractional-µs timestamps) and the 2021 one (`Kernel`, `Memcpy`, `Memset`, `Runtime`,
`Operator`, tid "stream 7", `computeProperties`, lowercase 'external id'); AMD/HIP traces use the same
cats with hip* API names.

How: the traceEvents array is streamed in chunks (`kineto_stream`); msgspec decodes each chunk into
small typed structs that carry only the fields we use (everything else is skipped without making
Python objects); columns are pulled out with C-level `map(attrgetter)` into numpy arrays; names are
interned per distinct value. Times become integer ns on the trace's own clock: round(ts_µs * 1000).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from itertools import chain, repeat
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pandas as pd

from tracelab.errors import TraceFormatError
from tracelab.model import (
    CopyKind,
    DeviceInfo,
    EventKind,
    Flag,
    MemKind,
    RunMeta,
    SyncKind,
    Timeline,
    build_timeline,
)
from tracelab.model.api_names import classify_api_ids, comm_mask

from .kineto_stream import BLOCK_SIZE, ChunkError, EventChunks, PieceRejected

_Num = int | float | str | None
_Triple = tuple[int, int, int] | None


class _Args(msgspec.Struct, gc=False):
    device: _Num = -1
    stream: _Num = -1
    correlation: _Num = -1
    context: _Num = -1
    bytes: _Num = -1
    registers: _Num = msgspec.field(default=-1, name="registers per thread")
    shared: _Num = msgspec.field(default=-1, name="shared memory")
    grid: _Triple = None
    block: _Triple = None
    sync: str | None = msgspec.field(default=None, name="cuda_sync_kind")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Num = -1
    tid: _Num = -1
    ts: float = math.nan
    dur: float = 0.0
    args: _Args | None = None


class _LooseArgs(msgspec.Struct, gc=False):
    device: Any = -1
    stream: Any = -1
    correlation: Any = -1
    context: Any = -1
    bytes: Any = -1
    registers: Any = msgspec.field(default=-1, name="registers per thread")
    shared: Any = msgspec.field(default=-1, name="shared memory")
    grid: Any = None
    block: Any = None
    sync: Any = msgspec.field(default=None, name="cuda_sync_kind")


class _LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: Any = math.nan
    dur: Any = 0.0
    args: _LooseArgs | None = None


_STRICT = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
_EMPTY_ARGS = _Args()

# Kineto category -> event kind (both schemas). Anything else with ph "X" on a host pid is OTHER.
_CAT_KIND: dict[str, int] = {
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "cuda_runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "cpu_op": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "user_annotation": EventKind.NVTX_RANGE,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
}
_LEGACY_CATS = {"Kernel", "Memcpy", "Memset", "Runtime", "Operator"}
_SKIP_CATS = {"Trace"}  # the profiler's own span
_DROP = -1
_KIND_OF: dict[str, int] = {
    **{k: int(v) for k, v in _CAT_KIND.items()},
    **{k: _DROP for k in _SKIP_CATS},
    "": _DROP,
}
_X_PH = frozenset({"X"})
_INSTANT_PH = frozenset({"i", "I"})
_FLOW_PH = frozenset({"s", "f", "t"})
_GPU = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_ON_DEVICE = (*_GPU, int(EventKind.SYNC), int(EventKind.GPU_ANNOTATION))
_WITH_CORRELATION = (*_GPU, int(EventKind.SYNC), int(EventKind.RUNTIME), int(EventKind.DRIVER))

_SYNC_NAMES = {
    "stream sync": SyncKind.STREAM,
    "event sync": SyncKind.EVENT,
    "context sync": SyncKind.DEVICE,
    "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}
_MEMCPY = re.compile(r"memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_COPY_KINDS = {
    "htod": CopyKind.HTOD,
    "dtoh": CopyKind.DTOH,
    "dtod": CopyKind.DTOD,
    "htoh": CopyKind.HTOH,
    "ptop": CopyKind.PTOP,
}
_MEM_KINDS = {
    "pageable": MemKind.PAGEABLE,
    "pinned": MemKind.PINNED,
    "device": MemKind.DEVICE,
    "array": MemKind.ARRAY,
    "managed": MemKind.MANAGED,
}


def load_kineto(
    path: str | Path, rank: int | None = None, *, progress: Callable[[int, int], None] | None = None
) -> Timeline:
    """Parse a Kineto trace (`.json` / `.json.gz`). `rank` overrides the rank of distributedInfo;
    `progress(done_bytes, total_bytes)` is called as the file is read.

    Raises TraceFormatError (one line naming the file) for anything that is not a usable Kineto trace.
    The file is opened read-only."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError("no such file", path)
    parsed = _Parsed()
    chunks = EventChunks(path, parsed.add_chunk, block_size=BLOCK_SIZE, progress=progress)
    try:
        for _ in chunks:
            pass
        meta_obj = _load_metadata(chunks.metadata_json)
    except ChunkError as exc:
        raise TraceFormatError(_explain(path, str(exc)), path) from None
    return parsed.finish(path, meta_obj, rank)


def relabel_rank(tl: Timeline, rank: int) -> Timeline:
    """The same timeline with every event, lane and device moved to `rank`."""
    ev = tl.events.copy()
    ev["rank"] = np.int32(rank)
    lanes = tl.lanes.copy()
    lanes["rank"] = np.int32(rank)
    devices = tuple(replace(d, rank=rank) for d in tl.devices)
    contexts = tuple(replace(c, rank=rank) for c in tl.contexts)
    return replace(
        tl, events=ev, lanes=lanes, devices=devices, contexts=contexts, meta=replace(tl.meta, ranks=(rank,))
    )


# ---------------------------------------------------------------------------------------------------


def _explain(path: Path, reason: str) -> str:
    if reason.startswith("no traceEvents") and _looks_like_execution_trace(path):
        return (
            "is a PyTorch execution trace (nodes/schema), not a Kineto trace: record it with torch.profiler"
        )
    return reason


def _looks_like_execution_trace(path: Path) -> bool:
    try:
        import gzip

        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            start = f.read(4096)
        return b'"nodes"' in start and b'"schema"' in start
    except (OSError, EOFError, zlib.error):
        return False


def _load_metadata(raw: bytes | None) -> dict:
    if raw is None:
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ChunkError(f"corrupt JSON outside traceEvents ({str(exc).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise ChunkError("top-level JSON value is not an object")
    return obj


def _decode(piece: bytes) -> list:
    try:
        return _STRICT.decode(piece)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise PieceRejected(str(exc)) from None
    try:
        return _LOOSE.decode(piece)
    except msgspec.ValidationError as exc:  # e.g. an element that is not an object
        raise ChunkError(f"traceEvents holds something that is not an event ({exc})") from None
    except msgspec.DecodeError as exc:
        raise PieceRejected(str(exc)) from None


def _ints(values: list | tuple, dtype: str = "int64") -> np.ndarray:
    """Python numbers -> int array; None / non-numeric / out-of-range values become -1."""
    n = len(values)
    try:
        return np.fromiter(values, dtype=dtype, count=n)
    except (TypeError, ValueError, OverflowError):
        num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(
            dtype=np.float64, copy=True
        )
        bad = ~np.isfinite(num) | (np.abs(num) > 9.2e18)
        num[bad] = -1
        return num.astype(dtype)


def _floats(values: list | tuple) -> np.ndarray:
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """round(us * 1000) without losing the ns digits of large epoch-µs values."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _strs(values: list | tuple) -> list:
    return [v if isinstance(v, str) else ("" if v is None else str(v)) for v in values]


def _triples(values: list | tuple) -> np.ndarray:
    """[x, y, z] lists -> (n, 3) int32; missing or malformed -> -1."""
    n = len(values)
    filled = [v if v is not None else (-1, -1, -1) for v in values]
    try:
        return np.fromiter(chain.from_iterable(filled), dtype=np.int32, count=3 * n).reshape(n, 3)
    except (TypeError, ValueError, OverflowError):
        out = np.full((n, 3), -1, dtype=np.int32)
        for i, v in enumerate(filled):  # only for malformed grids (rare; never on well-formed traces)
            if isinstance(v, (list, tuple)):
                for j, x in enumerate(v[:3]):
                    if isinstance(x, (int, float)) and abs(x) < 2**31:
                        out[i, j] = int(x)
        return out


def _col(seq: list, field: str, dtype: str = "int64") -> np.ndarray:
    """One struct field over a list of structs as a numpy column (C-level loop; slow path only for
    odd values such as strings or nulls)."""
    get = attrgetter(field)
    try:
        return np.fromiter(map(get, seq), dtype=dtype, count=len(seq))
    except (TypeError, ValueError, OverflowError):
        values = list(map(get, seq))
        return _floats(values) if dtype == "float64" else _ints(values, dtype)


def _take(seq: list, idx: np.ndarray) -> list:
    return seq if len(idx) == len(seq) else list(map(seq.__getitem__, idx.tolist()))


class _Parsed:
    """Accumulates column arrays chunk by chunk."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.parts: list[dict[str, np.ndarray]] = []
        self.n_total = 0
        self.n_dropped_instant = 0
        self.n_flows = 0
        self.n_bad_ts = 0
        self.n_no_device = 0
        self.legacy = False

    def intern(self, values: list) -> np.ndarray:
        ids = self.ids
        for v in set(values).difference(ids):  # once per new distinct string
            ids[v] = len(self.strings)
            self.strings.append(v)
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int32, count=len(values))

    # called by EventChunks for each piece: keeps column arrays, frees the structs
    def add_chunk(self, piece: memoryview) -> int:
        evs = _decode(piece)
        self._process(evs)
        return len(evs)

    def _process(self, evs: list) -> None:
        n = len(evs)
        self.n_total += n
        if not n:
            return
        loose = type(evs[0]) is not _Event  # loose decode: fields may hold anything
        cats = list(map(attrgetter("cat"), evs))
        phs = list(map(attrgetter("ph"), evs))
        if loose:
            cats, phs = _strs(cats), _strs(phs)
        if not self.legacy and not _LEGACY_CATS.isdisjoint(cats):
            self.legacy = True
        ph_count = Counter(phs)
        self.n_dropped_instant += ph_count["i"] + ph_count["I"]
        self.n_flows += ph_count["s"] + ph_count["f"] + ph_count["t"]
        kind = np.fromiter(map(_KIND_OF.get, cats, repeat(int(EventKind.OTHER))), dtype=np.int8, count=n)
        if ph_count["X"] != n:
            kind[~np.fromiter(map(_X_PH.__contains__, phs), dtype=bool, count=n)] = _DROP
        idx = np.flatnonzero(kind != _DROP)
        if not len(idx):
            return
        sel = _take(evs, idx)
        cats = _take(cats, idx)
        del evs, phs
        kind = kind[idx]
        ts = _col(sel, "ts", "float64")
        dur = _col(sel, "dur", "float64")
        pid = _col(sel, "pid")
        on_dev = np.isin(kind, _ON_DEVICE)
        # drop events without a time, and host events on a non-numeric pid (e.g. "Spans")
        good = np.isfinite(ts) & (on_dev | (pid >= 0))
        self.n_bad_ts += int(np.count_nonzero(~np.isfinite(ts)))
        if not good.all():
            keep = np.flatnonzero(good)
            sel, cats = _take(sel, keep), _take(cats, keep)
            kind, ts, dur, pid, on_dev = kind[keep], ts[keep], dur[keep], pid[keep], on_dev[keep]
            if not len(sel):
                return
        len(sel)
        dur = np.where(np.isfinite(dur) & (dur > 0), dur, 0.0)
        start = _us_to_ns(ts)
        end = start + np.rint(dur * 1000).astype(np.int64)
        tid = _col(sel, "tid")
        names = list(map(attrgetter("name"), sel))
        if loose:
            names = _strs(names)
        cols: dict[str, np.ndarray] = {
            "kind": kind,
            "start": start,
            "end": end,
            "name": self.intern(names),
            "category": self.intern(cats),
            "pid": np.where(on_dev, -1, pid),
            "tid": np.where(on_dev, -1, tid),
        }
        aidx = np.flatnonzero(np.isin(kind, _WITH_CORRELATION) | on_dev)
        if len(aidx):
            cols["rows"] = aidx.astype(np.int32)  # the rows that carry GPU / correlation fields
            sub = _take(sel, aidx)
            args = list(map(attrgetter("args"), sub))
            if None in args:
                args = [a if a is not None else _EMPTY_ARGS for a in args]
            k = kind[aidx]
            dev = _col(args, "device")
            stream = _col(args, "stream")
            ann = k == int(EventKind.GPU_ANNOTATION)
            if ann.any():  # gpu_user_annotation: the GPU sits in pid, the stream in tid
                dev = np.where(ann & (dev < 0), pid[aidx], dev)
                stream = np.where(ann & (stream < 0), tid[aidx], stream)
            gpu = np.isin(k, _GPU)
            legacy_stream = gpu & (stream < 0)
            if legacy_stream.any():  # 2021 schema: tid "stream 7"
                stream = np.where(legacy_stream, _stream_from_tid(list(map(attrgetter("tid"), sub))), stream)
            self.n_no_device += int(np.count_nonzero(gpu & ((dev < 0) | (stream < 0))))
            dev_side = np.isin(k, _ON_DEVICE)
            cols["a_device"] = np.where(dev_side, dev, -1).astype(np.int32)
            cols["a_stream"] = np.where(dev_side, stream, -1)
            cols["a_context"] = np.where(dev_side, _col(args, "context"), -1)
            cols["a_correlation"] = _col(args, "correlation")
            b = np.full(len(aidx), -1, dtype=np.int64)
            copy = np.flatnonzero(np.isin(k, [int(EventKind.MEMCPY), int(EventKind.MEMSET)]))
            if len(copy):
                b[copy] = _col(_take(args, copy), "bytes")
            cols["a_bytes"] = b
            kern = np.flatnonzero(k == int(EventKind.KERNEL))
            cols["k_rows"] = aidx[kern].astype(np.int32)
            kargs = _take(args, kern)
            cols["k_registers"] = _col(kargs, "registers", "int32")
            cols["k_shared"] = _col(kargs, "shared")
            cols["k_grid"] = _triples(list(map(attrgetter("grid"), kargs)))
            cols["k_block"] = _triples(list(map(attrgetter("block"), kargs)))
            syn = np.flatnonzero(k == int(EventKind.SYNC))
            if len(syn):
                sync = np.zeros(len(aidx), dtype=np.int8)
                sync_names = [getattr(args[i], "sync", None) or names[aidx[i]] for i in syn.tolist()]
                sync[syn] = [int(_SYNC_NAMES.get(str(x).lower(), SyncKind.NONE)) for x in sync_names]
                cols["a_sync"] = sync
        self.parts.append(cols)

    # -------------------------------------------------------------------------------------------
    def finish(self, path: Path, top: dict, rank: int | None) -> Timeline:
        if "traceEvents" not in top and top:
            raise TraceFormatError("no traceEvents array (not a Kineto / Chrome trace)", path)
        if self.n_no_device:
            raise TraceFormatError(
                f"{self.n_no_device} GPU event(s) (kernel/memcpy/memset) have no stream or device in args, "
                "so they cannot be placed on a GPU lane",
                path,
            )
        cols = _assemble(self.parts)
        self.parts = []
        kind = cols["kind"]
        n = len(kind)
        notes: list[str] = []
        stats: dict[str, int] = {"trace_events": self.n_total}
        if self.n_bad_ts:
            notes.append(f"{self.n_bad_ts} events without a timestamp were skipped")
        rank_source = "argument" if rank is not None else "default"
        dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else None
        if rank is None and dist is not None and isinstance(dist.get("rank"), int):
            rank, rank_source = int(dist["rank"]), "distributedInfo"
        if rank is None:
            rank = 0
        strings = tuple(self.strings)

        gpu = np.isin(kind, _GPU)
        is_api = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER)])
        flags = np.zeros(n, dtype=np.int16)
        sync_kind = cols["sync_kind"]
        if is_api.any():
            s, f = classify_api_ids(strings, cols["name"][is_api])
            sync_kind[is_api] = s
            flags[is_api] = f
        kern = kind == int(EventKind.KERNEL)
        if kern.any():
            flags[kern] |= np.where(comm_mask(strings, cols["name"][kern]), Flag.COMM, 0).astype(np.int16)
        corr = cols["correlation"]
        launches = np.unique(corr[is_api & (corr >= 0)])
        orphan = gpu & ~np.isin(corr, launches)
        flags[orphan] |= Flag.ORPHAN
        stats["orphan_gpu_events"] = int(orphan.sum())
        graph_names = np.array([i for i, s in enumerate(strings) if "GraphLaunch" in s], dtype=np.int32)
        if len(graph_names):
            graph_corr = np.unique(corr[is_api & np.isin(cols["name"], graph_names)])
            flags[gpu & np.isin(corr, graph_corr) & (corr >= 0)] |= Flag.GRAPH

        copy_kind = np.zeros(n, dtype=np.int8)
        src_mem = np.zeros(n, dtype=np.int8)
        dst_mem = np.zeros(n, dtype=np.int8)
        for k in (EventKind.MEMCPY, EventKind.MEMSET):
            rows = np.flatnonzero(kind == int(k))
            if not len(rows):
                continue
            uniq, inv = np.unique(cols["name"][rows], return_inverse=True)
            table = np.array([_copy_info(strings[u], k) for u in uniq.tolist()], dtype=np.int8).reshape(-1, 3)
            copy_kind[rows], src_mem[rows], dst_mem[rows] = table[inv, 0], table[inv, 1], table[inv, 2]

        n_gpu = int(gpu.sum())
        stats.update(
            kernels=int(kern.sum()),
            memcpys=int((kind == int(EventKind.MEMCPY)).sum()),
            memsets=int((kind == int(EventKind.MEMSET)).sum()),
            host_api_calls=int(is_api.sum()),
            events=n,
            skipped_instant_events=self.n_dropped_instant,
            skipped_flow_events=self.n_flows,
        )
        if n_gpu == 0:
            what = (
                "MTIA accelerator trace: its device events are not GPU work"
                if _is_mtia(top)
                else "no kernel/memcpy/memset events"
            )
            notes.append(f"no GPU activity ({what}); only host-side events were loaded")
        if stats["orphan_gpu_events"]:
            notes.append(
                f"{stats['orphan_gpu_events']} GPU events have no matching launch in the trace "
                "(flagged ORPHAN)"
            )

        used = sorted(
            {
                int(d)
                for d in np.unique(cols["device"][gpu | (kind == int(EventKind.GPU_ANNOTATION))])
                if d >= 0
            }
        )
        devices = _devices(top, rank, used)
        gpu_names = sorted({d.name for d in devices if d.name})
        if not used:  # no GPU work recorded: still say which accelerator the trace lists
            gpu_names = _listed_names(top)
        extra: dict[str, Any] = {
            "kineto_schema": "2021" if self.legacy else "current",
            "rank_source": rank_source,
        }
        for key in (
            "distributedInfo",
            "baseTimeNanoseconds",
            "displayTimeUnit",
            "traceName",
            "trace_id",
            "cuda_runtime_version",
            "cuda_driver_version",
            "hip_runtime_version",
            "roctracer_version",
        ):
            if key in top:
                extra[key] = top[key]
        meta = RunMeta(
            source=str(path),
            format="kineto",
            ranks=(rank,),
            schema_version=str(top.get("schemaVersion", "")),
            gpu=", ".join(gpu_names),
            notes=tuple(notes),
            stats=stats,
            extra=extra,
        )
        cols.update(
            rank=np.int32(rank),
            copy_kind=copy_kind,
            src_mem=src_mem,
            dst_mem=dst_mem,
            sync_kind=sync_kind,
            flags=flags,
        )
        return build_timeline(cols, strings, meta, devices=devices)


_MAIN = {
    "kind": np.int8,
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "category": np.int32,
    "pid": np.int64,
    "tid": np.int64,
}
_SPARSE = {
    "device": ("a_device", np.int32),
    "stream": ("a_stream", np.int64),
    "context": ("a_context", np.int64),
    "correlation": ("a_correlation", np.int64),
    "bytes": ("a_bytes", np.int64),
    "sync_kind": ("a_sync", np.int8),
}
_KERNEL = {"registers": ("k_registers", np.int32), "shared_mem": ("k_shared", np.int64)}


def _assemble(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Chunk parts -> full columns sorted by start. Columns are built and reordered one at a time
    (each part's arrays are released as soon as they are copied) to keep peak memory low."""
    sizes = [len(p["kind"]) for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    out: dict[str, np.ndarray] = {}
    for c, t in _MAIN.items():
        out[c] = np.concatenate([p.pop(c) for p in parts]) if parts else np.zeros(0, dtype=t)
    order = np.argsort(out["start"], kind="stable")
    if n and (np.diff(out["start"]) >= 0).all():
        order = None
    for c in list(out):
        if order is not None:
            out[c] = out[c][order]
    rows = [p.get("rows", np.zeros(0, np.int32)).astype(np.int64) + off for p, off in zip(parts, offsets)]
    krows = [p.get("k_rows", np.zeros(0, np.int32)).astype(np.int64) + off for p, off in zip(parts, offsets)]
    inverse = None
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
    all_rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    all_krows = np.concatenate(krows) if krows else np.zeros(0, np.int64)
    if inverse is not None:
        all_rows, all_krows = inverse[all_rows], inverse[all_krows]
    fill = {"sync_kind": 0}
    for c, (key, t) in _SPARSE.items():
        col = np.full(n, fill.get(c, -1), dtype=t)
        vals = [
            p.pop(key) if key in p else np.full(len(r), fill.get(c, -1), dtype=t) for p, r in zip(parts, rows)
        ]
        if vals:
            col[all_rows] = np.concatenate(vals)
        out[c] = col
    for c, (key, t) in _KERNEL.items():
        col = np.full(n, -1, dtype=t)
        vals = [p.pop(key) for p in parts if key in p]
        if vals:
            col[all_krows] = np.concatenate(vals)
        out[c] = col
    for c in ("grid", "block"):
        vals = [p.pop("k_" + c) for p in parts if "k_" + c in p]
        tri = np.concatenate(vals) if vals else np.zeros((0, 3), np.int32)
        for j, axis in enumerate("xyz"):
            col = np.full(n, -1, dtype=np.int32)
            col[all_krows] = tri[:, j]
            out[f"{c}_{axis}"] = col
    parts.clear()
    return out


def _stream_from_tid(tids: list) -> np.ndarray:
    out = []
    for t in tids:  # only GPU events that lack args.stream (rare)
        m = re.search(r"(\d+)\s*$", str(t))
        out.append(int(m.group(1)) if m else -1)
    return np.array(out, dtype=np.int64)


def _copy_info(name: str, kind: EventKind) -> tuple[int, int, int]:
    if kind == EventKind.MEMSET:
        m = re.search(r"\((\w+)\)", name)
        mem = _MEM_KINDS.get(m.group(1).lower(), MemKind.UNKNOWN) if m else MemKind.UNKNOWN
        return int(CopyKind.UNKNOWN), int(MemKind.UNKNOWN), int(mem)
    m = _MEMCPY.search(name)
    if not m:
        return int(CopyKind.UNKNOWN), int(MemKind.UNKNOWN), int(MemKind.UNKNOWN)
    ck = _COPY_KINDS.get(m.group(1).lower(), CopyKind.UNKNOWN)
    src = _MEM_KINDS.get((m.group(2) or "").lower(), MemKind.UNKNOWN)
    dst = _MEM_KINDS.get((m.group(3) or "").lower(), MemKind.UNKNOWN)
    return int(ck), int(src), int(dst)


def _is_mtia(top: dict) -> bool:
    props = top.get("deviceProperties")
    text = orjson.dumps(props).decode() if props is not None else ""
    return "ARTEMIS" in text or "mtia" in str(top.get("distributedInfo", "")).lower()


def _int(d: dict, *keys: str) -> int:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return 0


def _listed_names(top: dict) -> list[str]:
    props = top.get("deviceProperties")
    if not isinstance(props, list):
        props = top.get("computeProperties")
    if not isinstance(props, list):
        return []
    return sorted({str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")})


def _devices(top: dict, rank: int, used: list[int]) -> list[DeviceInfo]:
    """DeviceInfo for the GPUs the events use, from deviceProperties (current) or computeProperties (2021)."""
    props = top.get("deviceProperties")
    if not isinstance(props, list):
        props = top.get("computeProperties")
    by_id: dict[int, dict] = {}
    if isinstance(props, list):
        for i, p in enumerate(props):
            if isinstance(p, dict):
                by_id[_int(p, "id") if "id" in p else i] = p
    names = {str(p.get("name") or "") for p in by_id.values()}
    fallback = None
    if by_id and not set(used) & set(by_id) and len(names) == 1:
        # ROCm numbers GPUs by agent (e.g. device 2) while deviceProperties counts from 0: when every
        # listed GPU is the same model, its properties are the ones the events' GPU has
        fallback = next(iter(by_id.values()))
    out = []
    for dev in used:
        p = by_id.get(dev, fallback)
        if p is None:
            out.append(DeviceInfo(rank=rank, device=dev))
            continue
        out.append(
            DeviceInfo(
                rank=rank,
                device=dev,
                name=str(p.get("name") or ""),
                sm_count=_int(p, "numSms", "multiProcessorCount"),
                cc_major=_int(p, "computeMajor", "major"),
                cc_minor=_int(p, "computeMinor", "minor"),
                total_memory=_int(p, "totalGlobalMem"),
                max_threads_per_sm=_int(p, "maxThreadsPerMultiprocessor", "maxThreadsPerMultiProcessor"),
                max_blocks_per_sm=_int(p, "maxBlocksPerMultiprocessor", "maxBlocksPerMultiProcessor"),
                registers_per_sm=_int(p, "regsPerMultiprocessor", "regsPerMultiProcessor"),
                max_registers_per_block=_int(p, "regsPerBlock"),
                shared_mem_per_sm=_int(p, "sharedMemPerMultiprocessor", "sharedMemPerMultiProcessor"),
                max_shared_mem_per_block=_int(p, "sharedMemPerBlockOptin", "sharedMemPerBlock"),
                warp_size=_int(p, "warpSize") or 32,
            )
        )
    return out
