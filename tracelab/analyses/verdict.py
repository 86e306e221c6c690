"""The verdict of a comparison: is B faster or slower per steady-state GPU step than A, by how much,
and which idle causes moved; plus the caveats when the two runs are unrelated."""

from __future__ import annotations

from typing import Literal

import numpy as np

from tracelab.analyses.comparison import Delta, DeviceComparison, FindingDelta, GapCauseDelta, Verdict
from tracelab.analyses.device.kernels import kernel_summary
from tracelab.analyses.results import Analysis
from tracelab.analyses.steps.steady import steady_step_time
from tracelab.model import Timeline

VERDICT_CAUSES = 3


def step_durations(an: Analysis) -> np.ndarray:
    """Durations (ns) of the analysis' steps, every rank (empty when the trace marks none)."""
    return np.array([s.end_ns - s.start_ns for s in an.steps], dtype=np.int64)


def _gpu_span(an: Analysis) -> int:
    return int(max(d.end_ns for d in an.devices) - min(d.start_ns for d in an.devices)) if an.devices else 0


def verdict(a: Analysis, b: Analysis, devices: list[DeviceComparison], gaps: tuple[GapCauseDelta, ...],
            findings: tuple[FindingDelta, ...], a_steps: np.ndarray, b_steps: np.ndarray) -> Verdict | None:
    """Per-step time when both runs mark steps, else GPU span; idle change; the causes that moved."""
    if not a.devices and not b.devices:
        return None
    na, nb = int(a_steps.size), int(b_steps.size)
    sa, sb = steady_step_time(a.step_rows), steady_step_time(b.step_rows)
    spread_a = spread_b = 0
    warnings: list[str] = []
    basis: Literal["gpu_step", "step", "span"]
    if na and nb and sa is not None and sb is not None:
        basis, a_ns, b_ns = "gpu_step", sa.ns, sb.ns
        spread_a, spread_b = sa.spread_ns, sb.spread_ns
        if sa.total_steps != sb.total_steps:
            warnings.append(f"step counts differ: A {sa.total_steps}, B {sb.total_steps}")
        if sa.source != sb.source:
            warnings.append(f"steps found differently: A {sa.source}, B {sb.source}")
        if len(sa.per_rank) != len(sb.per_rank):
            warnings.append(f"rank counts differ: A {len(sa.per_rank)}, B {len(sb.per_rank)}")
    elif na and nb:
        basis = "step"
        a_ns, b_ns = round(float(a_steps.mean())), round(float(b_steps.mean()))
    else:
        basis, a_ns, b_ns = "span", _gpu_span(a), _gpu_span(b)
        if bool(na) != bool(nb) or (sa is None) != (sb is None):
            warnings.append("only one run has steps: compared by GPU span")
    both = [d for d in devices if d.present == "both"] or devices
    idle = Delta(sum(d.idle_ns.a for d in both), sum(d.idle_ns.b for d in both))
    span = Delta(sum(d.span_ns.a for d in both), sum(d.span_ns.b for d in both))
    moved = sorted((g for g in gaps if g.total_ns.delta), key=lambda g: -abs(g.total_ns.delta))
    return Verdict(basis, int(a_ns), int(b_ns), na, nb, idle, idle.a / span.a if span.a else 0.0,
                   idle.b / span.b if span.b else 0.0, tuple(moved[:VERDICT_CAUSES]),
                   tuple(f.rule for f in findings if f.status == "new"),
                   tuple(f.rule for f in findings if f.status == "gone"), spread_a, spread_b, tuple(warnings))


UNRELATED_SHARE = 0.2  # below this share of kernel time in kernels both runs ran, they are unrelated


def relatedness_caveats(devices: list[DeviceComparison], a_timeline: Timeline | None, b_timeline: Timeline | None,
                        ) -> list[str]:
    """Reasons a verdict between these runs may mean little: matched devices of different GPU models,
    and (with timelines) runs whose kernel time lies mostly in kernels the other run never ran."""
    out: list[str] = []
    pairs = sorted({(d.name_a, d.name_b) for d in devices if d.present == "both" and d.name_a and d.name_b
                    and d.name_a != d.name_b})
    if pairs:
        out.append(f"the runs ran on different GPUs ({pairs[0][0]} vs {pairs[0][1]}): times are not like for like")
    if a_timeline is None or b_timeline is None:
        return out
    wa, wb = a_timeline.meta.workload, b_timeline.meta.workload
    if wa and wb:  # recorded runs say what they ran: different kernels of one workload are the point
        if wa != wb:
            out.append(f"the runs ran different workloads ({wa} vs {wb})")
    else:
        ka = kernel_summary(a_timeline).groupby("name")["total_ns"].sum()
        kb = kernel_summary(b_timeline).groupby("name")["total_ns"].sum()
        ta, tb = float(ka.sum()), float(kb.sum())
        if ta > 0 and tb > 0:
            common = ka.index.intersection(kb.index)
            share_a, share_b = float(ka[common].sum()) / ta, float(kb[common].sum()) / tb
            if max(share_a, share_b) < UNRELATED_SHARE:
                out.append(
                    f"the runs share little work: {share_a:.0%} of A's and {share_b:.0%} of B's kernel time is in "
                    "kernels the other run also ran; unless B is the same program with other kernels, this "
                    "compares different workloads"
                )
    return out
