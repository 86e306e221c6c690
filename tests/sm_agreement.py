"""Do the estimated SM lanes agree with the measured ones? Per device and per kernel, where a run has both
(tests/test_sm.py, tests/test_sm_recorded.py: docs/DECISIONS.md "Per-SM lanes", judged per kernel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tracelab.analyses.sm.estimate import _estimate, _estimated_rows
from tracelab.analyses.sm.lanes import (
    _busy_between,
    _cumulative,
    _level_functions,
)
from tracelab.analyses.sm.partitions import (
    Partition,
    _device,
    _instrumented,
    _measured_rows,
    _merge_intervals,
    _partitions,
)
from tracelab.model import Timeline

if TYPE_CHECKING:
    import pandas as pd


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
    rows = _estimated_rows(_estimate(timeline, dev, parts, dev.kcols), parts)
    mine = np.isin(rows["kernel"].to_numpy(), dev.kcols["row"][inst])
    e = float(_shared_sm_ns(rows, parts, t0, t1)[mine].sum())
    return SmAgreement(m, e, (e - m) / m if m else float("inf"), int(inst.sum()))


def _shared_sm_ns(rows: pd.DataFrame, parts: list[Partition], t0: int, t1: int) -> np.ndarray:
    """Estimated SM-time of each estimated lane row within [t0, t1): its SMs x its duration, where
    the kernels of its partition want more SMs than the partition has each getting its
    proportional share (the clipping `sm_summary` does). One pass per partition."""
    out = np.zeros(len(rows), dtype=np.float64)
    for p in parts:
        sel = np.flatnonzero(rows["green_context"].to_numpy() == p.green_context)
        pr = rows.iloc[sel]
        w = (pr["sm_last"].to_numpy() - pr["sm_first"].to_numpy() + 1).astype(np.int64)
        start, end = pr["start"].to_numpy(), pr["end"].to_numpy()
        times = np.concatenate([start, end])
        order = np.argsort(times, kind="stable")
        t = times[order]
        level = np.cumsum(np.concatenate([w, -w])[order])
        share = np.where(level > 0, np.minimum(1.0, max(p.sm_count, 1) / np.maximum(level, 1)), 0.0)
        a = _cumulative(t, share, np.clip(start, t0, t1))
        b = _cumulative(t, share, np.clip(end, t0, t1))
        out[sel] = w * (b - a)
    return out


@dataclass(frozen=True)
class KernelSmAgreement:
    """Measured vs estimated SM-time of the probe-instrumented kernel invocations of one device,
    kernel by kernel (no union across concurrent kernels)."""

    measured_sm_ns: float  # sum over kernels of the per-SM union of their blocks
    estimated_sm_ns: float  # sum over kernels of estimated SMs x duration
    relative_error: float  # (estimated - measured) / measured
    kernels: int  # instrumented kernel invocations compared
    worst_kernel: int  # row in Timeline.events of the kernel with the largest |relative error|
    worst_relative_error: float  # that kernel's (estimated - measured) / measured
    # the same with each kernel's proportional share of its partition while the partition's kernels
    # (instrumented or not) want more SMs than it has
    shared_estimated_sm_ns: float
    shared_relative_error: float
    contended_kernels: int  # instrumented kernels whose share fell below 1 at some point


def kernel_sm_agreement(timeline: Timeline, rank: int, device: int) -> KernelSmAgreement | None:
    """How far the estimate is from the measurement kernel by kernel, as SM-time (None without
    probe blocks that name their kernel, `Timeline.sm_blocks["kernel"]`).

    For every instrumented kernel invocation: measured = sum over the SMs its blocks ran on of the
    union of its blocks there (clipped to the kernel's trace interval); estimated = the SMs the
    estimate gives it (min(grid, partition SMs), from its launch configuration and its partition's
    SM count as the estimated lanes use them, without the probe data) x its duration. Unlike
    `estimate_agreement` this does not ask which SMs concurrent kernels share, which no launch
    configuration tells. `shared_*`: the same estimate with the partition clipping of
    `_shared_sm_ns` (concurrent kernels that together want more SMs than the partition has, e.g. a
    multi-wave kernel beside a cuBLAS GEMM, split it)."""
    dev = _device(timeline, rank, device)
    if dev.blocks is None or dev.sm_count <= 0 or "kernel" not in dev.blocks.columns:
        return None
    b = dev.blocks
    krow = b["kernel"].to_numpy().astype(np.int64)
    known = np.isin(krow, dev.kcols["row"])  # -1 / rows of other events drop out
    if not known.any():
        return None
    krow = krow[known]
    ev = timeline.events
    k_start = ev["start"].to_numpy()[krow]
    k_end = ev["end"].to_numpy()[krow]
    start = np.clip(b["start"].to_numpy()[known].astype(np.int64), k_start, k_end)
    end = np.clip(b["end"].to_numpy()[known].astype(np.int64), k_start, k_end)
    sm_ = b["sm"].to_numpy()[known].astype(np.int64)
    first, ms, me = _merge_intervals([krow, sm_], start, end)  # union per (kernel, SM)
    kernels, inv = np.unique(krow[first], return_inverse=True)
    measured = np.bincount(inv, weights=(me - ms).astype(np.float64), minlength=len(kernels))
    # the estimate as the estimated lanes make it (partitions without the probe data), for every
    # kernel of the device: the uninstrumented ones take their part of the partition share
    parts = _partitions(timeline, dev.without_blocks())
    est = _estimate(timeline, dev, parts, dev.kcols)
    mine = np.isin(est.kernel, kernels)  # est follows dev.kcols' (ascending) row order
    estimated = est.sms[mine].astype(np.float64) * (est.end - est.start)[mine].astype(np.float64)
    rows = _estimated_rows(est, parts)
    rk = rows["kernel"].to_numpy()
    rmine = np.isin(rk, kernels)
    shared = np.bincount(
        np.searchsorted(kernels, rk[rmine]),
        weights=_shared_sm_ns(rows, parts, *dev.span)[rmine],
        minlength=len(kernels),
    )
    m, e, sh = float(measured.sum()), float(estimated.sum()), float(shared.sum())
    per = np.where(measured > 0, (estimated - measured) / np.maximum(measured, 1.0), np.inf)
    worst = int(np.argmax(np.abs(per)))
    return KernelSmAgreement(
        measured_sm_ns=m,
        estimated_sm_ns=e,
        relative_error=(e - m) / m if m else float("inf"),
        kernels=len(kernels),
        worst_kernel=int(kernels[worst]),
        worst_relative_error=float(per[worst]),
        shared_estimated_sm_ns=sh,
        shared_relative_error=(sh - m) / m if m else float("inf"),
        contended_kernels=int((shared < estimated * (1 - 1e-9)).sum()),
    )
