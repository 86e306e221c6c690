"""Compute/communication overlap per rank, the SMs NCCL occupies, collective skew across ranks, and
why a partitioned variant (communication on its own green context) is faster or slower than another.

Definitions (per rank and device; probe kernels `tl_probe_*` left out):
- compute = kernels without `Flag.COMM`; comm = kernels with it (NCCL / RCCL names).
- `compute_ns`, `comm_ns`: lengths of the unions of those kernels' intervals; `overlap_ns`: the
  length of their intersection; `comm_overlapped` = overlap_ns / comm_ns.
- NCCL's SMs: one CTA per channel, each CTA resident on one SM for the whole kernel (NCCL kernels are
  persistent), so a comm kernel occupies min(grid blocks, SMs of its partition) SMs — the same
  estimate as `tracelab.analyses.sm.estimate`; `comm_sms` is the largest such value on the rank.
- Collectives are matched across ranks by `tracelab.analyses.ranks.collectives` (the k-th call of each
  operation on every GPU); the explanation reports their mean arrival skew.
- Pace: in a run whose compute and comm run in different green contexts, the partition whose work
  covers more of the span sets the pace (its busy fraction is the higher one).
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec
import numpy as np

from tracelab.analyses.core.intervals import intersection_length, merge
from tracelab.model import EventKind, Flag, Timeline

_PROBE = re.compile(r"^tl_probe_")
SAME_BAND = 0.05  # ratios within ±5 % count as "the same"


class RankComm(msgspec.Struct, frozen=True):
    """Compute/comm figures of one (rank, device)."""

    rank: int
    device: int
    span_ns: int
    compute_ns: int  # union of compute kernels
    comm_ns: int  # union of comm kernels
    overlap_ns: int  # compute ∩ comm
    compute_kernel_ns: int  # sum of compute kernel durations
    comm_kernel_ns: int  # sum of comm kernel durations
    comm_kernels: int
    comm_sms: int  # SMs the comm kernels occupy (estimate: min(blocks, partition SMs))
    comm_green_context: int | None
    comm_partition_sms: int
    compute_green_context: int | None
    compute_partition_sms: int

    @property
    def comm_overlapped(self) -> float:
        return self.overlap_ns / self.comm_ns if self.comm_ns else 0.0


def _gpu_kernels(tl: Timeline) -> np.ndarray:
    ev = tl.events
    rows = np.flatnonzero(ev["kind"].to_numpy() == int(EventKind.KERNEL))
    probe_ids = [i for i, s in enumerate(tl.strings) if _PROBE.match(s)]
    if probe_ids:
        rows = rows[~np.isin(ev["name"].to_numpy()[rows], probe_ids)]
    return rows


def _partition_sms(tl: Timeline, rank: int, device: int, gc: int | None, device_sms: int) -> int:
    if gc is None:
        return device_sms
    for c in tl.contexts:
        if c.rank == rank and c.device == device and c.green_context == gc and c.sm_count:
            return int(c.sm_count)
    return device_sms


def _mode(values: np.ndarray) -> int | None:
    v = values[values >= 0]
    if not v.size:
        return None
    u, n = np.unique(v, return_counts=True)
    return int(u[np.argmax(n)])


def rank_comm(tl: Timeline) -> tuple[RankComm, ...]:
    """Compute/comm overlap and NCCL's SMs per (rank, device), in (rank, device) order."""
    ev = tl.events
    rows = _gpu_kernels(tl)
    gpu = np.flatnonzero(tl.gpu_mask())
    out: list[RankComm] = []
    rank_c, dev_c = ev["rank"].to_numpy(), ev["device"].to_numpy()
    start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
    flags, gcol = ev["flags"].to_numpy(), ev["green_context"].to_numpy()
    grid = np.maximum(ev["grid_x"].to_numpy().astype(np.int64), 0)
    for c in ("grid_y", "grid_z"):
        grid = grid * np.maximum(ev[c].to_numpy().astype(np.int64), 1)
    keys = sorted({(int(r), int(d)) for r, d in zip(rank_c[gpu], dev_c[gpu])})
    for rank, device in keys:
        on_dev = gpu[(rank_c[gpu] == rank) & (dev_c[gpu] == device)]
        k = rows[(rank_c[rows] == rank) & (dev_c[rows] == device)]
        comm = k[(flags[k] & Flag.COMM) != 0]
        comp = k[(flags[k] & Flag.COMM) == 0]
        span = int(end[on_dev].max() - start[on_dev].min()) if on_dev.size else 0
        cs, ce = merge(start[comp], end[comp])
        ms, me = merge(start[comm], end[comm])
        info = tl.device_info(rank, device)
        dev_sms = int(info.sm_count) if info and info.sm_count else 0
        comm_gc, comp_gc = _mode(gcol[comm]), _mode(gcol[comp])
        comm_part = _partition_sms(tl, rank, device, comm_gc, dev_sms)
        blocks = grid[comm]
        known = blocks > 0
        sms_each = np.minimum(blocks, comm_part if comm_part else blocks)
        out.append(RankComm(
            rank, device, span, int((ce - cs).sum()), int((me - ms).sum()), int(intersection_length(cs, ce, ms, me)),
            int((end[comp] - start[comp]).sum()), int((end[comm] - start[comm]).sum()), int(comm.size),
            int(sms_each[known].max()) if known.any() else 0, comm_gc, comm_part, comp_gc,
            _partition_sms(tl, rank, device, comp_gc, dev_sms),
        ))
    return tuple(out)


class CommOverlapExplanation(msgspec.Struct, frozen=True):
    """Why a variant's step is faster or slower than a baseline's, from both runs' numbers (rank
    figures are averaged over ranks; spans are the slowest rank's)."""

    variant: str
    baseline: str
    variant_span_ns: int
    baseline_span_ns: int
    ratio: float  # variant span / baseline span (> 1: slower)
    verdict: Literal["slowdown", "speedup", "same"]
    compute_ratio: float  # compute kernel time, variant / baseline
    comm_ratio: float  # comm kernel time, variant / baseline
    variant_overlap: float  # share of comm time overlapped with compute, variant
    baseline_overlap: float
    variant_comm_sms: int
    baseline_comm_sms: int
    variant_comm_partition_sms: int
    variant_compute_partition_sms: int
    partitioned: bool  # compute and comm in different green contexts in the variant
    pace: Literal["compute", "comm", "shared"]  # which side's work spans more of the variant's run
    pace_busy_fraction: float  # that side's union / span
    other_busy_fraction: float
    variant_skew_ns: int
    baseline_skew_ns: int


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def comm_overlap_explanation(variant_tl: Timeline, baseline_tl: Timeline, variant: str = "", baseline: str = "",
                             ) -> CommOverlapExplanation:
    v, b = rank_comm(variant_tl), rank_comm(baseline_tl)
    if not v or not b:
        raise ValueError("both runs need GPU kernels")
    v_span, b_span = max(r.span_ns for r in v), max(r.span_ns for r in b)
    ratio = v_span / b_span if b_span else float("inf")
    verdict: Literal["slowdown", "speedup", "same"] = (
        "slowdown" if ratio > 1 + SAME_BAND else "speedup" if ratio < 1 - SAME_BAND else "same")
    v_comp, b_comp = _mean([r.compute_kernel_ns for r in v]), _mean([r.compute_kernel_ns for r in b])
    v_comm, b_comm = _mean([r.comm_kernel_ns for r in v]), _mean([r.comm_kernel_ns for r in b])
    partitioned = any(r.comm_green_context is not None and r.comm_green_context != r.compute_green_context for r in v)
    comp_busy = _mean([r.compute_ns / r.span_ns for r in v if r.span_ns])
    comm_busy = _mean([r.comm_ns / r.span_ns for r in v if r.span_ns])
    pace: Literal["compute", "comm", "shared"] = (
        "shared" if abs(comp_busy - comm_busy) < SAME_BAND else "compute" if comp_busy > comm_busy else "comm")
    return CommOverlapExplanation(
        variant or variant_tl.meta.variant or "B", baseline or baseline_tl.meta.variant or "A", v_span, b_span, ratio,
        verdict, v_comp / b_comp if b_comp else float("inf"), v_comm / b_comm if b_comm else float("inf"),
        _mean([r.comm_overlapped for r in v]), _mean([r.comm_overlapped for r in b]), max(r.comm_sms for r in v),
        max(r.comm_sms for r in b), min(r.comm_partition_sms for r in v), min(r.compute_partition_sms for r in v),
        partitioned, pace, max(comp_busy, comm_busy) if pace != "shared" else comp_busy,
        min(comp_busy, comm_busy) if pace != "shared" else comm_busy, mean_skew_ns(variant_tl), mean_skew_ns(baseline_tl),
    )


def mean_skew_ns(tl: Timeline) -> int:
    """Mean arrival skew of the collectives matched across ranks (`tracelab.analyses.ranks.collectives`);
    0 when nothing matches."""
    from tracelab.analyses.ranks.collectives import match_collectives  # a one-rank `analyze` never loads it

    calls = match_collectives(tl).calls
    return round(float(np.mean([c.skew_ns for c in calls]))) if calls else 0


def has_comm(tl: Timeline) -> bool:
    """Whether the run has communication kernels (the explanation applies)."""
    return bool(((tl.col("flags") & Flag.COMM) != 0)[tl.col("kind") == int(EventKind.KERNEL)].any())
