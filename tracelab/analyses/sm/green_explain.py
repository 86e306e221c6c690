"""Green contexts: why a variant is slower or faster than `sequential` (see `tracelab.analyses.sm.summary`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np

from tracelab.analyses.sm.estimate import _estimate
from tracelab.analyses.sm.lanes import _sm_time
from tracelab.analyses.sm.partitions import (
    NONE_PARTITION,
    LaneSource,
    Partition,
    _Device,
    _device,
    _instrumented,
    _partitions,
    kernel_columns,
)
from tracelab.model import EventKind, Timeline

if TYPE_CHECKING:
    import pandas as pd

_MATMUL = re.compile(r"gemm|matmul|xmma|cutlass|nvjet|_mm_|sm\d+_.*tensorop|cublas", re.IGNORECASE)


class GreenContextExplanation(msgspec.Struct, frozen=True):
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
    baseline: str = "sequential"  # the run compared against: its variant name, else "baseline"
    # for the words (tracelab.render.text.green); not in the JSON document
    elementwise_green_context: int | None = None  # the partition the elementwise kernels run on
    elementwise_sm_count: int = 0  # its SMs
    device_sm_count: int = 0  # the variant device's SMs
    uninstrumented_launches: int = 0  # kernel launches without probe blocks (estimated SM lanes)


WORDS_ONLY = ("elementwise_green_context", "elementwise_sm_count", "device_sm_count", "uninstrumented_launches")
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
    var, seq = _device(variant_tl, rv, dv), _device(sequential_tl, rs, ds)
    v_span, s_span = var.span[1] - var.span[0], seq.span[1] - seq.span[0]
    ratio = _ratio(v_span, s_span)
    s_mm, v_k, s_k = _matmul_kernels(variant_tl, var, sequential_tl, seq)
    v_parts = _partitions(variant_tl, var)
    mm_gc, mm_part = _partition_of(v_k, v_parts)
    ew_v, ew_s = _elementwise_kernels(variant_tl, var, v_k, sequential_tl, seq, s_mm)
    _, ew_part = _partition_of(ew_v, v_parts)
    load = _partition_load(variant_tl, rv, dv, v_span)
    mm_v, mm_s = _total_ns(v_k), _total_ns(s_k)
    ew_nv, ew_ns = _total_ns(ew_v), _total_ns(ew_s)
    sms_v, sms_s = mm_part.sm_count if mm_part else var.sm_count, seq.sm_count
    return GreenContextExplanation(
        variant=variant_tl.meta.variant or "variant", variant_span_ns=int(v_span), sequential_span_ns=int(s_span),
        ratio=float(ratio), verdict="slowdown" if ratio > 1.05 else "speedup" if ratio < 0.95 else "same",
        matmul_name=sequential_tl.name(s_mm),
        matmul_name_variant=variant_tl.name(int(v_k["name"].iloc[0])) if len(v_k) else "",
        matmul_grid_variant=_grid(v_k), matmul_grid_sequential=_grid(s_k), matmul_ns_variant=mm_v,
        matmul_ns_sequential=mm_s, matmul_ratio=float(_ratio(mm_v, mm_s)),
        matmul_green_context=None if mm_gc < 0 else mm_gc, matmul_sms_variant=int(sms_v),
        matmul_sms_sequential=int(sms_s), sm_ratio=float(sms_v / sms_s if sms_s else 0.0),
        matmul_waves_variant=_waves(variant_tl, var, v_parts, v_k),
        matmul_waves_sequential=_waves(sequential_tl, seq, _partitions(sequential_tl, seq.without_blocks()), s_k),
        elementwise_ns_variant=ew_nv, elementwise_ns_sequential=ew_ns, elementwise_ratio=float(_ratio(ew_nv, ew_ns)),
        baseline=sequential_tl.meta.variant or "baseline",
        elementwise_green_context=None if ew_part is None else ew_part.green_context,
        elementwise_sm_count=0 if ew_part is None else ew_part.sm_count,
        device_sm_count=int(var.sm_count),
        uninstrumented_launches=int((~_instrumented(var)).sum()) if var.blocks is not None else len(var.kernels),
        **load,
    )


def _ratio(a: float, b: float) -> float:
    """a / b, infinite when b is 0."""
    return a / b if b else float("inf")


def _matmul_kernels(variant_tl: Timeline, var: _Device, sequential_tl: Timeline, seq: _Device,
                    ) -> tuple[int, pd.DataFrame, pd.DataFrame]:
    """The matmul: picked in `sequential` (its name id there), found by name in the variant (or the
    variant's own biggest GEMM, when a different kernel was chosen for the partition); the launches of each."""
    s_mm = _matmul_id(sequential_tl, seq.kernels)
    mm_name = sequential_tl.name(s_mm)
    v_ids = [i for i, x in enumerate(variant_tl.strings) if x == mm_name]
    v_k = var.kernels[np.isin(var.kernels["name"].to_numpy(), v_ids)] if v_ids else var.kernels[:0]
    if not len(v_k):
        v_k = var.kernels[var.kernels["name"].to_numpy() == _matmul_id(variant_tl, var.kernels)]
    return s_mm, v_k, seq.kernels[seq.kernels["name"].to_numpy() == s_mm]


def _elementwise_kernels(variant_tl: Timeline, var: _Device, v_k: pd.DataFrame, sequential_tl: Timeline, seq: _Device,
                         s_mm: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The elementwise work: the variant's other kernels (not the matmul `v_k`, not probes), and the
    same kernel names in `sequential` (not its matmul `s_mm`)."""
    names_v = variant_tl.names(var.kernels["name"])
    not_probe = np.array([not _PROBE.search(n) for n in names_v], dtype=bool)
    ew_mask = not_probe & ~var.kernels.index.isin(v_k.index)
    ew_names = set(names_v[ew_mask].tolist())
    seq_names = sequential_tl.names(seq.kernels["name"])
    ew_s = seq.kernels[np.isin(seq_names, list(ew_names)) & (seq.kernels["name"].to_numpy() != s_mm)]
    return var.kernels[ew_mask], ew_s


def _partition_of(k: pd.DataFrame, parts: list[Partition]) -> tuple[int, Partition | None]:
    """The green context most of the kernels `k` run on (NONE_PARTITION without kernels), and its partition."""
    gc = int(k["green_context"].mode().iloc[0]) if len(k) else NONE_PARTITION
    return gc, next((p for p in parts if p.green_context == gc), None)


def _waves(tl: Timeline, dev: _Device, parts: list[Partition], k: pd.DataFrame) -> int:
    """Waves of the first launch of `k` (0 when its launch configuration is unknown)."""
    if not len(k) or int(k["grid_x"].iloc[0]) <= 0:
        return 0
    return int(_estimate(tl, dev.without_blocks(), parts, kernel_columns(k.iloc[:1])).waves[0])


def _partition_load(variant_tl: Timeline, rank: int, device: int, v_span: int) -> dict[str, Any]:
    """How busy the variant's green-context partitions keep their SMs over its span: the busiest one (its
    work sets the span), the smallest and the largest (None / 0 without green contexts)."""
    st = _sm_time(variant_tl, rank, device)
    span = max(v_span, 1)
    green = [(p, b) for p, b in st.partitions if p.green_context >= 0]

    def frac(pb: tuple[Partition, float]) -> float:
        return pb[1] / (max(pb[0].sm_count, 1) * span)

    def fields(pb: tuple[Partition, float] | None) -> tuple[int | None, int, float, int]:
        if pb is None:
            return None, 0, 0.0, 0
        return pb[0].green_context, pb[0].sm_count, float(frac(pb)), round(pb[0].sm_count * span - pb[1])

    def sms(pb: tuple[Partition, float]) -> int:
        return pb[0].sm_count

    out: dict[str, Any] = {}
    for which, pb, keys in (("starving", max(green, key=frac) if green else None, 3),
                            ("small", min(green, key=sms) if green else None, 4),
                            ("large", max(green, key=sms) if green else None, 4)):
        names = ("green_context", "sm_count", "busy_fraction", "idle_sm_ns")[:keys]
        out |= {f"{which}_{k}": v for k, v in zip(names, fields(pb))}
    return out | {"source": st.source}


def _grid(k: pd.DataFrame) -> int:
    """Blocks per launch of the first kernel of `k` (0 when unknown)."""
    x, y, z = (int(k[c].iloc[0]) for c in ("grid_x", "grid_y", "grid_z")) if len(k) else (0, 0, 0)
    return x * max(y, 1) * max(z, 1) if x > 0 else 0


