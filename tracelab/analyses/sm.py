"""Per-SM lanes, SM utilization and green-context partitions (DESIGN.md, "Per-SM lanes").

Two sources, always labelled:

- **measured**: `Timeline.sm_blocks` (probe-instrumented kernels record `%smid` and `%globaltimer` per
  block). Blocks are merged into busy intervals per SM. Kernel events of the same device without
  probe blocks (opaque library kernels, launches the workload did not probe) are added as
  estimates (`measured` False on their lane rows).
- **estimated**: for every kernel, from its grid, the SM count of its partition and the occupancy
  calculation (`occupancy.py`): a kernel of G blocks on a partition of S SMs occupies min(G, S) SMs
  over its whole duration (the block scheduler spreads blocks over SMs before stacking them; a
  multi-wave kernel, G > B x S with B blocks per SM, keeps all S busy: wave tails are not modelled —
  persistent GEMMs hand out their tiles dynamically). Unknown grids occupy the whole partition.
  W = ceil(G / (B x S)) waves is reported by the green-context explanation. Checked against the
  probes on an H200 (`estimate_agreement`, tests/test_sm_recorded.py): +0.7% to +8.9% SM-time for
  kernels that run alone on their partition; kernels running at the same time on one partition
  share SMs in a way no trace records (8 streams of 16-block kernels ran packed 4 blocks per SM on
  32-64 SMs, not on 128), so there the estimate is an upper bound (+9% to +253%).

Partitions: each green context of a device (SM count from `ContextInfo.sm_count`, else the distinct
SMs measured, else the SMs no other green context holds) plus partition -1, the work outside every
green context (the SMs no green context holds; when green contexts hold every SM, the whole device).

Measured lanes use the SM ids the probes recorded (a partition's ids need not be contiguous); estimates
of uninstrumented kernels in a measured run are placed on their partition's measured ids.
Estimated SM ids (no profiler says which SMs a kernel used): green contexts get contiguous ranges in
order of green-context id starting at SM 0, partition -1 the remaining ids. Within a partition a
kernel starts at the SM after those of the kernels already running there (wrapping around), so
concurrent kernels stack. SM-time is computed from levels, not from the drawn ids: at any moment a
partition's busy SMs = min(its SM count, sum of the SMs its running kernels occupy) and the device's
= min(device SMs, sum over partitions).

busy fraction = busy SM-time / (SM count x span), span = first start to last end of the device's GPU
activity (kernels, memcpys, memsets), as in `analyze`.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from tracelab.analyses.occupancy import DeviceLimits, device_sm_count, limits_for, occupancy
from tracelab.analyses.results import Finding, SmPartition, SmSummary
from tracelab.model import GPU_ACTIVITY_KINDS, EventKind, Timeline

NONE_PARTITION = -1  # green_context value of work outside every green context

SM_LANE_COLUMNS: dict[str, str] = {
    "sm_first": "int32",  # first SM id of the interval (inclusive)
    "sm_last": "int32",  # last SM id (inclusive); == sm_first for measured rows
    "start": "int64",
    "end": "int64",
    "green_context": "int64",  # -1 = outside every green context
    "name": "int32",  # kernel name id (Timeline.strings)
    "measured": "bool",  # True: probe data; False: estimated
    "kernel": "int64",  # row of the kernel in Timeline.events; -1 for measured rows
}

IDLE_PARTITION_THRESHOLD = 0.5  # busy fraction below which a green-context partition is "idle"
IDLE_PARTITION_CRITICAL = 0.1

LaneSource = Literal["measured", "estimated", "none"]


# ---------------------------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partition:
    green_context: int  # -1 = outside every green context
    sm_count: int
    sm_ids: tuple[int, ...]  # the SM ids lanes use for it (estimated layout, or measured ids)
    configured: bool  # sm_count came from the trace's context information
    overlaps: bool = False  # partition -1 spanning the whole device (green contexts hold every SM)


@dataclass(frozen=True)
class _Device:
    rank: int
    device: int
    name: str
    sm_count: int
    kernels: pd.DataFrame  # the device's kernel events (index = row in Timeline.events)
    blocks: pd.DataFrame | None  # measured blocks of the device, or None
    span: tuple[int, int]  # GPU activity span (0, 0 when none)


def _device(tl: Timeline, rank: int, device: int) -> _Device:
    ev = tl.events
    on_dev = (ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() == device)
    kind = ev["kind"].to_numpy()
    gpu = on_dev & np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS])
    kernels = ev[on_dev & (kind == int(EventKind.KERNEL))]
    blocks = None
    if tl.sm_blocks is not None and len(tl.sm_blocks):
        b = tl.sm_blocks
        sel = (b["rank"].to_numpy() == rank) & (b["device"].to_numpy() == device)
        if sel.any():
            blocks = b[sel]
    if gpu.any():
        span = (int(ev["start"].to_numpy()[gpu].min()), int(ev["end"].to_numpy()[gpu].max()))
    elif blocks is not None:
        span = (int(blocks["start"].min()), int(blocks["end"].max()))
    else:
        span = (0, 0)
    info = tl.device_info(rank, device)
    sm_count = device_sm_count(info)
    if sm_count <= 0 and blocks is not None:
        sm_count = int(blocks["sm"].max()) + 1
    return _Device(rank, device, info.name if info else "", sm_count, kernels, blocks, span)


def _partitions(tl: Timeline, dev: _Device) -> list[Partition]:
    """Green-context partitions of the device (sorted by id), then partition -1 when it has work
    or SMs of its own."""
    configured: dict[int, int] = {}
    for c in tl.contexts:
        if c.rank == dev.rank and c.device == dev.device and c.is_green and c.green_context >= 0:
            configured[c.green_context] = max(configured.get(c.green_context, 0), c.sm_count)
    ids = set(configured)
    ids.update(int(g) for g in np.unique(dev.kernels["green_context"].to_numpy()) if g >= 0)
    measured_sms: dict[int, np.ndarray] = {}
    if dev.blocks is not None:
        b = dev.blocks
        for g, sms in b.groupby("green_context")["sm"]:
            measured_sms[int(g)] = np.unique(sms.to_numpy())
        ids.update(g for g in measured_sms if g >= 0)
    sm_total = dev.sm_count
    sizes: dict[int, tuple[int, bool]] = {}
    for g in sorted(ids):
        if configured.get(g, 0) > 0:
            sizes[g] = (configured[g], True)
        elif g in measured_sms:
            sizes[g] = (len(measured_sms[g]), False)
    unknown = [g for g in sorted(ids) if g not in sizes]
    left = max(sm_total - sum(s for s, _ in sizes.values()), 0)
    for g in unknown:  # no size anywhere: share what no other green context holds
        sizes[g] = (max(left // max(len(unknown), 1), 1), False)
    remainder = max(sm_total - sum(s for s, _ in sizes.values()), 0)

    has_none_work = bool((dev.kernels["green_context"].to_numpy() < 0).any()) or (
        NONE_PARTITION in measured_sms
    )
    parts: list[Partition] = []
    if dev.blocks is not None:  # measured: the SM ids the probe saw, topped up with unused ids
        used = {int(x) for g in sizes for x in measured_sms.get(g, ())}
        free = [x for x in range(sm_total) if x not in used]
        for g in sorted(sizes):
            n, conf = sizes[g]
            seen = sorted(int(x) for x in measured_sms.get(g, ()))
            extra, free = free[: max(n - len(seen), 0)], free[max(n - len(seen), 0) :]
            parts.append(Partition(g, n, tuple(sorted(seen + extra)), conf))
        if not ids:
            parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True))
        elif remainder > 0:
            parts.append(Partition(NONE_PARTITION, remainder, tuple(free[:remainder]), True))
        elif has_none_work:
            parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True, overlaps=True))
        return parts
    base = 0
    for g in sorted(sizes):
        n, conf = sizes[g]
        parts.append(Partition(g, n, tuple(range(base, base + n)), conf))
        base += n
    if not ids:
        parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True))
    elif remainder > 0 or has_none_work:
        if remainder > 0:
            parts.append(Partition(NONE_PARTITION, remainder, tuple(range(base, base + remainder)), True))
        else:
            parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True, overlaps=True))
    return parts


# ---------------------------------------------------------------------------------------------
# lanes
# ---------------------------------------------------------------------------------------------
def _empty_lanes() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in SM_LANE_COLUMNS.items()})


def _merge_intervals(keys: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Union of intervals per key (vectorized). Returns (first row index of each merged interval,
    merged start, merged end) in key order."""
    n = len(start)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    order = np.lexsort((start, *reversed(keys)))
    s = start[order]
    e = end[order]
    ks = [k[order] for k in keys]
    new_key = np.zeros(n, dtype=bool)
    new_key[0] = True
    for k in ks:
        new_key[1:] |= k[1:] != k[:-1]
    # running max of end within a key group
    grp = np.cumsum(new_key) - 1
    running = pd.Series(e).groupby(grp).cummax().to_numpy()
    new = new_key.copy()
    new[1:] |= s[1:] > running[:-1]
    first = np.flatnonzero(new)
    m_start = s[first]
    m_end = np.maximum.reduceat(e, first)
    return order[first], m_start, m_end


def _instrumented(dev: _Device) -> np.ndarray:
    """Which kernel events of the device have probe blocks: a block of the same name that starts
    within the event (the probe aligns each invocation's first block to its kernel's start).
    Workloads may probe only some launches of a kernel; the others are estimated."""
    k = dev.kernels
    out = np.zeros(len(k), dtype=bool)
    if dev.blocks is None or not len(k):
        return out
    k_name = k["name"].to_numpy()
    b_name = dev.blocks["name"].to_numpy()
    b_start = dev.blocks["start"].to_numpy()
    for nid in np.unique(b_name):  # one pass per probed kernel name
        rows = np.flatnonzero(k_name == nid)
        if not len(rows):
            continue
        order = np.argsort(k["start"].to_numpy()[rows], kind="stable")
        rows = rows[order]
        ks = k["start"].to_numpy()[rows]
        ke = k["end"].to_numpy()[rows]
        bs = b_start[b_name == nid]
        idx = np.searchsorted(ks, bs, side="right") - 1
        hit = idx >= 0
        hit[hit] = bs[hit] <= ke[idx[hit]]
        out[rows[np.unique(idx[hit])]] = True
    return out


def _measured_rows(dev: _Device) -> pd.DataFrame:
    b = dev.blocks
    assert b is not None
    sm = b["sm"].to_numpy().astype(np.int64)
    gc = b["green_context"].to_numpy().astype(np.int64)
    name = b["name"].to_numpy().astype(np.int64)
    first, ms, me = _merge_intervals(
        [sm, gc, name], b["start"].to_numpy().astype(np.int64), b["end"].to_numpy().astype(np.int64)
    )
    return pd.DataFrame(
        {
            "sm_first": sm[first].astype(np.int32),
            "sm_last": sm[first].astype(np.int32),
            "start": ms,
            "end": me,
            "green_context": gc[first],
            "name": name[first].astype(np.int32),
            "measured": np.ones(len(first), dtype=bool),
            "kernel": np.full(len(first), -1, dtype=np.int64),
        }
    )


@dataclass(frozen=True)
class _Estimate:
    kernel: np.ndarray  # event row
    part: np.ndarray  # index into the partition list
    start: np.ndarray
    end: np.ndarray
    sms: np.ndarray  # SMs occupied over the whole duration: min(grid, partition SMs)
    waves: np.ndarray  # ceil(grid / (blocks per SM x partition SMs)); 1 when the grid is unknown
    blocks_per_sm: np.ndarray
    name: np.ndarray
    green_context: np.ndarray


def _estimate(tl: Timeline, dev: _Device, parts: list[Partition], kernels: pd.DataFrame) -> _Estimate:
    k = kernels
    gc = k["green_context"].to_numpy().astype(np.int64)
    part_ids = np.array([p.green_context for p in parts], dtype=np.int64)
    caps = np.array([max(p.sm_count, 1) for p in parts], dtype=np.int64)
    # partition index of each kernel: its green context, else partition -1 (always last when present)
    lookup = {g: i for i, g in enumerate(part_ids)}
    none_idx = lookup.get(NONE_PARTITION, len(parts) - 1)
    uniq, inv = np.unique(gc, return_inverse=True)
    part = np.array([lookup.get(int(g), none_idx) for g in uniq], dtype=np.int64)[inv]
    cap = caps[part] if len(part) else np.zeros(0, dtype=np.int64)
    # a non-green context may itself be limited (ContextInfo.sm_count)
    ctx_caps = {
        c.context: c.sm_count
        for c in tl.contexts
        if c.rank == dev.rank and c.device == dev.device and not c.is_green and c.sm_count > 0
    }
    if ctx_caps:
        cu, cinv = np.unique(k["context"].to_numpy(), return_inverse=True)
        cc = np.array([ctx_caps.get(int(c), 1 << 30) for c in cu], dtype=np.int64)[cinv]
        cap = np.where(gc < 0, np.minimum(cap, cc), cap)

    def _prod(cols: list[str]) -> np.ndarray:
        """x * y * z; unknown when x is unknown, y / z unknown count as 1."""
        x, y, z = (k[c].to_numpy().astype(np.int64) for c in cols)
        return np.where(x > 0, x * np.maximum(y, 1) * np.maximum(z, 1), -1)

    grid = _prod(["grid_x", "grid_y", "grid_z"])
    threads = _prod(["block_x", "block_y", "block_z"])
    limits = limits_for(tl.device_info(dev.rank, dev.device))
    bps = np.where(threads > 0, np.maximum(_blocks_per_sm(k, threads, limits), 1), 1).astype(np.int64)
    known = grid > 0
    waves = np.where(known, -(-grid // np.maximum(bps * cap, 1)), 1)
    sms = np.where(known, np.minimum(grid, cap), cap)
    return _Estimate(
        kernel=k.index.to_numpy().astype(np.int64),
        part=part,
        start=k["start"].to_numpy().astype(np.int64),
        end=k["end"].to_numpy().astype(np.int64),
        sms=sms.astype(np.int64),
        waves=waves.astype(np.int64),
        blocks_per_sm=bps,
        name=k["name"].to_numpy().astype(np.int32),
        green_context=gc,
    )


def _blocks_per_sm(k: pd.DataFrame, threads: np.ndarray, limits: DeviceLimits) -> np.ndarray:
    """Occupancy once per distinct (threads, registers, shared memory) configuration."""
    regs = np.clip(k["registers"].to_numpy().astype(np.int64), -1, 1 << 10)
    smem = np.clip(k["shared_mem"].to_numpy().astype(np.int64), -1, (1 << 30) - 2)
    thr = np.clip(np.where(threads > 0, threads, limits.warp_size), 0, (1 << 20) - 1)
    key = (thr << 42) | ((regs + 1) << 31) | (smem + 1)
    codes, uniq = pd.factorize(key)
    u_thr, u_regs, u_smem = uniq >> 42, ((uniq >> 31) & ((1 << 11) - 1)) - 1, (uniq & ((1 << 31) - 1)) - 1
    return occupancy(u_thr, u_regs, u_smem, limits).blocks_per_sm[codes]


def _stack_offsets(est: _Estimate, n_parts: int, caps: np.ndarray) -> np.ndarray:
    """SMs already occupied in the kernel's partition when it starts (mod the partition size)."""
    n = len(est.start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = est.sms
    times = np.concatenate([est.start, est.end])
    is_start = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(n, dtype=np.int8)])
    part = np.concatenate([est.part, est.part])
    delta = np.concatenate([width, -width])
    idx = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((idx, is_start, times, part))  # per partition, by time, ends before starts
    level = np.cumsum(delta[order])  # each partition's deltas sum to 0, so groups do not leak
    before = level - delta[order]
    offs = np.empty(n, dtype=np.int64)
    starts_sorted = is_start[order] == 1
    offs[idx[order][starts_sorted]] = before[starts_sorted]
    return offs % caps[est.part]


def _estimated_rows(est: _Estimate, parts: list[Partition]) -> pd.DataFrame:
    n = len(est.start)
    if n == 0:
        return _empty_lanes()
    caps = np.array([max(p.sm_count, 1) for p in parts], dtype=np.int64)
    off = _stack_offsets(est, len(parts), caps)
    # partition-relative SM positions [lo, lo + sms), wrapping around the partition end
    sel = np.flatnonzero(est.sms > 0)
    cap = caps[est.part[sel]]
    lo = off[sel] % cap
    hi = lo + est.sms[sel]  # exclusive
    wrap = hi > cap
    lo2 = np.concatenate([lo, np.zeros(int(wrap.sum()), dtype=np.int64)])
    hi2 = np.concatenate([np.minimum(hi, cap), (hi - cap)[wrap]])
    sel2 = np.concatenate([sel, sel[wrap]])
    # partition-relative positions -> SM ids (contiguous runs of the partition's id list)
    pidx = est.part[sel2]
    rows = _map_positions(pidx, lo2, hi2, parts)
    r_sel = sel2[rows["row"]]
    return pd.DataFrame(
        {
            "sm_first": rows["sm_first"].astype(np.int32),
            "sm_last": rows["sm_last"].astype(np.int32),
            "start": est.start[r_sel],
            "end": est.end[r_sel],
            "green_context": np.array([p.green_context for p in parts], dtype=np.int64)[est.part[r_sel]],
            "name": est.name[r_sel],
            "measured": np.zeros(len(r_sel), dtype=bool),
            "kernel": est.kernel[r_sel],
        }
    )


def _map_positions(
    pidx: np.ndarray, lo: np.ndarray, hi: np.ndarray, parts: list[Partition]
) -> dict[str, np.ndarray]:
    """Turn [lo, hi) positions within each row's partition into SM-id ranges. Partitions whose ids
    are one contiguous run map directly; others are expanded and re-compressed into runs."""
    contiguous = np.array(
        [len(p.sm_ids) > 0 and p.sm_ids[-1] - p.sm_ids[0] == len(p.sm_ids) - 1 for p in parts], dtype=bool
    )
    base = np.array([p.sm_ids[0] if p.sm_ids else 0 for p in parts], dtype=np.int64)
    simple = contiguous[pidx]
    out_row = [np.flatnonzero(simple)]
    out_first = [base[pidx[simple]] + lo[simple]]
    out_last = [base[pidx[simple]] + hi[simple] - 1]
    hard = np.flatnonzero(~simple)
    if len(hard):
        lens = hi[hard] - lo[hard]
        rows = np.repeat(hard, lens)
        pos = np.repeat(lo[hard], lens) + (np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens))
        table_len = max((len(p.sm_ids) for p in parts), default=1) or 1
        table = np.zeros((len(parts), table_len), dtype=np.int64)
        for i, p in enumerate(parts):  # one row per partition
            ids = np.array(p.sm_ids or (0,), dtype=np.int64)
            table[i, : len(ids)] = ids
            table[i, len(ids) :] = ids[-1]
        sms = table[pidx[rows], np.minimum(pos, table_len - 1)]
        order = np.lexsort((sms, rows))
        rows, sms = rows[order], sms[order]
        brk = np.ones(len(rows), dtype=bool)
        brk[1:] = (rows[1:] != rows[:-1]) | (sms[1:] != sms[:-1] + 1)
        starts = np.flatnonzero(brk)
        ends = np.append(starts[1:], len(rows)) - 1
        out_row.append(rows[starts])
        out_first.append(sms[starts])
        out_last.append(sms[ends])
    return {
        "row": np.concatenate(out_row),
        "sm_first": np.concatenate(out_first),
        "sm_last": np.concatenate(out_last),
    }


def _lanes(
    tl: Timeline, rank: int, device: int, source: str = "auto"
) -> tuple[pd.DataFrame, LaneSource, _Device, list[Partition], _Estimate | None]:
    dev = _device(tl, rank, device)
    if dev.sm_count <= 0 or (len(dev.kernels) == 0 and dev.blocks is None):
        return _empty_lanes(), "none", dev, [], None
    use_measured = dev.blocks is not None and source in ("auto", "measured")
    if source == "measured" and dev.blocks is None:
        return _empty_lanes(), "none", dev, [], None
    parts = _partitions(tl, dev) if use_measured else _partitions(tl, _without_blocks(dev))
    frames = []
    kernels = dev.kernels
    if use_measured:
        frames.append(_measured_rows(dev))
        kernels = kernels[~_instrumented(dev)]
    est = _estimate(tl, dev, parts, kernels)
    frames.append(_estimated_rows(est, parts))
    frames = [f for f in frames if len(f)]
    lanes = pd.concat(frames, ignore_index=True) if frames else _empty_lanes()
    lanes = (
        lanes.astype(SM_LANE_COLUMNS).sort_values(["start", "sm_first"], kind="stable").reset_index(drop=True)
    )
    return lanes, ("measured" if use_measured else "estimated"), dev, parts, est


def _without_blocks(dev: _Device) -> _Device:
    return _Device(dev.rank, dev.device, dev.name, dev.sm_count, dev.kernels, None, dev.span)


def sm_lanes(
    timeline: Timeline, rank: int, device: int, source: Literal["auto", "measured", "estimated"] = "auto"
) -> tuple[pd.DataFrame, LaneSource]:
    """Per-SM busy intervals of one device (columns `SM_LANE_COLUMNS`) and where they come from.

    auto: measured when the run has probe data for the device (uninstrumented kernels estimated,
    `measured` False on their rows), else estimated; "none" when the device has no kernels or its SM
    count is unknown. Rows cover SM ranges `sm_first..sm_last` (inclusive): measured rows are single
    SMs, estimated rows a contiguous run of SM ids of the kernel's partition."""
    lanes, src, *_ = _lanes(timeline, rank, device, source)
    return lanes, src


def expand_lanes(lanes: pd.DataFrame) -> pd.DataFrame:
    """One row per SM (column `sm`) instead of SM ranges — for small windows and hover text."""
    n = (lanes["sm_last"].to_numpy() - lanes["sm_first"].to_numpy() + 1).astype(np.int64)
    rows = np.repeat(np.arange(len(lanes)), n)
    sm = lanes["sm_first"].to_numpy()[rows] + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    out = lanes.iloc[rows].reset_index(drop=True).drop(columns=["sm_first", "sm_last"])
    out.insert(0, "sm", sm.astype(np.int32))
    return out


# ---------------------------------------------------------------------------------------------
# levels and SM-time
# ---------------------------------------------------------------------------------------------
def _cumulative(times: np.ndarray, level: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral of a step function (value level[i] on [times[i], times[i+1])) from -inf to each edge."""
    if len(times) == 0:
        return np.zeros(len(edges), dtype=np.float64)
    widths = np.diff(times).astype(np.float64)
    area = np.concatenate([[0.0], np.cumsum(level[:-1].astype(np.float64) * widths)])
    k = np.searchsorted(times, edges, side="right") - 1
    ok = k >= 0
    kk = np.maximum(k, 0)
    return np.where(ok, area[kk] + level[kk] * (edges - times[kk]).astype(np.float64), 0.0)


def _level_functions(
    lanes: pd.DataFrame, parts: list[Partition], sm_total: int
) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Device level (busy SMs) as a step function, and one per partition (keyed by green context).
    Each partition is clipped at its SM count, the device at its SM count."""
    lanes = _merge_measured(lanes)
    part_ids = [p.green_context for p in parts]
    caps = np.array([max(p.sm_count, 1) for p in parts] + [1], dtype=np.int64)
    gc = lanes["green_context"].to_numpy()
    pmap = {g: i for i, g in enumerate(part_ids)}
    none_idx = pmap.get(NONE_PARTITION, len(parts) - 1 if parts else 0)
    if len(gc):
        uniq, inv = np.unique(gc, return_inverse=True)
        pidx = np.array([pmap.get(int(g), none_idx) for g in uniq], dtype=np.int64)[inv]
    else:
        pidx = np.zeros(0, dtype=np.int64)
    w = (lanes["sm_last"].to_numpy() - lanes["sm_first"].to_numpy() + 1).astype(np.int64)
    times = np.concatenate([lanes["start"].to_numpy(), lanes["end"].to_numpy()]).astype(np.int64)
    delta = np.concatenate([w, -w])
    part = np.concatenate([pidx, pidx])
    # order within equal times does not matter: the clipped sums telescope per partition, so the
    # level after the last event at a time is the same in any order (intermediate levels last 0 ns)
    order = np.argsort(times, kind="stable")
    t, d, p = times[order], delta[order], part[order]
    # per-partition running level (grouped cumsum), clipped at the partition size
    if len(parts) <= 1:
        raw = np.cumsum(d)
    else:
        porder = np.argsort(p.astype(np.int16), kind="stable")  # radix sort, keeps time order
        raw = np.empty(len(t), dtype=np.int64)
        raw[porder] = _group_cumsum(d[porder], p[porder])
    clipped = np.minimum(raw, caps[p])
    prev = np.minimum(raw - d, caps[p])
    dev_level = np.minimum(np.cumsum(clipped - prev), sm_total)
    per_part: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, g in enumerate(part_ids):
        m = p == i
        per_part[g] = (t[m], clipped[m])
    return t, dev_level, per_part


def _merge_measured(lanes: pd.DataFrame) -> pd.DataFrame:
    """Measured rows merged per SM across kernels (two kernels sharing an SM count once)."""
    m = lanes["measured"].to_numpy()
    if not m.any():
        return lanes
    meas = lanes[m]
    sm_ = meas["sm_first"].to_numpy().astype(np.int64)
    gc = meas["green_context"].to_numpy().astype(np.int64)
    first, ms, me = _merge_intervals([sm_, gc], meas["start"].to_numpy(), meas["end"].to_numpy())
    merged = pd.DataFrame(
        {"sm_first": sm_[first], "sm_last": sm_[first], "start": ms, "end": me, "green_context": gc[first]}
    )
    return pd.concat([merged, lanes.loc[~m, list(merged.columns)]], ignore_index=True)


def _group_cumsum(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at each group (values sorted by group)."""
    c = np.cumsum(values)
    if len(c) == 0:
        return c
    first = np.ones(len(groups), dtype=bool)
    first[1:] = groups[1:] != groups[:-1]
    head = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    return c - (c[head] - values[head])


def _busy_between(times: np.ndarray, level: np.ndarray, t0: int, t1: int) -> float:
    c = _cumulative(times, level, np.array([t0, t1], dtype=np.int64))
    return float(c[1] - c[0])


# ---------------------------------------------------------------------------------------------
# public analyses
# ---------------------------------------------------------------------------------------------
def sm_utilization(
    timeline: Timeline,
    rank: int,
    device: int,
    bins: int | np.ndarray = 200,
    source: Literal["auto", "measured", "estimated"] = "auto",
) -> pd.DataFrame:
    """SM utilization over time: one row per (bin, scope), scope "device" for the whole GPU and
    "partition" per green-context partition (green_context -1 = outside every green context).
    Columns: start, end, scope, green_context, sm_count, busy_sm_ns, utilization, source.
    `bins`: a number of equal bins over the device's span, or explicit edges (ns)."""
    lanes, src, dev, parts, _ = _lanes(timeline, rank, device, source)
    cols = ["start", "end", "scope", "green_context", "sm_count", "busy_sm_ns", "utilization", "source"]
    if src == "none" or dev.span[1] <= dev.span[0]:
        return pd.DataFrame({c: [] for c in cols})
    if np.ndim(bins) == 0:
        edges = np.linspace(dev.span[0], dev.span[1], int(bins) + 1).round().astype(np.int64)
        edges = np.unique(edges)
    else:
        edges = np.asarray(bins, dtype=np.int64)
    t, lvl, per_part = _level_functions(lanes, parts, dev.sm_count)
    width = np.diff(edges).astype(np.float64)
    frames = []

    def frame(scope: str, g: int, n: int, busy: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "start": edges[:-1],
                "end": edges[1:],
                "scope": scope,
                "green_context": g,
                "sm_count": n,
                "busy_sm_ns": busy,
                "utilization": np.where(width > 0, busy / (np.maximum(n, 1) * np.maximum(width, 1)), 0.0),
                "source": src,
            }
        )

    frames.append(frame("device", NONE_PARTITION, dev.sm_count, np.diff(_cumulative(t, lvl, edges))))
    if any(p.green_context >= 0 for p in parts):
        for p in parts:
            pt, pl = per_part[p.green_context]
            frames.append(
                frame("partition", p.green_context, p.sm_count, np.diff(_cumulative(pt, pl, edges)))
            )
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class _SmTime:
    source: LaneSource
    span: tuple[int, int]
    sm_count: int
    device_busy: float  # SM-ns
    partitions: tuple[tuple[Partition, float], ...]  # (partition, busy SM-ns)


_CACHE: dict[tuple[int, int, int, str], tuple[weakref.ref, _SmTime]] = {}
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()


def _sm_time(timeline: Timeline, rank: int, device: int, source: str = "auto") -> _SmTime:
    """SM-time of a device and its partitions, memoized per Timeline object (analyze asks for the
    summary and the findings of the same device)."""
    key = (id(timeline), rank, device, source)
    with _CACHE_LOCK:  # the dashboard calls from several threads
        hit = _CACHE.get(key)
    if hit is not None and hit[0]() is timeline:
        return hit[1]
    result = _compute_sm_time(timeline, rank, device, source)
    with _CACHE_LOCK:
        while len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (weakref.ref(timeline), result)
    return result


def _compute_sm_time(timeline: Timeline, rank: int, device: int, source: str) -> _SmTime:
    lanes, src, dev, parts, _ = _lanes(timeline, rank, device, source)
    if src == "none" or dev.span[1] <= dev.span[0]:
        return _SmTime("none", dev.span, dev.sm_count, 0.0, ())
    t, lvl, per_part = _level_functions(lanes, parts, dev.sm_count)
    t0, t1 = dev.span
    busy = _busy_between(t, lvl, t0, t1)
    pb = tuple((p, _busy_between(*per_part[p.green_context], t0, t1)) for p in parts)
    return _SmTime(src, dev.span, dev.sm_count, busy, pb)


def sm_summary(timeline: Timeline, rank: int, device: int) -> SmSummary:
    """Source, busy fraction (busy SM-time / (SMs x span)) and green-context partitions of a device.
    Partitions are listed only when the device has green contexts: each green context, plus
    partition None for the SMs no green context holds (when there are any). Work outside green
    contexts on a device whose green contexts hold every SM counts in the device's busy fraction
    only."""
    st = _sm_time(timeline, rank, device)
    if st.source == "none":
        return SmSummary()
    span = st.span[1] - st.span[0]
    frac = st.device_busy / (st.sm_count * span) if st.sm_count and span else 0.0
    partitions: tuple[SmPartition, ...] = ()
    if any(p.green_context >= 0 for p, _ in st.partitions):
        partitions = tuple(
            SmPartition(
                green_context=None if p.green_context < 0 else p.green_context,
                sm_count=p.sm_count,
                busy_fraction=round(b / (p.sm_count * span), 6) if p.sm_count and span else 0.0,
            )
            for p, b in st.partitions
            if not p.overlaps  # the listed partitions are disjoint: their SM counts add up
        )
    return SmSummary(source=st.source, busy_fraction=round(frac, 6), partitions=partitions)


def _gpu_devices(timeline: Timeline) -> list[tuple[int, int]]:
    keys = {(d.rank, d.device) for d in timeline.devices}
    if timeline.sm_blocks is not None and len(timeline.sm_blocks):
        keys |= set(map(tuple, timeline.sm_blocks[["rank", "device"]].drop_duplicates().to_numpy().tolist()))
    return sorted((int(r), int(d)) for r, d in keys)


def idle_partition_findings(timeline: Timeline) -> list[Finding]:
    """Rule `idle_partition`: a green-context partition busy less than half of the device's span.
    wasted_ns = the partition's idle SM-time expressed as whole-device time (idle SM-ns / device
    SMs); data carries the raw numbers (idle_sm_ns, sm_count, busy_fraction, span_ns, source)."""
    findings: list[Finding] = []
    for rank, device in _gpu_devices(timeline):
        st = _sm_time(timeline, rank, device)
        if st.source == "none":
            continue
        span = st.span[1] - st.span[0]
        for p, busy in st.partitions:
            if p.green_context < 0 or p.sm_count <= 0 or span <= 0:
                continue
            frac = busy / (p.sm_count * span)
            if frac >= IDLE_PARTITION_THRESHOLD:
                continue
            idle_sm_ns = p.sm_count * span - busy
            where = f"rank {rank} device {device} green context {p.green_context}"
            findings.append(
                Finding(
                    rule="idle_partition",
                    severity="critical" if frac < IDLE_PARTITION_CRITICAL else "warning",
                    count=1,
                    wasted_ns=round(idle_sm_ns / max(st.sm_count, 1)),
                    message=(
                        f"green-context partition {p.green_context} ({p.sm_count} of {st.sm_count} SMs) is busy "
                        f"{frac:.0%} of the {span / 1e6:.3f} ms span ({st.source}): "
                        f"{idle_sm_ns / 1e6:.1f} SM-ms idle, {idle_sm_ns / (st.sm_count * span):.0%} of the "
                        f"device's SM-time. Give it fewer SMs or more work."
                    ),
                    where=where,
                    data={
                        "green_context": p.green_context,
                        "sm_count": p.sm_count,
                        "device_sm_count": st.sm_count,
                        "busy_fraction": round(frac, 6),
                        "idle_sm_ns": round(idle_sm_ns),
                        "span_ns": int(span),
                        "source": st.source,
                        "start_ns": int(st.span[0]),  # the whole span: the partition idles throughout
                        "end_ns": int(st.span[1]),
                    },
                )
            )
    return findings


@dataclass(frozen=True)
class SmAgreement:
    """Measured vs estimated SM-time of the probe-instrumented kernels of one device."""

    measured_sm_ns: float
    estimated_sm_ns: float
    relative_error: float  # (estimated - measured) / measured
    kernels: int  # instrumented kernel events compared


def estimate_agreement(timeline: Timeline, rank: int, device: int) -> SmAgreement | None:
    """How far the estimate is from the measurement, on the kernel events the probe instrumented
    (None without probe data), as SM-time over the device's span.

    measured = union of the recorded blocks per SM; estimated = the same kernel events' share of
    the estimated level: every kernel of the device is estimated, and where a partition's kernels
    want more SMs than it has, each gets its proportional share (the clipping `sm_summary` does),
    so concurrent uninstrumented kernels (cuBLAS on another stream) take their part."""
    dev = _device(timeline, rank, device)
    if dev.blocks is None or dev.sm_count <= 0:
        return None
    parts = _partitions(timeline, dev)
    inst = _instrumented(dev)
    t0, t1 = dev.span
    m = _busy_between(*_level_functions(_measured_rows(dev), parts, dev.sm_count)[:2], t0, t1)
    rows = _estimated_rows(_estimate(timeline, dev, parts, dev.kernels), parts)
    mine = np.isin(rows["kernel"].to_numpy(), dev.kernels.index[inst])
    e = 0.0
    for p in parts:  # one pass per partition
        sel = rows["green_context"].to_numpy() == p.green_context
        pr = rows[sel]
        w = (pr["sm_last"].to_numpy() - pr["sm_first"].to_numpy() + 1).astype(np.int64)
        start, end = pr["start"].to_numpy(), pr["end"].to_numpy()
        times = np.concatenate([start, end])
        order = np.argsort(times, kind="stable")
        t = times[order]
        level = np.cumsum(np.concatenate([w, -w])[order])
        share = np.where(level > 0, np.minimum(1.0, max(p.sm_count, 1) / np.maximum(level, 1)), 0.0)
        k = mine[sel]
        a = _cumulative(t, share, np.clip(start[k], t0, t1))
        b = _cumulative(t, share, np.clip(end[k], t0, t1))
        e += float((w[k] * (b - a)).sum())
    return SmAgreement(m, e, (e - m) / m if m else float("inf"), int(inst.sum()))


# ---------------------------------------------------------------------------------------------
# per-SM grid for figures (busy fraction per SM per time bin)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmGrid:
    """What `render.sm_figures.sm_lanes_figure` draws: busy fraction of every SM in every bin."""

    source: LaneSource
    device_label: str
    sm_count: int
    edges: np.ndarray  # int64 ns, len = bins + 1
    sm_ids: np.ndarray  # row order: SMs grouped by partition
    sm_partition: np.ndarray  # green context of each row (-1 = outside green contexts)
    busy: np.ndarray  # float64 (rows x bins), 0..1
    partitions: tuple[tuple[int, int], ...]  # (green_context, sm_count)
    estimated_kernels: int  # kernel launches without probe data, estimated (measured source only)


def _range_bin_coverage(
    sm_first: np.ndarray,
    sm_last: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    n_sm: int,
    edges: np.ndarray,
) -> np.ndarray:
    """Busy ns of every SM (0..n_sm-1) in every bin, for intervals covering SM ranges. Vectorized:
    a difference array over SMs and prefix sums of sorted start/end times per SM key."""
    e0, e1 = int(edges[0]), int(edges[-1])
    nb = len(edges) - 1
    if len(start) == 0 or nb <= 0:
        return np.zeros((n_sm, max(nb, 0)))
    s = np.clip(start, e0, e1) - e0
    e = np.clip(end, e0, e1) - e0
    key = np.concatenate([sm_first, sm_last + 1]).astype(np.int64)
    sign = np.concatenate([np.ones(len(s)), -np.ones(len(s))])
    ss = np.concatenate([s, s])
    ee = np.concatenate([e, e])
    keep = (key >= 0) & (key <= n_sm) & (ee > ss)
    key, sign, ss, ee = key[keep], sign[keep], ss[keep], ee[keep]
    m = np.int64(e1 - e0 + 2)
    q_e = (edges - e0).astype(np.int64)
    keys = np.arange(n_sm + 1, dtype=np.int64)

    def g(times: np.ndarray) -> np.ndarray:
        comp = key * m + times
        order = np.argsort(comp, kind="stable")
        comp = comp[order]
        cs = np.concatenate([[0.0], np.cumsum(sign[order])])
        ct = np.concatenate([[0.0], np.cumsum(sign[order] * times[order])])
        lo = np.searchsorted(comp, keys * m)[:, None]
        hi = np.searchsorted(comp, keys[:, None] * m + q_e[None, :])
        return q_e[None, :] * (cs[hi] - cs[lo]) - (ct[hi] - ct[lo])

    cover = g(ss) - g(ee)  # (n_sm+1, edges): covered ns up to each edge, per SM key
    per_sm = np.cumsum(cover, axis=0)[:n_sm]
    return np.diff(per_sm, axis=1)


def sm_grid(
    timeline: Timeline,
    rank: int,
    device: int,
    bins: int = 400,
    t0: int | None = None,
    t1: int | None = None,
    source: Literal["auto", "measured", "estimated"] = "auto",
) -> SmGrid:
    """Busy fraction per SM per time bin over [t0, t1) (default: the device's span)."""
    lanes, src, dev, parts, _ = _lanes(timeline, rank, device, source)
    lo = dev.span[0] if t0 is None else int(t0)
    hi = dev.span[1] if t1 is None else int(t1)
    if hi <= lo:
        hi = lo + 1
    edges = np.unique(np.linspace(lo, hi, max(int(bins), 1) + 1).round().astype(np.int64))
    n_sm = max(dev.sm_count, int(lanes["sm_last"].max()) + 1 if len(lanes) else 0)
    cover = _range_bin_coverage(
        lanes["sm_first"].to_numpy(),
        lanes["sm_last"].to_numpy(),
        lanes["start"].to_numpy(),
        lanes["end"].to_numpy(),
        n_sm,
        edges,
    )
    width = np.maximum(np.diff(edges), 1).astype(np.float64)
    busy = np.clip(cover / width[None, :], 0.0, 1.0)
    owner = np.full(n_sm, NONE_PARTITION, dtype=np.int64)
    rank_in = np.full(n_sm, len(parts), dtype=np.int64)  # row groups in partition order
    for i, p in enumerate(parts):  # green partitions own their SMs; partition -1 takes the rest
        ids = np.array([x for x in p.sm_ids if x < n_sm], dtype=np.int64)
        if p.green_context >= 0:
            owner[ids] = p.green_context
            rank_in[ids] = i
        else:
            rank_in[ids[owner[ids] == NONE_PARTITION]] = i
    order = np.lexsort((np.arange(n_sm), rank_in))
    name = timeline.device_info(rank, device)
    label = f"rank {rank} device {device}" + (f" · {name.name}" if name and name.name else "")
    return SmGrid(
        source=src,
        device_label=label,
        sm_count=dev.sm_count,
        edges=edges,
        sm_ids=order.astype(np.int64),
        sm_partition=owner[order],
        busy=busy[order],
        partitions=tuple((p.green_context, p.sm_count) for p in parts),
        estimated_kernels=int(lanes.loc[~lanes["measured"], "kernel"].nunique()) if src == "measured" else 0,
    )


# ---------------------------------------------------------------------------------------------
# green contexts: why the variant is slower or faster than `sequential`
# ---------------------------------------------------------------------------------------------
_MATMUL = re.compile(r"gemm|matmul|xmma|cutlass|nvjet|_mm_|sm\d+_.*tensorop|cublas", re.IGNORECASE)


@dataclass(frozen=True)
class GreenContextExplanation:
    """Why a green-context run is slower or faster than `sequential`, in numbers from both runs."""

    variant: str
    variant_span_ns: int
    sequential_span_ns: int
    ratio: float  # variant span / sequential span (> 1: slower)
    verdict: Literal["slowdown", "speedup", "same"]
    matmul_name: str  # in `sequential`
    matmul_name_variant: str  # the same unless the variant runs another GEMM kernel
    matmul_grid_variant: int  # blocks per launch (0 = unknown)
    matmul_grid_sequential: int
    matmul_ns_variant: int  # total matmul kernel time
    matmul_ns_sequential: int
    matmul_ratio: float  # variant / sequential
    matmul_green_context: int | None  # partition the matmul runs on in the variant
    matmul_sms_variant: int
    matmul_sms_sequential: int
    sm_ratio: float  # matmul SMs variant / sequential
    matmul_waves_variant: int  # waves of one matmul launch (0 = launch configuration unknown)
    matmul_waves_sequential: int
    elementwise_ns_variant: int  # the other partition's kernels (probe kernels left out)
    elementwise_ns_sequential: int  # the same kernel names in `sequential`
    elementwise_ratio: float
    starving_green_context: int | None  # the busiest partition: its work sets the span
    starving_sm_count: int
    starving_busy_fraction: float
    small_green_context: int | None  # the smallest partition
    small_sm_count: int
    small_busy_fraction: float
    small_idle_sm_ns: int
    large_green_context: int | None  # the largest partition
    large_sm_count: int
    large_busy_fraction: float
    large_idle_sm_ns: int
    source: LaneSource
    message: str


_PROBE = re.compile(r"^tl_probe_")


def _first_device(tl: Timeline) -> tuple[int, int]:
    k = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
    if len(k):
        r, d = k[["rank", "device"]].iloc[0]
        return int(r), int(d)
    return (tl.devices[0].rank, tl.devices[0].device) if tl.devices else (0, 0)


def _matmul_id(tl: Timeline, kernels: pd.DataFrame) -> int:
    """Name id of the matmul: kernels whose names look like a GEMM, the one with the most time; else
    the kernel name with the most total time."""
    if not len(kernels):
        return -1
    dur = (kernels["end"] - kernels["start"]).groupby(kernels["name"]).sum()
    looks = np.array([bool(_MATMUL.search(tl.name(int(i)))) for i in dur.index], dtype=bool)
    pick = dur[looks] if looks.any() else dur
    return int(pick.idxmax())


def _total_ns(k: pd.DataFrame) -> int:
    return int((k["end"] - k["start"]).sum())


def green_context_explanation(variant_tl: Timeline, sequential_tl: Timeline) -> GreenContextExplanation:
    """Explain a green-context variant's slowdown or speedup against `sequential`, from the data:
    which partition's work sets the span, how much longer the matmul runs on fewer SMs (and in how
    many waves), how much longer the elementwise work runs on its partition, and how much SM-time
    each partition leaves idle."""
    rv, dv = _first_device(variant_tl)
    rs, ds = _first_device(sequential_tl)
    var = _device(variant_tl, rv, dv)
    seq = _device(sequential_tl, rs, ds)
    v_span = var.span[1] - var.span[0]
    s_span = seq.span[1] - seq.span[0]
    ratio = v_span / s_span if s_span else float("inf")
    verdict: Literal["slowdown", "speedup", "same"] = (
        "slowdown" if ratio > 1.05 else "speedup" if ratio < 0.95 else "same"
    )

    # the matmul: picked in `sequential`, found by name in the variant (or its own biggest GEMM)
    s_mm = _matmul_id(sequential_tl, seq.kernels)
    mm_name = sequential_tl.name(s_mm)
    v_ids = [i for i, x in enumerate(variant_tl.strings) if x == mm_name]
    v_k = var.kernels[np.isin(var.kernels["name"].to_numpy(), v_ids)] if v_ids else var.kernels[:0]
    if not len(v_k):  # a different GEMM kernel was chosen for the partition
        v_k = var.kernels[var.kernels["name"].to_numpy() == _matmul_id(variant_tl, var.kernels)]
    s_k = seq.kernels[seq.kernels["name"].to_numpy() == s_mm]
    mm_v, mm_s = _total_ns(v_k), _total_ns(s_k)

    v_parts = _partitions(variant_tl, var)
    s_parts = _partitions(sequential_tl, _without_blocks(seq))
    mm_gc = int(v_k["green_context"].mode().iloc[0]) if len(v_k) else NONE_PARTITION
    mm_part = next((p for p in v_parts if p.green_context == mm_gc), None)
    sms_v = mm_part.sm_count if mm_part else var.sm_count
    sms_s = seq.sm_count

    def waves(tl: Timeline, dev: _Device, parts: list[Partition], k: pd.DataFrame) -> int:
        if not len(k) or int(k["grid_x"].iloc[0]) <= 0:
            return 0
        return int(_estimate(tl, _without_blocks(dev), parts, k.iloc[:1]).waves[0])

    w_v = waves(variant_tl, var, v_parts, v_k)
    w_s = waves(sequential_tl, seq, s_parts, s_k)

    # the elementwise work: the variant's other kernels (not the matmul, not probes) ...
    names_v = variant_tl.names(var.kernels["name"])
    not_probe = np.array([not _PROBE.search(n) for n in names_v], dtype=bool)
    ew_mask = not_probe & ~var.kernels.index.isin(v_k.index)
    ew_v = var.kernels[ew_mask]
    # ... and the same kernel names in `sequential`
    ew_names = set(names_v[ew_mask].tolist())
    seq_names = sequential_tl.names(seq.kernels["name"])
    ew_s = seq.kernels[np.isin(seq_names, list(ew_names)) & (seq.kernels["name"].to_numpy() != s_mm)]
    ew_nv, ew_ns = _total_ns(ew_v), _total_ns(ew_s)
    ew_gc = int(ew_v["green_context"].mode().iloc[0]) if len(ew_v) else NONE_PARTITION
    ew_part = next((p for p in v_parts if p.green_context == ew_gc), None)

    st = _sm_time(variant_tl, rv, dv)
    span = max(v_span, 1)
    green = [(p, b) for p, b in st.partitions if p.green_context >= 0]

    def frac(pb: tuple[Partition, float]) -> float:
        return pb[1] / (max(pb[0].sm_count, 1) * span)

    def idle(pb: tuple[Partition, float]) -> int:
        return round(pb[0].sm_count * span - pb[1])

    if green:
        starving, small, large = (
            max(green, key=frac),
            min(green, key=lambda pb: pb[0].sm_count),
            max(green, key=lambda pb: pb[0].sm_count),
        )
    sm_ratio = sms_v / sms_s if sms_s else 0.0
    mm_ratio = mm_v / mm_s if mm_s else float("inf")
    ew_ratio = ew_nv / ew_ns if ew_ns else float("inf")
    name = variant_tl.meta.variant or "variant"
    text = [
        (
            f"{name} takes {ratio:.2f}x the sequential time ({v_span / 1e6:.3f} ms vs {s_span / 1e6:.3f} ms: "
            f"{verdict})."
        )
    ]
    if green:
        text.append(
            f"The {starving[0].sm_count}-SM partition {starving[0].green_context} sets the pace (busy "
            f"{frac(starving):.0%} of the span)."
        )
    mm_name_v = variant_tl.name(int(v_k["name"].iloc[0])) if len(v_k) else ""
    grid_v, grid_s = _grid(v_k), _grid(s_k)
    if mm_s:
        if not (w_v and w_s):
            waves_txt = ""
        elif grid_v == grid_s:
            waves_txt = f"; its grid of {grid_v} blocks needs {w_v} wave(s) there vs {w_s} on the full GPU"
        else:
            waves_txt = f"; grids of {grid_v} vs {grid_s} blocks: {w_v} vs {w_s} wave(s)"
        label = (
            _short(mm_name)
            if mm_name_v == mm_name
            else f"{_short(mm_name_v)}; {_short(mm_name)} in sequential"
        )
        where = (
            f"on {sms_v} SMs instead of {sms_s} (SM ratio {sm_ratio:.2f}, which alone predicts "
            f"{1 / sm_ratio if sm_ratio else float('inf'):.2f}x{waves_txt})"
            if sms_v != sms_s
            else f"on all {sms_s} SMs in both runs"
        )
        text.append(
            f"The matmul ({label}) runs {where}: {mm_v / 1e6:.3f} ms vs {mm_s / 1e6:.3f} ms "
            f"({mm_ratio:.2f}x)."
        )
    if ew_ns and ew_part is not None:
        on = f"on the {ew_part.sm_count}-SM partition" if ew_part.green_context >= 0 else "on their stream"
        text.append(
            f"The elementwise kernels {on} take {ew_nv / 1e6:.3f} ms vs {ew_ns / 1e6:.3f} ms in sequential "
            f"on all {sms_s} SMs ({ew_ratio:.2f}x)."
        )
    if green:
        for label, pb in (("small", small), ("large", large)):
            if label == "large" and pb[0] is small[0]:
                continue
            text.append(
                f"The {label} {pb[0].sm_count}-SM partition {pb[0].green_context} is busy {frac(pb):.0%} of the "
                f"span and leaves {idle(pb) / 1e6:.1f} SM-ms idle ({idle(pb) / max(var.sm_count * span, 1):.1%} "
                f"of the GPU's SM-time)."
            )
        n_est = int((~_instrumented(var)).sum()) if var.blocks is not None else len(var.kernels)
        how = (
            f"measured by the probes, {n_est} uninstrumented kernel launches estimated"
            if st.source == "measured" and n_est
            else st.source
        )
        text.append(f"[SM data: {how}]")

    def part_fields(pb: tuple[Partition, float] | None) -> tuple[int | None, int, float, int]:
        if pb is None:
            return None, 0, 0.0, 0
        return pb[0].green_context, pb[0].sm_count, float(frac(pb)), idle(pb)

    sg, sn, sf, _si = part_fields(starving if green else None)
    smg, smn, smf, smi = part_fields(small if green else None)
    lg, ln, lf, li = part_fields(large if green else None)
    return GreenContextExplanation(
        variant=name,
        variant_span_ns=int(v_span),
        sequential_span_ns=int(s_span),
        ratio=float(ratio),
        verdict=verdict,
        matmul_name=mm_name,
        matmul_name_variant=mm_name_v,
        matmul_grid_variant=grid_v,
        matmul_grid_sequential=grid_s,
        matmul_ns_variant=mm_v,
        matmul_ns_sequential=mm_s,
        matmul_ratio=float(mm_ratio),
        matmul_green_context=None if mm_gc < 0 else mm_gc,
        matmul_sms_variant=int(sms_v),
        matmul_sms_sequential=int(sms_s),
        sm_ratio=float(sm_ratio),
        matmul_waves_variant=w_v,
        matmul_waves_sequential=w_s,
        elementwise_ns_variant=ew_nv,
        elementwise_ns_sequential=ew_ns,
        elementwise_ratio=float(ew_ratio),
        starving_green_context=sg,
        starving_sm_count=sn,
        starving_busy_fraction=sf,
        small_green_context=smg,
        small_sm_count=smn,
        small_busy_fraction=smf,
        small_idle_sm_ns=smi,
        large_green_context=lg,
        large_sm_count=ln,
        large_busy_fraction=lf,
        large_idle_sm_ns=li,
        source=st.source,
        message=" ".join(text),
    )


def _grid(k: pd.DataFrame) -> int:
    """Blocks per launch of the first kernel of `k` (0 when unknown)."""
    if not len(k) or int(k["grid_x"].iloc[0]) <= 0:
        return 0
    return int(k["grid_x"].iloc[0]) * max(int(k["grid_y"].iloc[0]), 1) * max(int(k["grid_z"].iloc[0]), 1)


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
