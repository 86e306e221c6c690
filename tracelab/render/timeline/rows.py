"""The timeline's rows, top to bottom, per rank: for each GPU a header, an idle lane, one row per stream
(the same stream never in two rows, whatever context records it), GPU annotations, per-SM bands grouped
by green-context partition; then a steps lane, NVTX ranges nested by depth (one row per level) and host
threads. Pure functions over the store's lane table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelab.model.kinds import LaneKind

ROW_COLUMNS = ("row", "lane", "depth", "sm", "sm_last", "rank", "device", "kind", "label", "group", "height")
MAX_SM_ROWS = 16
MAX_NVTX_DEPTH = 8  # NVTX rows per lane; deeper ranges are drawn on the last one


def stream_label(stream: int) -> str:
    """A GPU lane's name: "stream 7", or the lane of device-wide operations that name no stream
    (context / device synchronize: CUPTI records them on stream -1)."""
    return f"stream {stream}" if stream >= 0 else "device-wide syncs (no stream)"


class SmRows(msgspec.Struct, frozen=True):
    """What the per-SM rows of one device need: SM count, "measured"|"estimated", and its partitions
    as (green context, first SM, last SM), disjoint and sorted (empty: the device as one block)."""

    n_sms: int
    source: str
    partitions: tuple[tuple[int, int, int], ...] = ()
    # green context of each SM id (-1: outside every green context or unseen), for partitions whose SMs
    # interleave (measured lanes: the hardware hands a partition SMs 4, 5, 8, ...); () when not known
    sm_partition: tuple[int, ...] = ()


def sm_partitions_of(frame: pd.DataFrame) -> tuple[tuple[int, int, int], ...]:
    """(green context, first SM, last SM) of each partition seen in an SM-lane frame, when they are
    disjoint; () when they overlap (then the device is shown as one block)."""
    if frame is None or len(frame) == 0 or "green_context" not in frame.columns:
        return ()
    g = frame.groupby("green_context").agg(lo=("sm_first", "min"), hi=("sm_last", "max")).reset_index()
    g = g.sort_values("lo")
    lo, hi = g["lo"].to_numpy(), g["hi"].to_numpy()
    if len(g) < 2 or (lo[1:] <= hi[:-1]).any():
        return ()
    return tuple((int(a), int(b), int(c)) for a, b, c in zip(g["green_context"], lo, hi))


def sm_partition_map(frame: pd.DataFrame, n_sms: int) -> tuple[int, ...]:
    """The green context of each SM id seen in an SM-lane frame (-1 where none is seen); () without
    green contexts. Vectorized: each lane row marks its SM range."""
    if frame is None or len(frame) == 0 or "green_context" not in frame.columns or n_sms <= 0:
        return ()
    gc = frame["green_context"].to_numpy(dtype=np.int64)
    if not (gc >= 0).any():
        return ()
    lo = np.clip(frame["sm_first"].to_numpy(dtype=np.int64), 0, n_sms - 1)
    hi = np.clip(frame["sm_last"].to_numpy(dtype=np.int64), 0, n_sms - 1)
    counts = np.maximum(hi - lo + 1, 0)
    sms = np.repeat(lo, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    out = np.full(n_sms, -1, dtype=np.int64)
    out[sms] = np.repeat(gc, counts)
    return tuple(out.tolist())


def _partition_words(ids: np.ndarray) -> str:
    """Which green contexts a band's SMs belong to: 'green ctx 3', or 'green ctx 3 ×7, 2 ×2'."""
    known = ids[ids >= 0]
    if not known.size:
        return "outside green ctxs"
    g, n = np.unique(known, return_counts=True)
    order = np.argsort(-n, kind="stable")
    if g.size == 1 and known.size == ids.size:
        return f"green ctx {int(g[0])}"
    return "green ctx " + ", ".join(f"{int(g[i])} ×{int(n[i])}" for i in order)


def _sm_bands(
    n_sms: int, partitions: tuple[tuple[int, int, int], ...], sm_partition: tuple[int, ...] = ()
) -> list[tuple[int, int, str]]:
    """(first SM, last SM, label) of each SM row: at most ~MAX_SM_ROWS bands of adjacent SMs, each
    partition with its own bands, every band labelled; where partitions interleave (no contiguous
    blocks), each band says which partitions its SMs belong to."""
    if not partitions and len(sm_partition) == n_sms:
        owner = np.asarray(sm_partition)
        out = []
        for b, e, span in _sm_bands(n_sms, ()):
            out.append((b, e, f"{span} · {_partition_words(owner[b:e + 1])}"))
        return out
    parts = list(partitions) or [(-2, 0, n_sms - 1)]
    out = []
    for gc, lo, hi in parts:
        size = hi - lo + 1
        n_bands = max(1, min(size, round(MAX_SM_ROWS * size / max(n_sms, 1))))
        k = -(-size // n_bands)
        for b in range(lo, hi + 1, k):
            e = min(hi, b + k - 1)
            span = f"SM {b}" if b == e else f"SMs {b}–{e}"
            if b == lo and gc != -2:
                head = f"green ctx {gc}" if gc >= 0 else "outside green ctxs"
                span = f"{head} · {span}"
            out.append((b, e, span))
    return out


def timeline_rows(
    lanes: pd.DataFrame,
    strings: Sequence[str],
    *,
    device_names: Mapping[tuple[int, int], str] | None = None,
    sm_rows: Mapping[tuple[int, int], SmRows | tuple] | None = None,
    show: Sequence[str] = ("stream", "sm", "nvtx", "host"),
    nvtx_depths: Mapping[int, int] | None = None,
    step_ranks: Sequence[int] = (),
) -> pd.DataFrame:
    """The rows of the timeline (see the module docstring). `lane` is the lane drawn on the row (-1
    on headers, idle, SM and steps rows); a stream drawn from several lanes (contexts) lists them all
    in `lane_to_row`'s table. `nvtx_depths[lane]` = nesting levels of an NVTX lane (1 when absent).
    `kind` is one of header/idle/stream/annotation/sm/steps/critical/nvtx/host (critical: the rank's critical
    path of each step, drawn like the steps)."""
    device_names = device_names or {}
    sm = {k: (v if isinstance(v, SmRows) else SmRows(int(v[0]), str(v[1]))) for k, v in (sm_rows or {}).items()}
    nvtx_depths = nvtx_depths or {}
    out: list[dict[str, Any]] = []
    merged: dict[int, int] = {}  # lane -> the lane whose row it shares (same stream, other context)

    def add(kind: str, label: str, group: str, **kw: Any) -> None:
        row = {"lane": -1, "depth": 0, "sm": -1, "sm_last": -1, "rank": -1, "device": -1, "height": 1.0}
        row.update(kw)
        out.append({"kind": kind, "label": label, "group": group, **row})

    ranks = sorted(set(lanes["rank"].tolist()) | {r for r, _ in sm})
    for rank in ranks:
        of_rank = lanes[lanes["rank"] == rank]
        gpu_side = of_rank[
            np.isin(of_rank["lane_kind"], [int(LaneKind.GPU_STREAM), int(LaneKind.GPU_ANNOTATION)])
        ]
        devices = sorted(set(gpu_side["device"].tolist()) | {d for r, d in sm if r == rank})
        for device in devices:
            name = device_names.get((rank, device), "")
            group = f"rank {rank} · GPU {device}" + (f" · {name}" if name else "")
            add("header", group, group, rank=rank, device=device)
            add("idle", "idle (gaps by cause)", group, rank=rank, device=device, height=0.7)
            dl = gpu_side[gpu_side["device"] == device]
            if "stream" in show:
                _stream_rows(dl, group, rank, device, add, merged)
            if "sm" in show and (rank, device) in sm:
                s = sm[(rank, device)]
                for i, (lo, hi, label) in enumerate(_sm_bands(s.n_sms, s.partitions, s.sm_partition)):
                    label = f"{label} ({s.source})" if i == 0 else label
                    add("sm", label, group, sm=lo, sm_last=hi, rank=rank, device=device, height=0.5)
        host = of_rank[np.isin(of_rank["lane_kind"], [int(LaneKind.NVTX), int(LaneKind.HOST_THREAD)])]
        if len(host) and ("nvtx" in show or "host" in show):
            group = f"rank {rank} · host"
            add("header", group, group, rank=rank)
            if rank in step_ranks:
                add("steps", "steps", group, rank=rank)
                add("critical", "critical path", group, rank=rank, height=0.7)
            for r in host.sort_values(["pid", "tid", "lane_kind", "category"]).itertuples(index=False):
                if int(r.lane_kind) == int(LaneKind.NVTX):
                    if "nvtx" not in show:
                        continue
                    dom = strings[r.category] if 0 <= r.category < len(strings) else ""
                    label = f"NVTX {dom} · tid {r.tid}".replace("  ", " ")
                    for d in range(max(1, min(int(nvtx_depths.get(int(r.lane), 1)), MAX_NVTX_DEPTH))):
                        add("nvtx", label if d == 0 else f"  ↳ depth {d}", group, lane=int(r.lane), depth=d, rank=rank)
                elif "host" in show:
                    add("host", f"pid {r.pid} · tid {r.tid}", group, lane=int(r.lane), rank=rank)
    rows = pd.DataFrame(out, columns=[c for c in ROW_COLUMNS if c != "row"])
    rows.insert(0, "row", np.arange(len(rows), dtype=np.int32))
    heights = rows["height"].to_numpy(dtype=float)
    rows["y"] = np.cumsum(heights) - heights / 2 if len(rows) else np.zeros(0)
    rows.attrs["stream_lanes"] = merged
    return rows


def _stream_rows(dl: pd.DataFrame, group: str, rank: int, device: int, add, merged: dict[int, int]) -> None:
    """One row per stream of a device (lanes of the same stream in several contexts share it),
    then one per GPU annotation stream. Context ids are named only when the device has several."""
    streams = dl[dl["lane_kind"] == int(LaneKind.GPU_STREAM)]
    n_ctx = streams.loc[streams["context"] >= 0, "context"].nunique()
    for stream, part in streams.groupby("stream", sort=True):
        gcs = sorted({int(g) for g in part["green_context"] if g >= 0})
        label = stream_label(int(stream))
        if n_ctx > 1 and int(stream) >= 0:
            label += " · ctx " + ",".join(str(int(c)) for c in sorted(set(part["context"])) if c >= 0)
        if gcs:
            label += " · green ctx " + ",".join(map(str, gcs))
        lanes = part["lane"].astype(int).tolist()
        add("stream", label, group, lane=lanes[0], rank=rank, device=device)
        for ln in lanes[1:]:
            merged[ln] = lanes[0]
    for r in dl[dl["lane_kind"] == int(LaneKind.GPU_ANNOTATION)].sort_values("stream").itertuples(index=False):
        add("annotation", f"annotations · stream {r.stream}", group, lane=int(r.lane), rank=rank, device=device)


def lane_to_row(rows: pd.DataFrame, n_lanes: int) -> np.ndarray:
    """Array mapping lane id -> row (-1 for lanes not shown); NVTX lanes map to their depth-0 row."""
    table = np.full(max(n_lanes, 1), -1, dtype=np.int32)
    shown = rows[(rows["lane"] >= 0) & (rows["depth"] == 0)]
    table[shown["lane"].to_numpy()] = shown["row"].to_numpy()
    for merged, first in rows.attrs.get("stream_lanes", {}).items():
        if merged < len(table):
            table[merged] = table[first]
    return table


def lane_depth_cap(rows: pd.DataFrame, n_lanes: int) -> np.ndarray:
    """Per lane, the deepest row index it has (0 for all but nested NVTX lanes)."""
    cap = np.zeros(max(n_lanes, 1), dtype=np.int32)
    nv = rows[rows["kind"] == "nvtx"]
    if len(nv):
        g = nv.groupby("lane")["depth"].max()
        cap[g.index.to_numpy()] = g.to_numpy()
    return cap


def sm_row_table(rows: pd.DataFrame, rank: int, device: int, n_sms: int) -> np.ndarray:
    """SM id -> row of its band for one device (-1 where none)."""
    table = np.full(max(n_sms, 1), -1, dtype=np.int32)
    band = rows[(rows["kind"] == "sm") & (rows["rank"] == rank) & (rows["device"] == device)]
    for r in band.itertuples(index=False):  # one per band (<= ~20)
        table[int(r.sm) : int(r.sm_last) + 1] = int(r.row)
    return table


def nesting_depth(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For intervals grouped by lane, how many intervals of the same lane enclose each one (0 = top
    level). Vectorized: per interval, the intervals of its lane that began before it minus those that
    ended by its start."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    lane = lane.astype(np.int64)
    base = int(start.min())
    s, e = start.astype(np.int64) - base, np.maximum(end, start).astype(np.int64) - base
    order = np.lexsort((-e, s, lane))
    sorted_lane = lane[order]
    prior = np.empty(n, dtype=np.int64)
    prior[order] = np.arange(n) - np.searchsorted(sorted_lane, sorted_lane, side="left")
    lane_key = np.argsort(np.argsort(np.unique(lane)))  # dense lane ranks
    uniq = np.unique(lane)
    dense = lane_key[np.searchsorted(uniq, lane)].astype(np.int64)
    shift = 1 << 42
    end_keys = np.sort(dense * shift + e)
    ended = np.searchsorted(end_keys, dense * shift + s, side="right") - np.searchsorted(
        end_keys, dense * shift, side="left"
    )
    ended -= (e == s).astype(np.int64)  # a zero-length interval must not count itself as ended
    return np.maximum(prior - ended, 0).astype(np.int32)
