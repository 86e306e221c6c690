"""Estimated SM lanes: SMs a kernel occupies from its grid, its partition's SM count and occupancy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.sm.occupancy import DeviceLimits, limits_for, occupancy
from tracelab.analyses.sm.partitions import (
    NONE_PARTITION,
    Partition,
    _Device,
    _empty_lane_columns,
    _empty_lanes,
)
from tracelab.model import Timeline

if TYPE_CHECKING:
    import pandas as pd


class _Estimate(msgspec.Struct, frozen=True):
    kernel: np.ndarray  # event row
    part: np.ndarray  # index into the partition list
    start: np.ndarray
    end: np.ndarray
    sms: np.ndarray  # SMs occupied over the whole duration: min(grid, partition SMs)
    waves: np.ndarray  # ceil(grid / (blocks per SM x partition SMs)); 1 when the grid is unknown
    blocks_per_sm: np.ndarray
    name: np.ndarray
    green_context: np.ndarray


def _estimate(tl: Timeline, dev: _Device, parts: list[Partition], kernels: Mapping[str, np.ndarray]) -> _Estimate:
    """The estimate for these kernels (columns as `_Device.kcols` holds them; `kernel_columns` turns a
    DataFrame subset into them)."""
    k = kernels
    gc = k["green_context"].astype(np.int64)
    part_ids = np.array([p.green_context for p in parts], dtype=np.int64)
    caps = np.array([max(p.sm_count, 1) for p in parts], dtype=np.int64)
    # partition index of each kernel: its green context, else partition -1 (always last when present)
    lookup = {g: i for i, g in enumerate(part_ids)}
    none_idx = lookup.get(NONE_PARTITION, len(parts) - 1)
    uniq, inv = distinct_codes(gc)
    part = np.array([lookup.get(int(g), none_idx) for g in uniq], dtype=np.int64)[inv]
    cap = caps[part] if len(part) else np.zeros(0, dtype=np.int64)
    # a non-green context may itself be limited (ContextInfo.sm_count)
    ctx_caps = {c.context: c.sm_count
                for c in tl.contexts
                if c.rank == dev.rank and c.device == dev.device and not c.is_green and c.sm_count > 0}
    if ctx_caps:
        cu, cinv = distinct_codes(k["context"])
        cc = np.array([ctx_caps.get(int(c), 1 << 30) for c in cu], dtype=np.int64)[cinv]
        cap = np.where(gc < 0, np.minimum(cap, cc), cap)

    def _prod(cols: list[str]) -> np.ndarray:
        """x * y * z; unknown when x is unknown, y / z unknown count as 1."""
        x, y, z = (k[c].astype(np.int64) for c in cols)
        return np.where(x > 0, x * np.maximum(y, 1) * np.maximum(z, 1), -1)

    grid = _prod(["grid_x", "grid_y", "grid_z"])
    threads = _prod(["block_x", "block_y", "block_z"])
    limits = limits_for(tl.device_info(dev.rank, dev.device))
    bps = np.where(threads > 0, np.maximum(_blocks_per_sm(k, threads, limits), 1), 1).astype(np.int64)
    known = grid > 0
    waves = np.where(known, -(-grid // np.maximum(bps * cap, 1)), 1)
    sms = np.where(known, np.minimum(grid, cap), cap)
    return _Estimate(k["row"].astype(np.int64), part, k["start"].astype(np.int64), k["end"].astype(np.int64),
                     sms.astype(np.int64), waves.astype(np.int64), bps, k["name"].astype(np.int32), gc)


def _blocks_per_sm(k: Mapping[str, np.ndarray], threads: np.ndarray, limits: DeviceLimits) -> np.ndarray:
    """Occupancy once per distinct (threads, registers, shared memory) configuration."""
    regs = np.clip(k["registers"].astype(np.int64), -1, 1 << 10)
    smem = np.clip(k["shared_mem"].astype(np.int64), -1, (1 << 30) - 2)
    thr = np.clip(np.where(threads > 0, threads, limits.warp_size), 0, (1 << 20) - 1)
    key = (thr << 42) | ((regs + 1) << 31) | (smem + 1)
    uniq, codes = distinct_codes(key)
    u_thr, u_regs, u_smem = uniq >> 42, ((uniq >> 31) & ((1 << 11) - 1)) - 1, (uniq & ((1 << 31) - 1)) - 1
    return occupancy(u_thr, u_regs, u_smem, limits).blocks_per_sm[codes]


def _stack_offsets(est: _Estimate, n_parts: int, caps: np.ndarray) -> np.ndarray:
    """SMs already occupied in the kernel's partition when it starts (mod the partition size)."""
    n = len(est.start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = est.sms
    # ends first, then starts, each in kernel order: a stable sort by time then puts ends before starts
    # at equal times and keeps kernel order among equals, and a stable sort by partition keeps that
    # (the order lexsort((idx, is_start, times, part)) gives, with one timsort and one radix sort)
    # (position k < n of the concatenation is kernel k's end, n + k its start)
    times = np.concatenate([est.end, est.start])
    delta = np.concatenate([-width, width])
    order = np.argsort(times, kind="stable")
    if n_parts > 1:
        part = np.concatenate([est.part, est.part])
        order = order[np.argsort(part[order].astype(np.int16 if n_parts < 2**15 else np.int64), kind="stable")]
    d = delta[order]
    level = np.cumsum(d)  # each partition's deltas sum to 0, so groups do not leak
    before = level - d
    offs = np.empty(n, dtype=np.int64)
    starts_sorted = order >= n
    offs[order[starts_sorted] - n] = before[starts_sorted]
    return offs % (caps[0] if n_parts == 1 else caps[est.part])


def _estimated_rows(est: _Estimate, parts: list[Partition], columns: dict[str, np.ndarray] | None = None,
                    ) -> pd.DataFrame:
    """The estimate's SM lane rows (`columns`: its `_estimated_columns`, when made already)."""
    import pandas as pd

    if len(est.start) == 0:
        return _empty_lanes()
    return pd.DataFrame(_estimated_columns(est, parts) if columns is None else columns, copy=False)


def _estimated_columns(est: _Estimate, parts: list[Partition]) -> dict[str, np.ndarray]:
    """The estimated SM lanes as columns (SM_LANE_COLUMNS' names, in that order)."""
    n = len(est.start)
    if n == 0:
        return _empty_lane_columns()
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
    return {"sm_first": rows["sm_first"].astype(np.int32), "sm_last": rows["sm_last"].astype(np.int32),
            "start": est.start[r_sel], "end": est.end[r_sel],
            "green_context": np.array([p.green_context for p in parts], dtype=np.int64)[est.part[r_sel]],
            "name": est.name[r_sel], "measured": np.zeros(len(r_sel), dtype=bool), "kernel": est.kernel[r_sel]}


def _map_positions(pidx: np.ndarray, lo: np.ndarray, hi: np.ndarray, parts: list[Partition]) -> dict[str, np.ndarray]:
    """Turn [lo, hi) positions within each row's partition into SM-id ranges. Partitions whose ids
    are one contiguous run map directly; others are expanded and re-compressed into runs."""
    contiguous = np.array([len(p.sm_ids) > 0 and p.sm_ids[-1] - p.sm_ids[0] == len(p.sm_ids) - 1 for p in parts],
                          dtype=bool)
    base = np.array([p.sm_ids[0] if p.sm_ids else 0 for p in parts], dtype=np.int64)
    simple = contiguous[pidx]
    out_row = [np.flatnonzero(simple)]
    out_first = [base[pidx[simple]] + lo[simple]]
    out_last = [base[pidx[simple]] + hi[simple] - 1]
    hard = np.flatnonzero(~simple)
    if len(hard):
        seg, pos = expand_ranges(lo[hard], hi[hard])
        rows = hard[seg]
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
    return {"row": np.concatenate(out_row), "sm_first": np.concatenate(out_first), "sm_last": np.concatenate(out_last)}
