"""The Timeline: every trace, whatever its format, becomes one of these.

Events are columnar (numpy arrays with the fixed schema `EVENT_COLUMNS`, integer nanoseconds on the
trace's own clock: `Timeline.cols`, or `Timeline.col(name)`; `Timeline.events` is the same table as a
pandas DataFrame, built on first use without copying, so code that needs no pandas never imports it),
names are interned in `strings`, and every event sits on a lane:

    rank -> device -> context / green context -> stream      (GPU_STREAM, GPU_ANNOTATION lanes)
    rank -> process -> thread                                (HOST_THREAD lanes: API calls, CPU ops)
    rank -> process -> thread -> NVTX domain                 (NVTX lanes)

Correlation ids link host launches (RUNTIME / DRIVER rows) to the GPU work they issued. Integer
columns use -1 for "unknown / not applicable".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from .grouping import any_of, first_rows, group_codes_of, sorted_unique
from .kinds import GPU_ACTIVITY_KINDS, EventKind, LaneKind
from .strings import remap_into

if TYPE_CHECKING:
    import pandas as pd

Columns = dict[str, np.ndarray]  # column name -> numpy array, all of one length

EVENT_COLUMNS: dict[str, str] = {
    "kind": "int8",  # EventKind
    "start": "int64",  # ns
    "end": "int64",  # ns (== start for instantaneous marks)
    "rank": "int32",
    "device": "int32",  # GPU index within the rank; -1 for host-side events
    "context": "int64",  # CUDA context id (nsys); -1 unknown
    "green_context": "int64",  # green context id; -1 when the work is not in a green context
    "stream": "int64",  # -1 for host-side events
    "pid": "int64",  # host process; -1 for GPU-side events
    "tid": "int64",  # host thread; -1 for GPU-side events
    "name": "int32",  # id into Timeline.strings; -1 none
    "category": "int32",  # id into Timeline.strings: NVTX domain, Kineto cat, ...; -1 none
    "correlation": "int64",  # links a host launch to its GPU work; -1 none
    "bytes": "int64",  # memcpy / memset size; -1 unknown
    "copy_kind": "int8",  # CopyKind
    "src_mem": "int8",  # MemKind
    "dst_mem": "int8",  # MemKind
    "grid_x": "int32",
    "grid_y": "int32",
    "grid_z": "int32",
    "block_x": "int32",
    "block_y": "int32",
    "block_z": "int32",
    "registers": "int32",  # registers per thread; -1 unknown
    "shared_mem": "int64",  # static + dynamic shared memory per block, bytes; -1 unknown
    "graph_id": "int64",
    "graph_node": "int64",
    "sync_kind": "int8",  # SyncKind (sync events and host API calls)
    "flags": "int16",  # Flag bits
    "lane": "int32",  # id into Timeline.lanes (assigned by build_timeline)
}

_ZERO_DEFAULT = {"copy_kind", "src_mem", "dst_mem", "sync_kind", "flags", "kind", "rank"}
DEFAULTS: dict[str, int] = {c: (0 if c in _ZERO_DEFAULT else -1) for c in EVENT_COLUMNS}

LANE_COLUMNS: dict[str, str] = {
    "lane": "int32",
    "lane_kind": "int8",  # LaneKind
    "rank": "int32",
    "device": "int32",
    "context": "int64",
    "green_context": "int64",
    "stream": "int64",
    "pid": "int64",
    "tid": "int64",
    "category": "int32",
}


class ModelError(AssertionError):
    """A Timeline broke one of its invariants (a bug in a parser, never the user's fault)."""


class DeviceInfo(msgspec.Struct, frozen=True):
    """One GPU of one rank, with the limits an occupancy estimate needs (0 = unknown)."""

    rank: int
    device: int
    name: str = ""
    sm_count: int = 0
    cc_major: int = 0
    cc_minor: int = 0
    total_memory: int = 0
    max_threads_per_sm: int = 0
    max_blocks_per_sm: int = 0
    registers_per_sm: int = 0
    max_registers_per_block: int = 0
    shared_mem_per_sm: int = 0
    max_shared_mem_per_block: int = 0
    warp_size: int = 32


class ContextInfo(msgspec.Struct, frozen=True):
    """A CUDA context of a device; green contexts carry their own SM count (0 = unknown)."""

    rank: int
    device: int
    context: int
    is_green: bool = False
    parent_context: int = -1
    green_context: int = -1  # the id events carry in their green_context column
    sm_count: int = 0


class RunMeta(msgspec.Struct, frozen=True):
    source: str
    format: str  # "kineto" | "nsys"
    ranks: tuple[int, ...] = (0,)
    schema_version: str = ""
    backend: str = ""  # "torch" | "nsys" for recorded runs
    workload: str = ""
    variant: str = ""
    gpu: str = ""
    notes: tuple[str, ...] = ()  # what is missing or degraded, in words
    stats: Mapping[str, int] = msgspec.field(default_factory=dict)  # e.g. orphan_gpu_events
    extra: Mapping[str, Any] = msgspec.field(default_factory=dict)  # free-form metadata (meta.json, distributedInfo)


def _frame_columns(frame: Any) -> Columns:
    return {str(c): frame[c].to_numpy() for c in frame.columns}


def _frame(cols: Columns) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(cols, copy=False)


@dataclasses.dataclass(frozen=True, init=False, eq=False, repr=False)
class Timeline:
    """`cols` (EVENT_COLUMNS, sorted by start) and `lane_cols` (LANE_COLUMNS, lane i at row i) are numpy
    columns; `events` / `lanes` show them as DataFrames (built on first use, zero-copy). Construct with
    either `events=` / `lanes=` DataFrames or `cols=` / `lane_cols=` (a given DataFrame wins, so
    `dataclasses.replace(tl, events=df)` works)."""

    cols: Columns
    strings: tuple[str, ...]
    lane_cols: Columns
    devices: tuple[DeviceInfo, ...]
    meta: RunMeta
    contexts: tuple[ContextInfo, ...] = ()
    # measured per-block SM placement (probe kernels): rank, device, green_context, sm, start, end
    # (ns on the trace clock) and name (kernel string id); None when the run has no probe data.
    sm_blocks: pd.DataFrame | None = None

    def __init__(
        self,
        events: pd.DataFrame | None = None,
        strings: Sequence[str] = (),
        lanes: pd.DataFrame | None = None,
        devices: Sequence[DeviceInfo] = (),
        meta: RunMeta | None = None,
        contexts: Sequence[ContextInfo] = (),
        sm_blocks: pd.DataFrame | None = None,
        *,
        cols: Columns | None = None,
        lane_cols: Columns | None = None,
    ) -> None:
        if events is not None:
            cols = _frame_columns(events)
        if lanes is not None:
            lane_cols = _frame_columns(lanes)
        if cols is None or lane_cols is None or meta is None:
            raise TypeError("Timeline needs events (or cols), lanes (or lane_cols) and meta")
        setattr_ = object.__setattr__
        setattr_(self, "cols", cols)
        setattr_(self, "strings", tuple(strings))
        setattr_(self, "lane_cols", lane_cols)
        setattr_(self, "devices", tuple(devices))
        setattr_(self, "meta", meta)
        setattr_(self, "contexts", tuple(contexts))
        setattr_(self, "sm_blocks", sm_blocks)
        setattr_(self, "_events", events)
        setattr_(self, "_lanes", lanes)

    def __repr__(self) -> str:
        return (
            f"Timeline({self.n_events} events, {self.n_lanes} lanes, {len(self.strings)} strings, "
            f"{len(self.devices)} devices, source={self.meta.source!r})"
        )

    @property
    def events(self) -> pd.DataFrame:
        """The events as a pandas DataFrame over the same arrays (imports pandas on first use)."""
        if self._events is None:  # type: ignore[attr-defined]
            object.__setattr__(self, "_events", _frame(self.cols))
        return self._events  # type: ignore[attr-defined]

    @property
    def lanes(self) -> pd.DataFrame:
        if self._lanes is None:  # type: ignore[attr-defined]
            object.__setattr__(self, "_lanes", _frame(self.lane_cols))
        return self._lanes  # type: ignore[attr-defined]

    def col(self, name: str) -> np.ndarray:
        """One event column as a numpy array (no pandas)."""
        return self.cols[name]

    def lane_col(self, name: str) -> np.ndarray:
        return self.lane_cols[name]

    @property
    def n_events(self) -> int:
        return len(self.cols["start"])

    @property
    def n_lanes(self) -> int:
        return len(self.lane_cols["lane"])

    # ---- convenience views -------------------------------------------------------------------
    def gpu_mask(self) -> np.ndarray:
        return any_of(self.cols["kind"], GPU_ACTIVITY_KINDS)

    def gpu_events(self) -> pd.DataFrame:
        return self.events[self.gpu_mask()]

    def name(self, sid: int) -> str:
        return self.strings[sid] if 0 <= sid < len(self.strings) else ""

    def names(self, ids: Any) -> np.ndarray:
        table = np.array(self.strings + ("",), dtype=object)
        ids = np.asarray(ids)
        return table[np.where((ids >= 0) & (ids < len(self.strings)), ids, len(self.strings))]

    def device_info(self, rank: int, device: int) -> DeviceInfo | None:
        for d in self.devices:
            if d.rank == rank and d.device == device:
                return d
        return None

    def with_meta(self, **changes: Any) -> Timeline:
        return dataclasses.replace(self, meta=msgspec.structs.replace(self.meta, **changes))

    # ---- invariants --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ModelError if any invariant is broken."""
        ev = self.cols
        problems: list[str] = []
        missing = [c for c in EVENT_COLUMNS if c not in ev]
        if missing:
            raise ModelError(f"event columns missing: {missing}")
        n = self.n_events
        for col, dtype in EVENT_COLUMNS.items():
            if str(ev[col].dtype) != dtype:
                problems.append(f"column {col} is {ev[col].dtype}, expected {dtype}")
            if len(ev[col]) != n:
                problems.append(f"column {col} has {len(ev[col])} rows, expected {n}")
        start = ev["start"]
        end = ev["end"]
        if (end < start).any():
            problems.append(f"{int((end < start).sum())} events end before they start")
        if len(start) > 1 and (start[1:] < start[:-1]).any():
            problems.append("events are not sorted by start")
        kinds = ev["kind"]
        if len(kinds) and (kinds.min() < 0 or kinds.max() > max(EventKind)):
            problems.append("unknown event kind codes")
        for col in ("name", "category"):
            ids = ev[col]
            if len(ids) and (ids.min() < -1 or ids.max() >= len(self.strings)):
                problems.append(f"{col} ids outside the string table")
        gpu = self.gpu_mask()
        if (ev["device"][gpu] < 0).any():
            problems.append("GPU events without a device")
        lane = ev["lane"]
        if len(lane) and (lane.min() < 0 or lane.max() >= self.n_lanes):
            problems.append("lane ids outside the lane table")
        if self.n_lanes and not np.array_equal(self.lane_cols["lane"], np.arange(self.n_lanes)):
            problems.append("lane table is not indexed 0..n-1")
        keys = [(d.rank, d.device) for d in self.devices]
        if len(keys) != len(set(keys)):
            problems.append("duplicate devices")
        if problems:
            raise ModelError("; ".join(problems))


def _column(columns: Mapping[str, Any], name: str, n: int) -> np.ndarray:
    """A column of n rows in its schema dtype. A missing column or a scalar is one value for every row:
    a read-only broadcast view (no memory per row), as every column of a Timeline is read-only."""
    dtype = EVENT_COLUMNS[name]
    value = columns.get(name)
    if value is None:
        return np.broadcast_to(np.asarray(DEFAULTS[name], dtype=dtype), (n,))
    arr = np.asarray(value)
    if arr.ndim == 0:
        return np.broadcast_to(arr.astype(dtype), (n,))
    if arr.dtype.kind == "f":
        arr = np.where(np.isnan(arr), DEFAULTS[name], arr)
    return arr.astype(dtype, copy=False)


def is_constant(a: np.ndarray) -> bool:
    """A broadcast column: one value for every row."""
    return a.ndim == 1 and len(a) > 1 and a.strides[0] == 0


_LANE_KEYS = ("lane_kind", "rank", "device", "context", "green_context", "stream", "pid", "tid", "category")
_LANE_KIND_OF = np.full(256, int(LaneKind.HOST_THREAD), dtype=np.int8)  # lane kind of each event kind
_LANE_KIND_OF[[int(k) for k in (*GPU_ACTIVITY_KINDS, EventKind.SYNC)]] = int(LaneKind.GPU_STREAM)  # with a device
_LANE_KIND_OF[int(EventKind.GPU_ANNOTATION)] = int(LaneKind.GPU_ANNOTATION)
_LANE_KIND_OF[[int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)]] = int(LaneKind.NVTX)


def _lane_kind(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    kind = np.asarray(cols["kind"])
    if kind.dtype != np.int8:  # the model's dtype; anything else is looked up by its valid range
        kind = np.where((kind >= 0) & (kind <= 127), kind, 127).astype(np.int8)
    lane_kind = _LANE_KIND_OF[kind.view(np.uint8)]  # one lookup per event
    lane_kind[(lane_kind == int(LaneKind.GPU_STREAM)) & (cols["device"] < 0)] = int(LaneKind.HOST_THREAD)
    return lane_kind


def _gpu_side(lane_kind: np.ndarray) -> np.ndarray:
    return (lane_kind == int(LaneKind.GPU_STREAM)) | (lane_kind == int(LaneKind.GPU_ANNOTATION))


def _lane_key(
    cols: Mapping[str, np.ndarray], lane_kind: np.ndarray, name: str, gpu_side: np.ndarray | None = None
) -> np.ndarray:
    """One lane key column of every event (LANE_COLUMNS but `lane`); `gpu_side` is _gpu_side(lane_kind),
    when the caller already has it."""
    if name == "lane_kind":
        return lane_kind
    if name == "rank":
        return cols["rank"]
    if gpu_side is None:
        gpu_side = _gpu_side(lane_kind)
    if name in ("pid", "tid"):
        return np.where(gpu_side, -1, cols[name])
    if name == "category":
        return np.where(lane_kind == int(LaneKind.NVTX), cols["category"], -1).astype(np.int32)
    out = np.where(gpu_side, cols[name], -1)
    return out.astype(np.int32) if name == "device" else out


def assign_lane_ids(cols: Mapping[str, np.ndarray]) -> tuple[np.ndarray, Columns]:
    """Lane id for every event, and the lane table, numbered in (lane_kind, rank, device, context,
    green context, stream, pid, tid, category) order. numpy only: a few O(n) passes, one key column
    alive at a time. The lane table is made from each lane's first event alone (the keys are computed
    row by row, so the keys of those rows are the rows of the keys)."""
    n = len(cols["kind"])
    if n == 0:
        return np.zeros(0, dtype=np.int32), {c: np.zeros(0, dtype=t) for c, t in LANE_COLUMNS.items()}
    lane_kind = _lane_kind(cols)
    gpu_side = _gpu_side(lane_kind)
    # a big timeline's key columns are made on worker threads (this thread folds them in, in order)
    ids, k = group_codes_of([lambda name=name, g=gpu_side: _lane_key(cols, lane_kind, name, g) for name in _LANE_KEYS], n)
    del gpu_side
    first = first_rows(ids, k)
    firsts = {c: np.asarray(cols[c])[first] for c in _LANE_KEYS if c != "lane_kind"}
    lane_kind = lane_kind[first]
    lanes: Columns = {"lane": np.arange(k, dtype=np.int32)}
    for c in _LANE_KEYS:
        lanes[c] = _lane_key(firsts, lane_kind, c).astype(LANE_COLUMNS[c])
    return ids.astype(np.int32), lanes


def _gpu_devices(cols: Mapping[str, np.ndarray]) -> list[tuple[int, int]]:
    dev = cols["device"]
    used = dev >= 0
    if not used.any():
        return []
    rank, dev = np.asarray(cols["rank"])[used], dev[used]
    r_lo, r_hi, d_hi = int(rank.min()), int(rank.max()), int(dev.max())
    if r_lo >= 0 and (r_hi + 1) * (d_hi + 1) <= 1 << 20:  # small ids: count the pairs, no sort
        width = d_hi + 1
        seen = np.flatnonzero(np.bincount(rank.astype(np.int64) * width + dev, minlength=(r_hi + 1) * width))
        return [(k // width, k % width) for k in seen.tolist()]
    key = sorted_unique((rank.astype(np.int64) << 32) | dev.astype(np.int64))
    return [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in key.tolist()]


def build_timeline(
    columns: Mapping[str, Any],
    strings: Sequence[str],
    meta: RunMeta,
    devices: Sequence[DeviceInfo] = (),
    contexts: Sequence[ContextInfo] = (),
    sm_blocks: pd.DataFrame | None = None,
    validate: bool = True,
    consume: bool = False,
) -> Timeline:
    """Make a Timeline from column arrays (any missing column takes its default), sorted by start,
    with lanes assigned. Parsers call this once at the end; they never build rows in Python.
    Columns are converted and reordered one at a time, so the peak is the columns plus one;
    `consume=True` (a dict the caller gives away) also drops each input column once converted."""
    present = [v for v in columns.values() if v is not None and np.ndim(v) > 0]
    n = len(present[0]) if present else 0
    start = _column(columns, "start", n)
    order = None
    if n and (start[1:] < start[:-1]).any():
        order = np.argsort(start, kind="stable")
    data: Columns = {}
    for c in EVENT_COLUMNS:
        if c == "lane":
            continue
        a = start if c == "start" else _column(columns, c, n)
        data[c] = a[order] if order is not None and not is_constant(a) else a
        if consume and isinstance(columns, MutableMapping):
            columns.pop(c, None)
        del a
    del order, start
    lane_ids, lanes = assign_lane_ids(data)
    data["lane"] = lane_ids
    # devices seen in events but not described get a bare DeviceInfo
    known = {(d.rank, d.device) for d in devices}
    extra = [DeviceInfo(rank=r, device=d) for r, d in _gpu_devices(data) if (r, d) not in known]
    all_devices = tuple(sorted((*devices, *extra), key=lambda d: (d.rank, d.device)))
    tl = Timeline(
        cols=data,
        strings=tuple(strings),
        lane_cols=lanes,
        devices=all_devices,
        meta=meta,
        contexts=tuple(contexts),
        sm_blocks=sm_blocks,
    )
    if validate:
        tl.validate()
    return tl


def merge_timelines(parts: Sequence[Timeline], meta: RunMeta) -> Timeline:
    """Join per-rank timelines (each already carrying its rank) into one, re-interning strings."""
    if len(parts) == 1:
        return dataclasses.replace(parts[0], meta=meta)
    table: dict[str, int] = {}
    strings: list[str] = []
    remaps = []
    for tl in parts:
        remaps.append(remap_into(tl.strings, table, strings))
    merged: Columns = {}
    for c in EVENT_COLUMNS:
        if c == "lane":
            continue
        arrays = [tl.cols[c] for tl in parts]
        if c in ("name", "category"):
            arrays = [r[np.where(a < 0, len(tl.strings), a)] for a, r, tl in zip(arrays, remaps, parts)]
        merged[c] = np.concatenate(arrays)
    total = len(merged["start"])
    # sm_blocks["kernel"] holds a row of its part's events: move it to the row that event gets in the merged,
    # start-sorted table (build_timeline sorts with the same stable argsort)
    new_row = np.empty(total, dtype=np.int64)
    new_row[np.argsort(merged["start"], kind="stable")] = np.arange(total)
    blocks = []
    offset = 0
    for tl, remap in zip(parts, remaps):
        if tl.sm_blocks is not None:
            b = tl.sm_blocks
            if "name" in b.columns:
                ids = b["name"].to_numpy()
                b = b.assign(name=remap[np.where(ids < 0, len(tl.strings), ids)])
            if "kernel" in b.columns:
                k = b["kernel"].to_numpy()
                b = b.assign(kernel=np.where(k >= 0, new_row[np.clip(k + offset, 0, max(total - 1, 0))], -1))
            blocks.append(b)
        offset += tl.n_events
    sm_blocks = None
    if blocks:
        import pandas as pd

        sm_blocks = pd.concat(blocks, ignore_index=True)
    return build_timeline(
        merged,
        strings,
        meta,
        devices=[d for tl in parts for d in tl.devices],
        contexts=[c for tl in parts for c in tl.contexts],
        sm_blocks=sm_blocks,
    )
