"""The Timeline: every trace, whatever its format, becomes one of these.

Events are columnar (a pandas DataFrame with the fixed schema `EVENT_COLUMNS`, integer nanoseconds on
the trace's own clock), names are interned in `strings`, and every event sits on a lane:

    rank -> device -> context / green context -> stream      (GPU_STREAM, GPU_ANNOTATION lanes)
    rank -> process -> thread                                (HOST_THREAD lanes: API calls, CPU ops)
    rank -> process -> thread -> NVTX domain                 (NVTX lanes)

Correlation ids link host launches (RUNTIME / DRIVER rows) to the GPU work they issued. Integer
columns use -1 for "unknown / not applicable".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from .grouping import group_rows
from .kinds import GPU_ACTIVITY_KINDS, EventKind, LaneKind

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


@dataclass(frozen=True)
class DeviceInfo:
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


@dataclass(frozen=True)
class ContextInfo:
    """A CUDA context of a device; green contexts carry their own SM count (0 = unknown)."""

    rank: int
    device: int
    context: int
    is_green: bool = False
    parent_context: int = -1
    green_context: int = -1  # the id events carry in their green_context column
    sm_count: int = 0


@dataclass(frozen=True)
class RunMeta:
    source: str
    format: str  # "kineto" | "nsys"
    ranks: tuple[int, ...] = (0,)
    schema_version: str = ""
    backend: str = ""  # "torch" | "nsys" for recorded runs
    workload: str = ""
    variant: str = ""
    gpu: str = ""
    notes: tuple[str, ...] = ()  # what is missing or degraded, in words
    stats: Mapping[str, int] = field(default_factory=dict)  # e.g. orphan_gpu_events
    extra: Mapping[str, Any] = field(default_factory=dict)  # free-form metadata (meta.json, distributedInfo)


@dataclass(frozen=True)
class Timeline:
    events: pd.DataFrame  # EVENT_COLUMNS, sorted by start
    strings: tuple[str, ...]
    lanes: pd.DataFrame  # LANE_COLUMNS, indexed 0..n-1 by lane
    devices: tuple[DeviceInfo, ...]
    meta: RunMeta
    contexts: tuple[ContextInfo, ...] = ()
    # measured per-block SM placement (probe kernels): rank, device, green_context, sm, start, end
    # (ns on the trace clock) and name (kernel string id); None when the run has no probe data.
    sm_blocks: pd.DataFrame | None = None

    # ---- convenience views -------------------------------------------------------------------
    def gpu_mask(self) -> np.ndarray:
        return self.events["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS]).to_numpy()

    def gpu_events(self) -> pd.DataFrame:
        return self.events[self.gpu_mask()]

    def name(self, sid: int) -> str:
        return self.strings[sid] if 0 <= sid < len(self.strings) else ""

    def names(self, ids: np.ndarray | pd.Series) -> np.ndarray:
        table = np.array(self.strings + ("",), dtype=object)
        ids = np.asarray(ids)
        return table[np.where((ids >= 0) & (ids < len(self.strings)), ids, len(self.strings))]

    def device_info(self, rank: int, device: int) -> DeviceInfo | None:
        for d in self.devices:
            if d.rank == rank and d.device == device:
                return d
        return None

    def with_meta(self, **changes: Any) -> Timeline:
        return replace(self, meta=replace(self.meta, **changes))

    # ---- invariants --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ModelError if any invariant is broken."""
        ev = self.events
        problems: list[str] = []
        missing = [c for c in EVENT_COLUMNS if c not in ev.columns]
        if missing:
            raise ModelError(f"event columns missing: {missing}")
        for col, dtype in EVENT_COLUMNS.items():
            if str(ev[col].dtype) != dtype:
                problems.append(f"column {col} is {ev[col].dtype}, expected {dtype}")
        start = ev["start"].to_numpy()
        end = ev["end"].to_numpy()
        if (end < start).any():
            problems.append(f"{int((end < start).sum())} events end before they start")
        if len(start) > 1 and (np.diff(start) < 0).any():
            problems.append("events are not sorted by start")
        kinds = ev["kind"].to_numpy()
        if len(kinds) and (kinds.min() < 0 or kinds.max() > max(EventKind)):
            problems.append("unknown event kind codes")
        for col in ("name", "category"):
            ids = ev[col].to_numpy()
            if len(ids) and (ids.min() < -1 or ids.max() >= len(self.strings)):
                problems.append(f"{col} ids outside the string table")
        gpu = self.gpu_mask()
        if (ev["device"].to_numpy()[gpu] < 0).any():
            problems.append("GPU events without a device")
        lane = ev["lane"].to_numpy()
        if len(lane) and (lane.min() < 0 or lane.max() >= len(self.lanes)):
            problems.append("lane ids outside the lane table")
        if len(self.lanes) and not np.array_equal(self.lanes["lane"].to_numpy(), np.arange(len(self.lanes))):
            problems.append("lane table is not indexed 0..n-1")
        keys = [(d.rank, d.device) for d in self.devices]
        if len(keys) != len(set(keys)):
            problems.append("duplicate devices")
        if problems:
            raise ModelError("; ".join(problems))


def _column(columns: Mapping[str, Any], name: str, n: int) -> np.ndarray:
    dtype = EVENT_COLUMNS[name]
    value = columns.get(name)
    if value is None:
        return np.full(n, DEFAULTS[name], dtype=dtype)
    arr = np.asarray(value)
    if arr.ndim == 0:
        return np.full(n, arr.item(), dtype=dtype)
    if arr.dtype.kind == "f":
        arr = np.where(np.isnan(arr), DEFAULTS[name], arr)
    return arr.astype(dtype, copy=False)


_LANE_KIND_OF = np.full(256, int(LaneKind.HOST_THREAD), dtype=np.int8)  # lane kind of each event kind
_LANE_KIND_OF[[int(k) for k in (*GPU_ACTIVITY_KINDS, EventKind.SYNC)]] = int(LaneKind.GPU_STREAM)  # with a device
_LANE_KIND_OF[int(EventKind.GPU_ANNOTATION)] = int(LaneKind.GPU_ANNOTATION)
_LANE_KIND_OF[[int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)]] = int(LaneKind.NVTX)


def assign_lanes(events: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Lane id for every event, and the lane table. Vectorized: one hash pass over the lane keys
    (`grouping.group_rows`), lanes numbered in sorted key order."""
    n = len(events)
    kind = events["kind"].to_numpy()
    if kind.dtype != np.int8:  # the model's dtype; anything else is looked up by its valid range
        kind = np.where((kind >= 0) & (kind <= 127), kind, 127).astype(np.int8)
    lane_kind = _LANE_KIND_OF[kind.view(np.uint8)]  # one lookup per event
    lane_kind[(lane_kind == int(LaneKind.GPU_STREAM)) & (events["device"].to_numpy() < 0)] = int(LaneKind.HOST_THREAD)
    gpu_side = (lane_kind == int(LaneKind.GPU_STREAM)) | (lane_kind == int(LaneKind.GPU_ANNOTATION))
    if n == 0:
        lanes = pd.DataFrame({c: pd.Series([], dtype=t) for c, t in LANE_COLUMNS.items()})
        return np.zeros(0, dtype=np.int32), lanes
    keys = {
        "lane_kind": lane_kind,
        "rank": events["rank"].to_numpy(),
        "device": np.where(gpu_side, events["device"].to_numpy(), -1).astype(np.int32),
        "context": np.where(gpu_side, events["context"].to_numpy(), -1),
        "green_context": np.where(gpu_side, events["green_context"].to_numpy(), -1),
        "stream": np.where(gpu_side, events["stream"].to_numpy(), -1),
        "pid": np.where(gpu_side, -1, events["pid"].to_numpy()),
        "tid": np.where(gpu_side, -1, events["tid"].to_numpy()),
        "category": np.where(lane_kind == int(LaneKind.NVTX), events["category"].to_numpy(), -1).astype(np.int32),
    }
    # lanes numbered in sorted key order (as groupby(sort=True).ngroup()), hashed in one pass
    ids, first = group_rows(list(keys.values()))
    lane_ids = ids.astype(np.int32)
    lanes = pd.DataFrame({c: v[first] for c, v in keys.items()})
    lanes.insert(0, "lane", np.arange(len(lanes), dtype=np.int32))
    lanes = lanes.astype(LANE_COLUMNS)
    return lane_ids, lanes


def build_timeline(
    columns: Mapping[str, Any],
    strings: Sequence[str],
    meta: RunMeta,
    devices: Sequence[DeviceInfo] = (),
    contexts: Sequence[ContextInfo] = (),
    sm_blocks: pd.DataFrame | None = None,
    validate: bool = True,
) -> Timeline:
    """Make a Timeline from column arrays (any missing column takes its default), sorted by start,
    with lanes assigned. Parsers call this once at the end; they never build rows in Python."""
    present = [v for v in columns.values() if v is not None and np.ndim(v) > 0]
    n = len(present[0]) if present else 0
    data = {c: _column(columns, c, n) for c in EVENT_COLUMNS}
    if n and not (np.diff(data["start"]) >= 0).all():  # sort only when a parser did not
        order = np.argsort(data["start"], kind="stable")
        data = {c: a[order] for c, a in data.items()}
    events = pd.DataFrame(data, copy=False)
    lane_ids, lanes = assign_lanes(events)
    events["lane"] = lane_ids
    # devices seen in events but not described get a bare DeviceInfo
    known = {(d.rank, d.device) for d in devices}
    dev = events["device"].to_numpy()
    on_dev = dev >= 0
    pairs = pd.unique((events["rank"].to_numpy()[on_dev].astype(np.int64) << 32) | dev[on_dev].astype(np.int64))
    extra = [
        DeviceInfo(rank=int(k) >> 32, device=int(k) & 0xFFFFFFFF)
        for k in pairs.tolist()
        if (int(k) >> 32, int(k) & 0xFFFFFFFF) not in known
    ]
    all_devices = tuple(sorted((*devices, *extra), key=lambda d: (d.rank, d.device)))
    tl = Timeline(
        events=events,
        strings=tuple(strings),
        lanes=lanes,
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
        return replace(parts[0], meta=meta)
    table: dict[str, int] = {}
    strings: list[str] = []
    frames = []
    remaps = []
    for tl in parts:
        remap = np.empty(len(tl.strings) + 1, dtype=np.int32)
        for i, s in enumerate(tl.strings):
            sid = table.get(s)
            if sid is None:
                sid = table[s] = len(strings)
                strings.append(s)
            remap[i] = sid
        remap[-1] = -1
        remaps.append(remap)
        ev = tl.events.copy()
        for col in ("name", "category"):
            ids = ev[col].to_numpy()
            ev[col] = remap[np.where(ids < 0, len(tl.strings), ids)]
        frames.append(ev)
    events = pd.concat(frames, ignore_index=True)
    # sm_blocks["kernel"] holds a row of its part's events: move it to the row that event gets in the merged,
    # start-sorted table (build_timeline sorts with the same stable argsort)
    new_row = np.empty(len(events), dtype=np.int64)
    new_row[np.argsort(events["start"].to_numpy(), kind="stable")] = np.arange(len(events))
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
                b = b.assign(kernel=np.where(k >= 0, new_row[np.clip(k + offset, 0, max(len(events) - 1, 0))], -1))
            blocks.append(b)
        offset += len(tl.events)
    return build_timeline(
        {c: events[c].to_numpy() for c in EVENT_COLUMNS if c != "lane"},
        strings,
        meta,
        devices=[d for tl in parts for d in tl.devices],
        contexts=[c for tl in parts for c in tl.contexts],
        sm_blocks=pd.concat(blocks, ignore_index=True) if blocks else None,
    )
