"""Compare two analyses (baseline A vs variant B): the same figures side by side, with differences.

Pure: `compare(a, b, a_timeline, b_timeline) -> Comparison`. Devices are matched by (rank, device);
when no key matches but both runs have the same number of devices (e.g. rank 3 of one job against
rank 1 of another), they are paired in order and a note says so. Findings are matched by rule id.
Kernels (by name) need the timelines; without them the kernel part is empty. With both timelines,
when exactly one run uses green contexts, `green_contexts` explains the green run's slowdown or
speedup against the other (`tracelab.analyses.sm.summary.green_context_explanation`).
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

from tracelab.analyses.comparison import (
    Comparison,
    Delta,
    DeviceComparison,
    FindingDelta,
    FindingStatus,
    GapCauseDelta,
    KernelDelta,
)
from tracelab.analyses.device.kernels import kernel_summary
from tracelab.analyses.ranks.comm_partition import CommOverlapExplanation, comm_overlap_explanation, has_comm
from tracelab.analyses.results import Analysis, DeviceSummary, Finding, GapCause, cause_totals
from tracelab.analyses.sm.green_explain import GreenContextExplanation, green_context_explanation
from tracelab.analyses.verdict import relatedness_caveats, step_durations, verdict
from tracelab.model import EventKind, Timeline

GAP_CAUSES: tuple[str, ...] = get_args(GapCause)
_SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}
TOP_KERNELS = 20


_DEVICE_FIELDS = ("span_ns", "busy_ns", "idle_ns", "kernel_ns", "memcpy_ns", "memset_ns", "comm_ns")
_OVERLAP_FIELDS = ("compute_compute_ns", "compute_copy_ns", "compute_comm_ns", "copy_copy_ns")


def _figures(d: DeviceSummary | None, gaps: dict[tuple[int, int], tuple[int, int]]) -> dict[str, int]:
    if d is None:
        return {k: 0 for k in (*_DEVICE_FIELDS, *_OVERLAP_FIELDS, "kernels", "memcpys", "gaps", "gap_ns")}
    out = {k: int(getattr(d, k)) for k in _DEVICE_FIELDS}
    out.update({k: int(getattr(d.overlap, k)) for k in _OVERLAP_FIELDS})
    out["kernels"] = int(d.kernels or sum(s.kernels for s in d.streams))
    out["memcpys"] = int(d.memcpys or sum(s.memcpys for s in d.streams))
    n, total = gaps.get((d.rank, d.device), (0, 0))
    out["gaps"], out["gap_ns"] = n, total
    return out


def _device_comparison(da: DeviceSummary | None, db: DeviceSummary | None, gaps_a: dict[tuple[int, int], tuple[int, int]],
                       gaps_b: dict[tuple[int, int], tuple[int, int]]) -> DeviceComparison:
    fa, fb = _figures(da, gaps_a), _figures(db, gaps_b)
    ref = da if da is not None else db
    assert ref is not None
    present: Literal["both", "a", "b"] = "both" if da is not None and db is not None else "a" if db is None else "b"
    return DeviceComparison(
        rank=ref.rank, device=ref.device, b_rank=(db or ref).rank, b_device=(db or ref).device,
        name_a=da.name if da is not None else "", name_b=db.name if db is not None else "", present=present,
        **{k: Delta(fa[k], fb[k]) for k in fa},
        sm_busy_a=float(da.sm.busy_fraction) if da is not None else 0.0,
        sm_busy_b=float(db.sm.busy_fraction) if db is not None else 0.0,
        sm_source_a=da.sm.source if da is not None else "none", sm_source_b=db.sm.source if db is not None else "none",
    )


def _gaps_by_device(analysis: Analysis) -> dict[tuple[int, int], tuple[int, int]]:
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for g in analysis.gaps:
        n, total = out.get((g.rank, g.device), (0, 0))
        out[(g.rank, g.device)] = (n + 1, total + int(g.duration_ns))
    return out


def _match_devices(a: Analysis, b: Analysis) -> tuple[list[tuple[DeviceSummary | None, DeviceSummary | None]], list[str]]:
    by_a = {(d.rank, d.device): d for d in a.devices}
    by_b = {(d.rank, d.device): d for d in b.devices}
    common = [k for k in by_a if k in by_b]
    notes: list[str] = []
    if not common and by_a and len(by_a) == len(by_b):
        ka, kb = sorted(by_a), sorted(by_b)
        pairs: list[tuple[DeviceSummary | None, DeviceSummary | None]] = [(by_a[x], by_b[y]) for x, y in zip(ka, kb)]
        notes.append("no (rank, device) in common; devices paired in order: "
                     + ", ".join(f"A r{x[0]}/d{x[1]} with B r{y[0]}/d{y[1]}" for x, y in zip(ka, kb)))
        return pairs, notes
    pairs = [(by_a[k], by_b.get(k)) for k in sorted(by_a)]
    pairs += [(None, by_b[k]) for k in sorted(by_b) if k not in by_a]
    for side, mine, other in (("A", by_a, by_b), ("B", by_b, by_a)):
        only = [k for k in mine if k not in other]
        if only:
            notes.append(f"only in {side}: " + ", ".join(f"r{r}/d{d}" for r, d in sorted(only)))
    return pairs, notes


def _totals(devices: list[DeviceComparison]) -> DeviceComparison | None:
    both = [d for d in devices if d.present == "both"]
    if not both:
        return None
    fields = [f for f in DeviceComparison.__struct_fields__ if isinstance(getattr(both[0], f), Delta)]
    sums = {f: Delta(sum(getattr(d, f).a for d in both), sum(getattr(d, f).b for d in both)) for f in fields}
    return DeviceComparison(
        rank=-1, device=-1, b_rank=-1, b_device=-1, name_a="all matched devices", name_b="all matched devices",
        present="both", **sums,
    )


def _gap_causes(a: Analysis, b: Analysis) -> tuple[GapCauseDelta, ...]:
    def tally(an: Analysis) -> dict[str, tuple[int, int]]:
        return {c: (n, t) for c, n, t in cause_totals(an.gaps)}

    ta, tb = tally(a), tally(b)
    causes = list(GAP_CAUSES) + sorted((set(ta) | set(tb)) - set(GAP_CAUSES))
    return tuple(GapCauseDelta(c, Delta(ta.get(c, (0, 0))[0], tb.get(c, (0, 0))[0]),
                               Delta(ta.get(c, (0, 0))[1], tb.get(c, (0, 0))[1])) for c in causes)


def _by_rule(findings: tuple[Finding, ...]) -> dict[str, tuple[str, int, int, str]]:
    out: dict[str, tuple[str, int, int, str]] = {}
    for f in findings:
        sev, count, wasted, msg = out.get(f.rule, ("info", 0, 0, f.message))
        if _SEVERITY_ORDER.get(f.severity, 0) > _SEVERITY_ORDER.get(sev, 0):
            sev = f.severity
        out[f.rule] = (sev, count + int(f.count), wasted + int(f.wasted_ns), msg)
    return out


def _findings(a: Analysis, b: Analysis) -> tuple[FindingDelta, ...]:
    ra, rb = _by_rule(a.findings), _by_rule(b.findings)
    out: list[FindingDelta] = []
    for rule in list(ra) + [r for r in rb if r not in ra]:
        fa, fb = ra.get(rule), rb.get(rule)
        if fa is None:
            status: FindingStatus = "new"
        elif fb is None:
            status = "gone"
        elif (fa[0], fa[1], fa[2]) != (fb[0], fb[1], fb[2]):
            status = "changed"
        else:
            status = "same"
        out.append(FindingDelta(rule, status, fa[0] if fa else None, fb[0] if fb else None,
                                Delta(fa[1] if fa else 0, fb[1] if fb else 0), Delta(fa[2] if fa else 0, fb[2] if fb else 0),
                                fa[3] if fa else "", fb[3] if fb else ""))
    order = {"new": 0, "changed": 1, "gone": 2, "same": 3}
    return tuple(sorted(out, key=lambda f: (order[f.status], -max(f.wasted_ns.a, f.wasted_ns.b))))


def _kernels(a_tl: Timeline, b_tl: Timeline, top: int) -> tuple[KernelDelta, ...]:
    # duplicate names cannot happen (grouped by interned name), but "" (unnamed) could collide: sum
    ka, kb = (kernel_summary(t).set_index("name").groupby(level=0).agg({"calls": "sum", "total_ns": "sum"})
              for t in (a_tl, b_tl))
    joined = ka.add_suffix("_a").join(kb.add_suffix("_b"), how="outer").fillna(0)
    if joined.empty:
        return ()
    joined["key"] = joined[["total_ns_a", "total_ns_b"]].max(axis=1)
    joined = joined.sort_values("key", ascending=False, kind="stable").head(top)
    out = []
    for name, row in joined.iterrows():  # at most `top` rows
        ca, cb = int(row["calls_a"]), int(row["calls_b"])
        ta, tb = int(row["total_ns_a"]), int(row["total_ns_b"])
        out.append(KernelDelta(str(name), Delta(ca, cb), Delta(ta, tb), ta / ca if ca else 0.0, tb / cb if cb else 0.0,
                               "both" if ca and cb else ("a" if ca else "b")))
    return tuple(out)


def uses_green_contexts(tl: Timeline) -> bool:
    """A green context is declared (`ContextInfo.is_green`) or events carry one (green_context >= 0)."""
    return any(c.is_green for c in tl.contexts) or bool((tl.events["green_context"].to_numpy() >= 0).any())


def _has_kernels(tl: Timeline) -> bool:
    return bool((tl.events["kind"].to_numpy() == int(EventKind.KERNEL)).any())


def _green_contexts(a_tl: Timeline, b_tl: Timeline) -> tuple[GreenContextExplanation | None, Literal["a", "b"] | None]:
    """The explanation when exactly one run uses green contexts and both ran kernels."""
    ga, gb = uses_green_contexts(a_tl), uses_green_contexts(b_tl)
    if ga == gb or not (_has_kernels(a_tl) and _has_kernels(b_tl)):
        return None, None
    if gb:
        return green_context_explanation(b_tl, a_tl), "b"
    return green_context_explanation(a_tl, b_tl), "a"


def compare(a: Analysis, b: Analysis, a_timeline: Timeline | None = None, b_timeline: Timeline | None = None,
            ) -> Comparison:
    """Baseline `a` against variant `b`. Deltas are b - a; percentages are relative to a."""
    pairs, notes = _match_devices(a, b)
    gaps_a, gaps_b = _gaps_by_device(a), _gaps_by_device(b)
    devices = [_device_comparison(da, db, gaps_a, gaps_b) for da, db in pairs]
    if a.options.gap_threshold_ns != b.options.gap_threshold_ns:
        notes.append(f"gap thresholds differ: A {a.options.gap_threshold_ns} ns, B {b.options.gap_threshold_ns} ns")
    kernels: tuple[KernelDelta, ...] = ()
    have_timelines = a_timeline is not None and b_timeline is not None
    green: GreenContextExplanation | None = None
    green_run: Literal["a", "b"] | None = None
    comm: CommOverlapExplanation | None = None
    if a_timeline is not None and b_timeline is not None:
        kernels = _kernels(a_timeline, b_timeline, TOP_KERNELS)
        if has_comm(a_timeline) and has_comm(b_timeline):
            # NCCL on its own partition: the compute/comm explanation replaces the matmul/elementwise one
            # over the steps (set-up such as the communicator's warm-up left out) when both runs have
            # them, so that the explanation speaks of the same time as the verdict
            if a.step_rows and b.step_rows:
                from tracelab.analyses.scope import steps_span_timeline

                comm = comm_overlap_explanation(
                    steps_span_timeline(b_timeline, b.step_rows), steps_span_timeline(a_timeline, a.step_rows)
                )
            else:
                comm = comm_overlap_explanation(b_timeline, a_timeline)
        else:
            green, green_run = _green_contexts(a_timeline, b_timeline)
    else:
        notes.append("kernels not compared (timelines not given)")
    gap_deltas = _gap_causes(a, b)
    finding_deltas = _findings(a, b)
    answer = verdict(a, b, devices, gap_deltas, finding_deltas, step_durations(a), step_durations(b))
    caveats = relatedness_caveats(devices, a_timeline, b_timeline)
    if caveats:
        notes += [f"caution: {c}" for c in caveats]
        if answer is not None:
            answer = msgspec.structs.replace(answer, caveats=tuple(caveats))
    return Comparison(a.trace, b.trace, tuple(devices), gap_deltas, finding_deltas, kernels, _totals(devices),
                      tuple(notes), have_timelines, green, green_run, answer, comm)
