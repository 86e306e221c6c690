"""The dashboard's timeline as data for the browser's canvas renderer (`app/assets/timeline_canvas.js`).

The browser keeps the run in tiles: level L cuts the run into 2^L equal windows, and each tile holds
that window's level of detail (`tracelab.render.timeline.lod`) computed for the app's `width_px` (1600) pixels: events drawn one
by one, per-row busy bins, the per-device idle bins and the gaps by cause, the per-SM lanes. A tile is
a compact binary message (`encode_tile`): a JSON header and typed arrays (little-endian float64 times
as ns offsets from the run start, int32 rows and name ids, uint8 codes), so the page draws any window
from the tiles it holds and asks only for those it lacks.

Pure functions. Names go to the browser as plain strings: the canvas draws them with `fillText` and
tooltips set `textContent`, so no name is ever parsed as markup.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelab.analyses.results import Gap
from tracelab.model.kinds import EventKind, Flag
from tracelab.render.timeline.lod import LEVELS, LodView
from tracelab.render.timeline.rows import (  # noqa: F401 - the rows are part of this module's interface
    ROW_COLUMNS,
    SmRows,
    lane_depth_cap,
    lane_to_row,
    nesting_depth,
    sm_partitions_of,
    sm_row_table,
    stream_label,
    timeline_rows,
)

TILE_MAGIC = b"TLT1"
MIN_TILE_NS = 1_000  # the deepest level's tiles are at least this long

# ---------------------------------------------------------------------------------------------
# classes, colours and sizes: the one place the canvas takes them from (sent with the run's meta)

EVENT_CLASSES: dict[str, tuple[str, str]] = {  # class -> (legend name, colour)
    "kernel": ("kernels", "#1f77b4"),
    "comm": ("communication", "#9467bd"),
    "memcpy": ("memcpy", "#2ca02c"),
    "memset": ("memset", "#17becf"),
    "sync": ("GPU sync", "#7f7f7f"),
    "annotation": ("GPU annotations", "#bcbd22"),
    "api": ("API calls", "#ff7f0e"),
    "blocking": ("blocking API calls", "#d62728"),
    "cpu_op": ("CPU ops", "#c7c7c7"),
    "nvtx": ("NVTX ranges", "#e377c2"),
    "sm": ("SM activity", "#8c564b"),
    "other": ("other host events", "#aaaaaa"),
}
CLASS_CODES = {c: i for i, c in enumerate(EVENT_CLASSES)}
_THIN = {"cpu_op", "sm", "other"}
GPU_CLASSES = ("kernel", "comm", "memcpy", "memset")  # the ends of launch -> GPU arrows
# distinct from the event colours (API calls are orange, blocking calls red); "profiler" last: stored cause
# codes of the other causes keep their colour
IDLE_COLORS = {"host_sync": "#7f1d1d", "input_wait": "#0891b2", "launch_latency": "#eab308",
               "dependency_wait": "#7c3aed", "no_work": "#9ca3af", "unknown": "#65a30d", "profiler": "#db2777"}
CAUSES = tuple(IDLE_COLORS)
BIN_COLOR = "#4c6a92"
IDLE_ALL_COLOR = "#f2b8b5"
STEP_COLORS = ("#0f766e", "#5eead4")
CRITICAL_COLORS = {  # the critical path's categories (tracelab.analyses.ranks.path_model.CATEGORIES)
    "compute": "#16a34a", "comm": "#2563eb", "wait": "#dc2626", "host": "#f97316", "sync": "#7f1d1d", "idle": "#9ca3af",
}
BOX_PX = 12  # thickness of a full-height box
IDLE_ALL_PX = 9  # thickness of a fully idle stretch on the idle row
GAP_PX = 9
ROW_PX = 26  # one row unit
FLOW_MAX = 400  # arrows drawn only when at most this many launch -> GPU pairs are in view
FLOW_ZOOM = 4  # ... and only zoomed in: the window at most a quarter of the run (no lone arrow at whole-run zoom)
LABEL_MAX = 400  # names drawn inside at most this many boxes
LABEL_MIN_PX = 36  # boxes narrower than this carry no name
NAME_CHARS = 200  # names are sent cut in the middle to this length
MAX_GAPS = 2000  # more gaps of one cause in a tile are merged where they lie within a pixel


def level_px(full: float) -> list[float]:
    """Thickness (px) of an aggregated stretch at each busy level (eighths) for a full thickness:
    an 8 %-busy stretch is a thin line, a fully busy one a full box (never thinner than 1 px)."""
    return [max(1.0, full * lv) for lv in LEVELS]


def style() -> dict[str, Any]:
    """Colours, legend names and sizes for the canvas (JSON)."""
    return {
        "classes": [{"key": k, "legend": legend, "color": color, "thin": k in _THIN}
                    for k, (legend, color) in EVENT_CLASSES.items()],
        "gpu_classes": [CLASS_CODES[c] for c in GPU_CLASSES],
        "causes": [{"cause": c, "legend": f"idle ({c})", "color": IDLE_COLORS[c]} for c in CAUSES],
        "bin_color": BIN_COLOR, "idle_color": IDLE_ALL_COLOR, "step_colors": list(STEP_COLORS),
        "critical": [{"category": c, "legend": f"critical path: {c}", "color": col} for c, col in CRITICAL_COLORS.items()],
        "box_px": BOX_PX, "thin_px": 3, "gap_px": GAP_PX, "row_px": ROW_PX, "bin_px": level_px(BOX_PX),
        "idle_px": level_px(IDLE_ALL_PX), "sm_px": level_px(5), "label_min_px": LABEL_MIN_PX, "label_max": LABEL_MAX,
        "flow_max": FLOW_MAX, "flow_zoom": FLOW_ZOOM,
    }


def event_class(events: pd.DataFrame) -> np.ndarray:
    """The drawing class of each event (vectorized)."""
    if "kind" not in events.columns:
        return np.full(len(events), "other", dtype=object)
    kind = events["kind"].to_numpy()
    flags = events["flags"].to_numpy() if "flags" in events.columns else np.zeros(len(events), dtype=np.int16)
    api = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER])
    conds = [
        (kind == EventKind.KERNEL) & ((flags & Flag.COMM) != 0),
        kind == EventKind.KERNEL,
        kind == EventKind.MEMCPY,
        kind == EventKind.MEMSET,
        kind == EventKind.SYNC,
        kind == EventKind.GPU_ANNOTATION,
        api & ((flags & Flag.BLOCKING) != 0),
        api,
        kind == EventKind.CPU_OP,
        np.isin(kind, [EventKind.NVTX_RANGE, EventKind.NVTX_MARK]),
    ]
    choices = ["comm", "kernel", "memcpy", "memset", "sync", "annotation", "blocking", "api", "cpu_op", "nvtx"]
    return np.select(conds, choices, default="other").astype(object)


def class_codes(events: pd.DataFrame) -> np.ndarray:
    """`event_class` as uint8 codes (indices into EVENT_CLASSES)."""
    cls = event_class(events)
    out = np.full(len(cls), CLASS_CODES["other"], dtype=np.uint8)
    for name, code in CLASS_CODES.items():
        out[cls == name] = code
    return out


def short_name(s: str, limit: int = NAME_CHARS) -> str:
    """Long (templated) names cut in the middle (C++ template names differ at both ends)."""
    return s if len(s) <= limit else s[: limit * 2 // 3] + "…" + s[-(limit // 3) :]


# ---------------------------------------------------------------------------------------------
# gaps


def gaps_frame(gaps: Sequence[Gap]) -> pd.DataFrame:
    """Gaps as columns (rank, device, start, end, cause), in the analysis' order; the position of a gap
    in this frame is its id in tiles and hover requests (whose evidence tracelab.render.text.gap_evidence
    writes for that one gap)."""
    return pd.DataFrame({"rank": np.array([gp.rank for gp in gaps], dtype=np.int64),
                         "device": np.array([gp.device for gp in gaps], dtype=np.int64),
                         "start": np.array([gp.start_ns for gp in gaps], dtype=np.int64),
                         "end": np.array([gp.end_ns for gp in gaps], dtype=np.int64), "cause": [str(gp.cause) for gp in gaps]})


def gaps_in_window(gaps: pd.DataFrame, rows: pd.DataFrame, t0: int, t1: int, ns_per_px: float) -> pd.DataFrame:
    """The gaps of [t0, t1) on their device's idle row: columns row, start, end, cause (code into
    CAUSES), index (position in `gaps`, -1 for merged ones) and count. Gaps narrower than a pixel are
    widened to one (idle stays visible at whole-run zoom); more than MAX_GAPS of one cause are merged
    where they lie within a pixel of each other."""
    empty = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("row", "start", "end", "cause", "index", "count")})
    idle_rows = rows[rows["kind"] == "idle"]
    if not len(gaps) or not len(idle_rows):
        return empty
    key = (gaps["rank"].to_numpy() << 32) | (gaps["device"].to_numpy() & 0xFFFFFFFF)
    row_of = dict(
        zip(
            ((idle_rows["rank"].to_numpy(np.int64) << 32) | (idle_rows["device"].to_numpy(np.int64) & 0xFFFFFFFF)).tolist(),
            idle_rows["row"].astype(int).tolist(),
        )
    )
    uniq, inv = np.unique(key, return_inverse=True)
    row = np.array([row_of.get(int(k), -1) for k in uniq.tolist()], dtype=np.int64)[inv]  # per device
    st, en = gaps["start"].to_numpy(), gaps["end"].to_numpy()
    cause = pd.Categorical(gaps["cause"], categories=list(CAUSES)).codes.astype(np.int64)
    m = (en > t0) & (st < t1) & (row >= 0) & (cause >= 0)
    if not m.any():
        return empty
    index = np.flatnonzero(m)
    out = []
    for c in np.unique(cause[m]).tolist():  # per cause (five at most)
        idx = index[cause[index] == c]
        idx = idx[np.lexsort((st[idx], row[idx]))]
        s, e, r = st[idx], en[idx], row[idx]
        count = np.ones(len(idx), dtype=np.int64)
        if len(idx) > MAX_GAPS:  # merge neighbours within a pixel (vectorized)
            new = np.r_[True, (s[1:] - e[:-1] > ns_per_px) | (r[1:] != r[:-1])]
            first = np.flatnonzero(new)
            count = np.diff(np.r_[first, len(idx)])
            s, r, e = s[first], r[first], np.maximum.reduceat(e, first)
            idx = np.where(count > 1, -1, idx[first])
        out.append(pd.DataFrame({"row": r, "start": s, "end": e, "cause": c, "index": idx, "count": count}))
    return pd.concat(out, ignore_index=True)


# ---------------------------------------------------------------------------------------------
# tiles


class TileParts(msgspec.Struct, frozen=True):
    """What one tile holds. `view.items` need start, end, row, kind, flags, correlation, name and
    pos (the event's position in Timeline.events); `sm_view.items` start, end, row, name, kernel
    (position of its kernel, -1 for measured rows); `idle` is LodView.bins-like (busy = the idle
    fraction); `gaps` is `gaps_in_window`'s."""

    level: int
    index: int
    t0: int
    t1: int
    origin: int
    view: LodView
    sm_view: LodView | None
    idle: pd.DataFrame
    gaps: pd.DataFrame
    gaps_ready: bool


_DTYPES = {"<f8": "f64", "<f4": "f32", "<i4": "i32", "|u1": "u8"}


def pack(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """TILE_MAGIC, uint32 header length, the JSON header (with `arrays`: name, type, offset, length),
    zero padding to 8 bytes, then the arrays, each at an offset that is a multiple of 8 (so the
    browser views them as typed arrays without copying)."""
    specs, chunks, offset = [], [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        code = _DTYPES[a.dtype.str]
        data = a.tobytes()
        specs.append({"name": name, "type": code, "offset": offset, "length": int(a.size)})
        pad = (-len(data)) % 8
        chunks.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = json.dumps({**header, "arrays": specs}, ensure_ascii=False, separators=(",", ":")).encode()
    head += b" " * ((-(8 + len(head))) % 8)
    return TILE_MAGIC + struct.pack("<I", len(head)) + head + b"".join(chunks)


def unpack(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The inverse of `pack` (the browser does the same with DataView / typed arrays)."""
    if data[:4] != TILE_MAGIC:
        raise ValueError("not a timeline tile")
    (n,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    dtypes = {v: np.dtype(k) for k, v in _DTYPES.items()}
    arrays = {
        s["name"]: np.frombuffer(data, dtype=dtypes[s["type"]], count=s["length"], offset=base + s["offset"])
        for s in header["arrays"]
    }
    return header, arrays


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype="<f8")


def _i32(a: Any) -> np.ndarray:
    return np.clip(np.asarray(a, dtype=np.int64), -(2**31), 2**31 - 1).astype("<i4")


def _items(parts: TileParts, strings: Sequence[str]) -> tuple[dict[str, np.ndarray], set[int]]:
    it = parts.view.items
    n = len(it)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("start", "end", "row", "cls", "name", "corr", "launch", "pos")}

    def add(start, end, row, cls, name, corr, launch, pos) -> None:
        for k, v in zip(cols, (start, end, row, cls, name, corr, launch, pos)):
            cols[k].append(v)

    if n:
        flags = it["flags"].to_numpy() if "flags" in it.columns else np.zeros(n, np.int64)
        kind = it["kind"].to_numpy()
        launch = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER]) & ((flags & Flag.LAUNCH) != 0)
        add(it["start"].to_numpy(), it["end"].to_numpy(), it["row"].to_numpy(), class_codes(it), it["name"].to_numpy(),
            it["correlation"].to_numpy(), launch, it["pos"].to_numpy())
    if parts.sm_view is not None and len(parts.sm_view.items):
        sm = parts.sm_view.items
        m = len(sm)
        add(sm["start"].to_numpy(), sm["end"].to_numpy(), sm["row"].to_numpy(), np.full(m, CLASS_CODES["sm"]),
            sm["name"].to_numpy(), np.full(m, -1), np.zeros(m, bool), sm["kernel"].to_numpy())
    if not cols["start"]:
        empty = np.zeros(0, np.int64)
        add(empty, empty, empty, empty, empty, empty, empty.astype(bool), empty)
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    names = cat["name"].astype(np.int64)
    used = {int(i) for i in np.unique(names[(names >= 0) & (names < len(strings))]).tolist()}
    out = {
        "i.start": _f64(cat["start"] - parts.origin),
        "i.end": _f64(cat["end"] - parts.origin),
        "i.row": _i32(cat["row"]),
        "i.cls": cat["cls"].astype(np.uint8),
        "i.name": _i32(np.where((names >= 0) & (names < len(strings)), names, -1)),
        "i.corr": _f64(cat["corr"]),
        "i.launch": cat["launch"].astype(np.uint8),
        "i.pos": _i32(cat["pos"]),
    }
    return out, used


def _bins(parts: TileParts) -> dict[str, np.ndarray]:
    frames = [(parts.view.bins, 0), (parts.idle, 1)]
    if parts.sm_view is not None:
        frames.append((parts.sm_view.bins, 2))
    b = pd.concat([f.assign(kind=k) for f, k in frames if len(f)], ignore_index=True) if any(
        len(f) for f, _ in frames
    ) else pd.DataFrame({c: np.zeros(0, np.int64) for c in ("row", "start", "end", "count", "busy", "level", "kind")})
    return {
        "b.start": _f64(b["start"].to_numpy() - parts.origin),
        "b.end": _f64(b["end"].to_numpy() - parts.origin),
        "b.row": _i32(b["row"]),
        "b.count": _i32(b["count"]),
        "b.busy": np.asarray(b["busy"], dtype="<f4"),
        "b.level": np.asarray(b["level"], dtype=np.uint8),
        "b.kind": np.asarray(b["kind"], dtype=np.uint8),
    }


def encode_tile(parts: TileParts, strings: Sequence[str]) -> bytes:
    """One tile as bytes (`pack`): items (i.*), bins (b.*, kind: 0 busy bins, 1 all-idle bins, 2 SM-lane
    bins), gaps (g.*) and, in the
    header, the names of the items (id -> name, cut to NAME_CHARS)."""
    items, used = _items(parts, strings)
    g = parts.gaps
    arrays = {
        **items,
        **_bins(parts),
        "g.start": _f64(g["start"].to_numpy() - parts.origin),
        "g.end": _f64(g["end"].to_numpy() - parts.origin),
        "g.row": _i32(g["row"]),
        "g.cause": np.asarray(g["cause"], dtype=np.uint8),
        "g.index": _i32(g["index"]),
        "g.count": _i32(g["count"]),
    }
    header = {
        "level": parts.level, "index": parts.index, "t0": parts.t0 - parts.origin, "t1": parts.t1 - parts.origin,
        "events_in_window": int(parts.view.events_in_window), "individual": len(parts.view.items),
        "aggregated": len(parts.view.bins), "sm_drawn": int(parts.sm_view.n_drawn) if parts.sm_view is not None else 0,
        "gaps_ready": bool(parts.gaps_ready), "names": {str(i): short_name(strings[i]) for i in sorted(used)},
    }
    return pack(header, arrays)
