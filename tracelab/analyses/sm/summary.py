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
  W = ceil(G / (B x S)) waves is reported by the green-context explanation. Kernels running at the same
  time on one partition share SMs in a way no trace records: there the estimate is an upper bound
  (tests/sm_agreement.py checks it against the probes).

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

busy fraction = busy SM-time / (SM count x window), window = first start to last end of the device's GPU
activity (kernels, memcpys, memsets), as in `analyze`, less the device's leading peer wait on a multi-GPU
run (`sm_time.sm_excluded_wait`: its first collective waiting for the last rank to join, which depends on
when each rank's profiler started), left out of the busy SM-time too and named in the analysis notes.

Modules: `partitions` (with the probe blocks' lanes), `estimate`, `lanes` (lanes, SM-time, summary, findings),
`green_explain`; this one is the public face, and holds the per-SM grid for figures (`sm_grid`).
"""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.sm.green_explain import green_context_explanation
from tracelab.analyses.sm.lanes import (
    IDLE_PARTITION_INFO,
    IDLE_PARTITION_THRESHOLD,
    _lanes,
    _sm_time,
    expand_lanes,
    idle_partition_findings,
    sm_lanes,
    sm_summary,
    sm_utilization,
)
from tracelab.analyses.sm.partitions import NONE_PARTITION, LaneSource
from tracelab.model import Timeline
from tracelab.model.grouping import sorted_unique

__all__ = [
    "IDLE_PARTITION_INFO", "IDLE_PARTITION_THRESHOLD", "SmGrid", "_range_bin_coverage", "_sm_time", "expand_lanes",
    "green_context_explanation", "idle_partition_findings", "sm_grid", "sm_lanes", "sm_summary", "sm_utilization",
]


class SmGrid(msgspec.Struct, frozen=True):
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


def _range_bin_coverage(sm_first: np.ndarray, sm_last: np.ndarray, start: np.ndarray, end: np.ndarray, n_sm: int,
                        edges: np.ndarray) -> np.ndarray:
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


def sm_grid(timeline: Timeline, rank: int, device: int, bins: int = 400) -> SmGrid:
    """Busy fraction per SM per time bin over the device's span."""
    lanes, src, dev, parts, _ = _lanes(timeline, rank, device)
    lo, hi = dev.span[0], max(dev.span[1], dev.span[0] + 1)
    edges = sorted_unique(np.linspace(lo, hi, max(int(bins), 1) + 1).round().astype(np.int64))
    n_sm = max(dev.sm_count, int(lanes["sm_last"].max()) + 1 if len(lanes) else 0)
    cover = _range_bin_coverage(*(lanes[c].to_numpy() for c in ("sm_first", "sm_last", "start", "end")), n_sm, edges)
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
        source=src, device_label=label, sm_count=dev.sm_count, edges=edges, sm_ids=order.astype(np.int64),
        sm_partition=owner[order], busy=busy[order],
        partitions=tuple((p.green_context, p.sm_count) for p in parts),
        estimated_kernels=int(lanes.loc[~lanes["measured"], "kernel"].nunique()) if src == "measured" else 0,
    )
