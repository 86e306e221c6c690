"""SM lanes of a device (measured or estimated), SM-time and the public per-SM analyses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.core.memo import context_of, memo
from tracelab.analyses.results import Finding, SmPartition, SmSummary
from tracelab.analyses.sm.estimate import _Estimate, _estimate, _estimated_columns, _estimated_rows
from tracelab.analyses.sm.partitions import (
    NONE_PARTITION,
    SM_LANE_COLUMNS,
    LaneSource,
    Partition,
    _Device,
    _device,
    _empty_lane_columns,
    _empty_lanes,
    _instrumented,
    _measured_rows,
    _merge_intervals,
    _partitions,
)
from tracelab.model import Timeline
from tracelab.model.grouping import sorted_unique
from tracelab.text_format import fmt_ns

if TYPE_CHECKING:
    import pandas as pd

IDLE_PARTITION_THRESHOLD = 0.5  # busy fraction below which a green-context partition is "idle" (warning)
IDLE_PARTITION_CRITICAL = 0.1
IDLE_PARTITION_INFO = 0.75  # below this a partition's idle SM-time is still reported, as `info`


def _lanes(
    tl: Timeline, rank: int, device: int, source: str = "auto", ordered: bool = True
) -> tuple[pd.DataFrame, LaneSource, _Device, list[Partition], _Estimate | None]:
    """The device's SM lanes; `ordered=False` skips the final sort by start (the SM-time integrals
    sort the times themselves) and, for estimated lanes only, returns them as numpy columns (a dict:
    the SM-time summary of a trace without probe data needs no pandas)."""
    ctx = context_of(tl)
    if not ordered and ctx is not None:  # the estimate the dashboard's SM lanes made on their way (same context)
        got = ctx.take(("sm_estimated", rank, device, source))
        if got is not None:
            return got
    dev = _device(tl, rank, device)
    none = _empty_lanes() if ordered else _empty_lane_columns()
    if dev.sm_count <= 0 or (dev.n_kernels == 0 and dev.blocks is None):
        return none, "none", dev, [], None
    use_measured = dev.blocks is not None and source in ("auto", "measured")
    if source == "measured" and dev.blocks is None:
        return none, "none", dev, [], None
    parts = _partitions(tl, dev) if use_measured else _partitions(tl, dev.without_blocks())
    kernels = dev.kcols
    if not use_measured:
        est = _estimate(tl, dev, parts, kernels)
        columns = _estimated_columns(est, parts)
        if not ordered:  # the SM-time integrals need neither a DataFrame nor the order
            return columns, "estimated", dev, parts, est
        if ctx is not None and not ctx.holds(("sm_time", rank, device, source)):
            # the analysis's SM time, when it comes in this context, starts from these (nothing writes into them)
            ctx.put(("sm_estimated", rank, device, source), (columns, "estimated", dev, parts, est))
        frames = [_estimated_rows(est, parts, columns)]
    else:
        frames = [_measured_rows(dev)]
        probed = _instrumented(dev)
        est = _estimate(tl, dev, parts, {c: v[~probed] for c, v in kernels.items()})
        frames.append(_estimated_rows(est, parts))
    frames = [f for f in frames if len(f)]
    if not ordered and len(frames) == 1:  # the SM-time integrals need neither the dtypes nor the order
        return frames[0], ("measured" if use_measured else "estimated"), dev, parts, est
    import pandas as pd

    lanes = pd.concat(frames, ignore_index=True) if frames else _empty_lanes()
    lanes = lanes.astype(SM_LANE_COLUMNS)
    if ordered:
        lanes = lanes.sort_values(["start", "sm_first"], kind="stable").reset_index(drop=True)
    return lanes, ("measured" if use_measured else "estimated"), dev, parts, est


def sm_lanes(timeline: Timeline, rank: int, device: int) -> tuple[pd.DataFrame, LaneSource]:
    """Per-SM busy intervals of one device (columns `SM_LANE_COLUMNS`) and where they come from.

    auto: measured when the run has probe data for the device (uninstrumented kernels estimated,
    `measured` False on their rows), else estimated; "none" when the device has no kernels or its SM
    count is unknown. Rows cover SM ranges `sm_first..sm_last` (inclusive): measured rows are single
    SMs, estimated rows a contiguous run of SM ids of the kernel's partition."""
    return _lanes(timeline, rank, device)[:2]


def expand_lanes(lanes: pd.DataFrame) -> pd.DataFrame:
    """One row per SM (column `sm`) instead of SM ranges — for small windows and hover text."""
    first = lanes["sm_first"].to_numpy()
    rows, sm = expand_ranges(first, (lanes["sm_last"].to_numpy() + 1).astype(first.dtype))
    out = lanes.iloc[rows].reset_index(drop=True).drop(columns=["sm_first", "sm_last"])
    out.insert(0, "sm", sm.astype(np.int32))
    return out


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
    lanes = _merge_measured(lanes)  # a DataFrame or, estimated only, a dict of columns
    part_ids = [p.green_context for p in parts]
    caps = np.array([max(p.sm_count, 1) for p in parts] + [1], dtype=np.int64)
    gc = np.asarray(lanes["green_context"])
    pmap = {g: i for i, g in enumerate(part_ids)}
    none_idx = pmap.get(NONE_PARTITION, len(parts) - 1 if parts else 0)
    if len(gc):
        uniq, inv = distinct_codes(gc)
        pidx = np.array([pmap.get(int(g), none_idx) for g in uniq], dtype=np.int64)[inv]
    else:
        pidx = np.zeros(0, dtype=np.int64)
    w = (np.asarray(lanes["sm_last"]) - np.asarray(lanes["sm_first"]) + 1).astype(np.int64)
    times = np.concatenate([np.asarray(lanes["start"]), np.asarray(lanes["end"])]).astype(np.int64)
    delta = np.concatenate([w, -w])
    part = np.concatenate([pidx, pidx])
    # order within equal times does not matter: the clipped sums telescope per partition, so the
    # level after the last event at a time is the same in any order (intermediate levels last 0 ns)
    order = np.argsort(times, kind="stable")
    t, d = times[order], delta[order]
    # per-partition running level (grouped cumsum), clipped at the partition size
    if len(parts) <= 1:  # one partition (index 0 for every row): its size is one number
        p = np.zeros(len(t), dtype=part.dtype)
        raw = np.cumsum(d)
        cap: np.ndarray | np.int64 = caps[0]
    else:
        p = part[order]
        porder = np.argsort(p.astype(np.int16), kind="stable")  # radix sort, keeps time order
        raw = np.empty(len(t), dtype=np.int64)
        raw[porder] = _group_cumsum(d[porder], p[porder])
        cap = caps[p]
    clipped = np.minimum(raw, cap)
    if len(parts) <= 1:
        # one running level: each row's level before it is the previous row's (0 before the first, and
        # cap >= 1), so the clipped steps telescope and their running sum is `clipped` itself
        dev_level = np.minimum(clipped, sm_total)
    else:
        prev = np.minimum(raw - d, cap)
        dev_level = np.minimum(np.cumsum(clipped - prev), sm_total)
    per_part: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, g in enumerate(part_ids):
        if len(parts) == 1:  # every row is this partition's
            per_part[g] = (t, clipped)
            continue
        m = p == i
        per_part[g] = (t[m], clipped[m])
    return t, dev_level, per_part


def _merge_measured(lanes: pd.DataFrame) -> pd.DataFrame:
    """Measured rows merged per SM across kernels (two kernels sharing an SM count once)."""
    m = np.asarray(lanes["measured"])
    if not m.any():
        return lanes
    import pandas as pd

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


def sm_utilization(timeline: Timeline, rank: int, device: int, bins: int = 200) -> pd.DataFrame:
    """SM utilization over time: one row per (bin, scope), scope "device" for the whole GPU and
    "partition" per green-context partition (green_context -1 = outside every green context).
    Columns: start, end, scope, green_context, sm_count, busy_sm_ns, utilization, source.
    `bins`: a number of equal bins over the device's span."""
    import pandas as pd

    lanes, src, dev, parts, _ = _lanes(timeline, rank, device)
    cols = ["start", "end", "scope", "green_context", "sm_count", "busy_sm_ns", "utilization", "source"]
    if src == "none" or dev.span[1] <= dev.span[0]:
        return pd.DataFrame({c: [] for c in cols})
    edges = sorted_unique(np.linspace(dev.span[0], dev.span[1], int(bins) + 1).round().astype(np.int64))
    t, lvl, per_part = _level_functions(lanes, parts, dev.sm_count)
    width = np.diff(edges).astype(np.float64)

    def frame(scope: str, g: int, n: int, t: np.ndarray, level: np.ndarray) -> pd.DataFrame:
        busy = np.diff(_cumulative(t, level, edges))
        util = np.where(width > 0, busy / (np.maximum(n, 1) * np.maximum(width, 1)), 0.0)
        return pd.DataFrame(dict(zip(cols, (edges[:-1], edges[1:], scope, g, n, busy, util, src))))

    frames = [frame("device", NONE_PARTITION, dev.sm_count, t, lvl)]
    if any(p.green_context >= 0 for p in parts):
        frames += [frame("partition", p.green_context, p.sm_count, *per_part[p.green_context]) for p in parts]
    return pd.concat(frames, ignore_index=True)


class _SmTime(msgspec.Struct, frozen=True):
    source: LaneSource
    span: tuple[int, int]
    sm_count: int
    device_busy: float  # SM-ns
    partitions: tuple[tuple[Partition, float], ...]  # (partition, busy SM-ns)
    # the device's leading peer wait (`sm_excluded_wait`), left out of the SM figures: busy SM-time and
    # window both exclude it
    excluded: tuple[int, int] | None = None

    @property
    def window_ns(self) -> int:
        """The time the SM figures cover: the span less the excluded leading wait."""
        cut = self.excluded[1] - self.excluded[0] if self.excluded else 0
        return self.span[1] - self.span[0] - cut


def _sm_time(timeline: Timeline, rank: int, device: int, source: str = "auto") -> _SmTime:
    """SM-time of a device and its partitions, once per analysis context (analyze asks for the
    summary and the findings of every device)."""
    return memo(timeline, ("sm_time", rank, device, source), lambda: _compute_sm_time(timeline, rank, device, source))


def _compute_sm_time(timeline: Timeline, rank: int, device: int, source: str) -> _SmTime:
    lanes, src, dev, parts, _ = _lanes(timeline, rank, device, source, ordered=False)
    if src == "none" or dev.span[1] <= dev.span[0]:
        return _SmTime("none", dev.span, dev.sm_count, 0.0, ())
    t, lvl, per_part = _level_functions(lanes, parts, dev.sm_count)
    t0, t1 = dev.span
    cut = sm_excluded_wait(timeline, rank, device)

    def busy_of(times: np.ndarray, level: np.ndarray) -> float:
        b = _busy_between(times, level, t0, t1)
        return b - _busy_between(times, level, *cut) if cut else b

    busy = busy_of(t, lvl)
    pb = tuple((p, busy_of(*per_part[p.green_context])) for p in parts)
    return _SmTime(src, dev.span, dev.sm_count, busy, pb, cut)


def sm_excluded_wait(timeline: Timeline, rank: int, device: int) -> tuple[int, int] | None:
    """[start, end) the SM figures of a device leave out: the wait of its first matched collective for
    the last rank to join (`leading_wait.LeadingWait`: before the ranks first synchronise, the wait
    depends on when each rank's recording started). Only while the device does nothing else: the cut
    ends where other GPU work of the device starts. None when the device did not wait, when the
    ranks' clocks disagree (the collective ended before the last rank arrived), or with one GPU."""
    from tracelab.analyses.core.memo import column
    from tracelab.analyses.core.rows import rows_of_device
    from tracelab.analyses.ranks.leading_wait import leading_waits

    w = leading_waits(timeline).get((rank, device))
    if w is None or not w.consistent:
        return None
    gpu = rows_of_device(timeline, rank, device)
    s, e = column(timeline, "start")[gpu], column(timeline, "end")[gpu]
    other = (gpu != w.row) & (e > w.start_ns) & (s < w.end_ns)
    end = min(w.end_ns, max(int(s[other].min()), w.start_ns)) if other.any() else w.end_ns
    return (w.start_ns, end) if end > w.start_ns else None


def sm_summary(timeline: Timeline, rank: int, device: int) -> SmSummary:
    """Source, busy fraction (busy SM-time / (SMs x span)) and green-context partitions of a device.
    Partitions are listed only when the device has green contexts: each green context, plus
    partition None for the SMs no green context holds (when there are any). Work outside green
    contexts on a device whose green contexts hold every SM counts in the device's busy fraction
    only."""
    st = _sm_time(timeline, rank, device)
    if st.source == "none":
        return SmSummary()
    span = st.window_ns
    frac = st.device_busy / (st.sm_count * span) if st.sm_count and span else 0.0
    partitions: tuple[SmPartition, ...] = ()
    if any(p.green_context >= 0 for p, _ in st.partitions):
        partitions = tuple(  # the listed partitions are disjoint: their SM counts add up
            SmPartition(None if p.green_context < 0 else p.green_context, p.sm_count,
                        round(b / (p.sm_count * span), 6) if p.sm_count and span else 0.0)
            for p, b in st.partitions if not p.overlaps)
    excluded = st.excluded[1] - st.excluded[0] if st.excluded else 0
    return SmSummary(source=st.source, busy_fraction=round(frac, 6), partitions=partitions, excluded_wait_ns=excluded)


def _gpu_devices(timeline: Timeline) -> list[tuple[int, int]]:
    keys = {(d.rank, d.device) for d in timeline.devices}
    if timeline.sm_blocks is not None and len(timeline.sm_blocks):
        keys |= set(map(tuple, timeline.sm_blocks[["rank", "device"]].drop_duplicates().to_numpy().tolist()))
    return sorted((int(r), int(d)) for r, d in keys)


def idle_partition_findings(timeline: Timeline) -> list[Finding]:
    """Rule `idle_partition`: a green-context partition busy less than half of the device's span
    (warning; critical under 10%), or less than three quarters of it (info).
    wasted_ns = the partition's idle SM-time expressed as whole-device time (idle SM-ns / device
    SMs); data carries the raw numbers (idle_sm_ns, sm_count, busy_fraction, span_ns, source); the prose is
    the rule's (`rules.idle_partition.describe`)."""
    findings: list[Finding] = []
    for rank, device in _gpu_devices(timeline):
        st = _sm_time(timeline, rank, device)
        if st.source == "none":
            continue
        span = st.window_ns
        for p, busy in st.partitions:
            if p.green_context < 0 or p.sm_count <= 0 or span <= 0:
                continue
            frac = busy / (p.sm_count * span)
            if frac >= IDLE_PARTITION_INFO:
                continue
            idle_sm_ns = p.sm_count * span - busy
            severity = ("critical" if frac < IDLE_PARTITION_CRITICAL
                        else "warning" if frac < IDLE_PARTITION_THRESHOLD else "info")
            data = {
                "green_context": p.green_context, "sm_count": p.sm_count, "device_sm_count": st.sm_count,
                "busy_fraction": round(frac, 6), "idle_sm_ns": round(idle_sm_ns), "span_ns": int(span),
                "source": st.source,
                # the leading peer wait left out of the span (sm_excluded_wait), 0 when none
                "excluded_wait_ns": int(st.excluded[1] - st.excluded[0]) if st.excluded else 0,
                "start_ns": int(st.span[0]), "end_ns": int(st.span[1]),  # the whole span: it idles throughout
            }
            findings.append(Finding("idle_partition", severity, 1, round(idle_sm_ns / max(st.sm_count, 1)), data=data))
    return findings


def sm_notes(timeline: Timeline) -> list[str]:
    """What the SM figures of each device leave out or cannot know, one line each: the leading peer
    wait they exclude (`sm_excluded_wait`) or keep (clocks disagree), kernels whose launch
    configuration the trace lacks (counted on their whole partition). A device without an SM count
    has no SM figures at all, and no note."""
    from tracelab.analyses.core.rows import device_rows
    from tracelab.analyses.ranks.leading_wait import leading_waits

    notes: list[str] = []
    waits = leading_waits(timeline)
    for dr in device_rows(timeline):
        where = f"rank {dr.rank} GPU {dr.device}"
        dev = _device(timeline, dr.rank, dr.device)
        if dev.sm_count <= 0:  # no SM figures are printed at all (no number to qualify)
            continue
        w = waits.get((dr.rank, dr.device))
        cut = sm_excluded_wait(timeline, dr.rank, dr.device)
        if cut is not None and w is not None:
            notes.append(
                f"{where}: the SM figures leave out {fmt_ns(cut[1] - cut[0])} in which its first {w.name} "
                f"waited for rank {w.last_rank} to join (until the ranks first synchronise, that wait is set "
                "by when each rank started, e.g. its profiler, not by the workload)"
            )
        elif w is not None and not w.consistent:
            notes.append(
                f"{where}: its first {w.name} ended before rank {w.last_rank} joined it (the ranks' clocks "
                f"disagree): the SM figures keep the {fmt_ns(w.end_ns - w.start_ns)} it seemed to wait"
            )
        if dev.n_kernels and dev.blocks is None:
            unknown = int((dev.kcols["grid_x"] <= 0).sum())
            if unknown:
                notes.append(
                    f"{where}: {unknown} of {dev.n_kernels} kernels have no launch configuration (grid) in the "
                    "trace: the SM estimate counts each on its whole partition (an upper bound)"
                )
    return notes
