"""Compare two analyses (baseline A vs variant B): the same figures side by side, with differences.

Pure: `compare(a, b, a_timeline, b_timeline) -> Comparison`. Devices are matched by (rank, device);
when no key matches but both runs have the same number of devices (e.g. rank 3 of one job against
rank 1 of another), they are paired in order and a note says so. Findings are matched by rule id.
Kernels (by name) need the timelines; without them the kernel part is empty. With both timelines,
when exactly one run uses green contexts, `green_contexts` explains the green run's slowdown or
speedup against the other (`tracelab.analyses.sm.green_context_explanation`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

import numpy as np

from tracelab.model import EventKind, Timeline

from .comm_partition import CommOverlapExplanation, comm_overlap_explanation, has_comm
from .green_explain import GreenContextExplanation, green_context_explanation
from .kernels import kernel_summary
from .results import Analysis, DeviceSummary, Finding, GapCause, TraceInfo
from .step_time import steady_step_time

FindingStatus = Literal["new", "gone", "changed", "same"]
GAP_CAUSES: tuple[str, ...] = get_args(GapCause)
_SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}
TOP_KERNELS = 20


@dataclass(frozen=True)
class Delta:
    """A figure in A and in B. `delta` = b - a; `pct` = 100 * delta / a (None when a is 0)."""

    a: int
    b: int

    @property
    def delta(self) -> int:
        return self.b - self.a

    @property
    def pct(self) -> float | None:
        return None if self.a == 0 else 100.0 * (self.b - self.a) / self.a


@dataclass(frozen=True)
class DeviceComparison:
    rank: int  # the (rank, device) of A (of B when the device is only in B)
    device: int
    b_rank: int  # the (rank, device) of B it was matched with
    b_device: int
    name_a: str
    name_b: str
    present: Literal["both", "a", "b"]
    span_ns: Delta
    busy_ns: Delta
    idle_ns: Delta
    kernel_ns: Delta
    memcpy_ns: Delta
    memset_ns: Delta
    comm_ns: Delta
    compute_compute_ns: Delta
    compute_copy_ns: Delta
    compute_comm_ns: Delta
    copy_copy_ns: Delta
    kernels: Delta  # counts
    memcpys: Delta
    gaps: Delta  # gap count on this device
    gap_ns: Delta  # total gap time on this device
    # SM busy fraction (busy SM-time / (SMs x span)) and where it comes from: measured / estimated / none
    sm_busy_a: float = 0.0
    sm_busy_b: float = 0.0
    sm_source_a: str = "none"
    sm_source_b: str = "none"

    @property
    def busy_fraction_a(self) -> float:
        return self.busy_ns.a / self.span_ns.a if self.span_ns.a else 0.0

    @property
    def busy_fraction_b(self) -> float:
        return self.busy_ns.b / self.span_ns.b if self.span_ns.b else 0.0


@dataclass(frozen=True)
class GapCauseDelta:
    cause: str
    count: Delta
    total_ns: Delta


@dataclass(frozen=True)
class FindingDelta:
    rule: str
    status: FindingStatus
    severity_a: str | None  # the highest severity of this rule in A (None: absent)
    severity_b: str | None
    count: Delta
    wasted_ns: Delta
    message_a: str
    message_b: str


@dataclass(frozen=True)
class KernelDelta:
    name: str  # untrusted text: escape it when rendering
    calls: Delta
    total_ns: Delta
    mean_ns_a: float
    mean_ns_b: float
    status: Literal["both", "a", "b"]


@dataclass(frozen=True)
class Verdict:
    """The one-line answer of a comparison, as numbers (the wording is in render/compare_text.py).

    `basis` "gpu_step": `a_ns`/`b_ns` are each run's steady-state GPU step time (step_time: median GPU
    time of the steps after warm-up, the slowest rank's; both runs have steps that launched GPU work);
    "step": the mean host step time (steps without GPU work); "span":
    the GPU span (first to last GPU activity over all devices). `idle_ns` sums GPU idle over the
    matched devices; `causes` are the gap causes whose total time changed, largest change first."""

    basis: Literal["gpu_step", "step", "span"]
    a_ns: int
    b_ns: int
    steps_a: int
    steps_b: int
    idle_ns: Delta
    idle_fraction_a: float
    idle_fraction_b: float
    causes: tuple[GapCauseDelta, ...]
    new_findings: tuple[str, ...]
    gone_findings: tuple[str, ...]
    spread_a: int = 0  # interquartile range of the GPU step times behind a_ns / b_ns (gpu_step basis)
    spread_b: int = 0
    warnings: tuple[str, ...] = ()  # step counts or definitions that differ between the runs
    # why the two runs may not be comparable at all (different GPUs, little work in common); empty when
    # nothing says so
    caveats: tuple[str, ...] = ()

    @property
    def pct(self) -> float | None:
        """B's time relative to A's, in percent (+: B is slower)."""
        return None if self.a_ns == 0 else 100.0 * (self.b_ns - self.a_ns) / self.a_ns


@dataclass(frozen=True)
class Comparison:
    a: TraceInfo
    b: TraceInfo
    devices: tuple[DeviceComparison, ...]
    gaps: tuple[GapCauseDelta, ...]  # one per cause, in GAP_CAUSES order (all devices together)
    findings: tuple[FindingDelta, ...]  # new first, then changed, gone, same
    kernels: tuple[KernelDelta, ...]  # top kernels by max(total A, total B); empty without timelines
    totals: DeviceComparison | None  # matched devices summed (None when nothing to compare)
    notes: tuple[str, ...] = ()
    kernels_compared: bool = False
    # the green-context run explained against the other run (None unless exactly one uses green contexts)
    green_contexts: GreenContextExplanation | None = None
    green_contexts_run: Literal["a", "b"] | None = None  # which side is the green-context run
    verdict: Verdict | None = None  # the one-line answer (None when neither run has GPU activity)
    # B's compute/communication against A's, when both runs have communication kernels
    comm_overlap: CommOverlapExplanation | None = None

    @property
    def new_findings(self) -> int:
        return sum(f.status == "new" for f in self.findings)

    @property
    def gone_findings(self) -> int:
        return sum(f.status == "gone" for f in self.findings)

    @property
    def changed_findings(self) -> int:
        return sum(f.status == "changed" for f in self.findings)

    @property
    def wasted_ns(self) -> Delta:
        return Delta(sum(f.wasted_ns.a for f in self.findings), sum(f.wasted_ns.b for f in self.findings))


# ---- devices ---------------------------------------------------------------------------------------

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


def _device_comparison(
    da: DeviceSummary | None,
    db: DeviceSummary | None,
    gaps_a: dict[tuple[int, int], tuple[int, int]],
    gaps_b: dict[tuple[int, int], tuple[int, int]],
) -> DeviceComparison:
    fa, fb = _figures(da, gaps_a), _figures(db, gaps_b)
    ref = da if da is not None else db
    assert ref is not None
    present: Literal["both", "a", "b"] = "both" if da is not None and db is not None else "a" if db is None else "b"
    return DeviceComparison(
        rank=ref.rank,
        device=ref.device,
        b_rank=(db or ref).rank,
        b_device=(db or ref).device,
        name_a=da.name if da is not None else "",
        name_b=db.name if db is not None else "",
        present=present,
        **{k: Delta(fa[k], fb[k]) for k in fa},
        sm_busy_a=float(da.sm.busy_fraction) if da is not None else 0.0,
        sm_busy_b=float(db.sm.busy_fraction) if db is not None else 0.0,
        sm_source_a=da.sm.source if da is not None else "none",
        sm_source_b=db.sm.source if db is not None else "none",
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
        notes.append(
            "no (rank, device) in common; devices paired in order: "
            + ", ".join(f"A r{x[0]}/d{x[1]} with B r{y[0]}/d{y[1]}" for x, y in zip(ka, kb))
        )
        return pairs, notes
    pairs = [(by_a[k], by_b.get(k)) for k in sorted(by_a)]
    pairs += [(None, by_b[k]) for k in sorted(by_b) if k not in by_a]
    only_a = [k for k in by_a if k not in by_b]
    only_b = [k for k in by_b if k not in by_a]
    if only_a:
        notes.append("only in A: " + ", ".join(f"r{r}/d{d}" for r, d in sorted(only_a)))
    if only_b:
        notes.append("only in B: " + ", ".join(f"r{r}/d{d}" for r, d in sorted(only_b)))
    return pairs, notes


def _totals(devices: list[DeviceComparison]) -> DeviceComparison | None:
    both = [d for d in devices if d.present == "both"]
    if not both:
        return None
    fields = [f for f in DeviceComparison.__dataclass_fields__ if isinstance(getattr(both[0], f), Delta)]
    sums = {f: Delta(sum(getattr(d, f).a for d in both), sum(getattr(d, f).b for d in both)) for f in fields}
    return DeviceComparison(
        rank=-1, device=-1, b_rank=-1, b_device=-1, name_a="all matched devices", name_b="all matched devices",
        present="both", **sums,
    )


# ---- gaps, findings, kernels -----------------------------------------------------------------------


def _gap_causes(a: Analysis, b: Analysis) -> tuple[GapCauseDelta, ...]:
    def tally(an: Analysis) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for g in an.gaps:
            n, t = out.get(g.cause, (0, 0))
            out[g.cause] = (n + 1, t + int(g.duration_ns))
        return out

    ta, tb = tally(a), tally(b)
    causes = list(GAP_CAUSES) + sorted((set(ta) | set(tb)) - set(GAP_CAUSES))
    return tuple(
        GapCauseDelta(
            cause=c,
            count=Delta(ta.get(c, (0, 0))[0], tb.get(c, (0, 0))[0]),
            total_ns=Delta(ta.get(c, (0, 0))[1], tb.get(c, (0, 0))[1]),
        )
        for c in causes
    )


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
        out.append(
            FindingDelta(
                rule=rule,
                status=status,
                severity_a=fa[0] if fa else None,
                severity_b=fb[0] if fb else None,
                count=Delta(fa[1] if fa else 0, fb[1] if fb else 0),
                wasted_ns=Delta(fa[2] if fa else 0, fb[2] if fb else 0),
                message_a=fa[3] if fa else "",
                message_b=fb[3] if fb else "",
            )
        )
    order = {"new": 0, "changed": 1, "gone": 2, "same": 3}
    return tuple(sorted(out, key=lambda f: (order[f.status], -max(f.wasted_ns.a, f.wasted_ns.b))))


def _kernels(a_tl: Timeline, b_tl: Timeline, top: int) -> tuple[KernelDelta, ...]:
    ka = kernel_summary(a_tl).set_index("name")
    kb = kernel_summary(b_tl).set_index("name")
    # duplicate names cannot happen (grouped by interned name), but "" (unnamed) could collide: sum
    ka = ka.groupby(level=0).agg({"calls": "sum", "total_ns": "sum"})
    kb = kb.groupby(level=0).agg({"calls": "sum", "total_ns": "sum"})
    joined = ka.add_suffix("_a").join(kb.add_suffix("_b"), how="outer").fillna(0)
    if joined.empty:
        return ()
    joined["key"] = joined[["total_ns_a", "total_ns_b"]].max(axis=1)
    joined = joined.sort_values("key", ascending=False, kind="stable").head(top)
    out = []
    for name, row in joined.iterrows():  # at most `top` rows
        ca, cb = int(row["calls_a"]), int(row["calls_b"])
        ta, tb = int(row["total_ns_a"]), int(row["total_ns_b"])
        out.append(
            KernelDelta(
                name=str(name),
                calls=Delta(ca, cb),
                total_ns=Delta(ta, tb),
                mean_ns_a=ta / ca if ca else 0.0,
                mean_ns_b=tb / cb if cb else 0.0,
                status="both" if ca and cb else ("a" if ca else "b"),
            )
        )
    return tuple(out)


# ---- green contexts --------------------------------------------------------------------------------


def uses_green_contexts(tl: Timeline) -> bool:
    """A green context is declared (`ContextInfo.is_green`) or events carry one (green_context >= 0)."""
    return any(c.is_green for c in tl.contexts) or bool((tl.events["green_context"].to_numpy() >= 0).any())


def _has_kernels(tl: Timeline) -> bool:
    return bool((tl.events["kind"].to_numpy() == int(EventKind.KERNEL)).any())


def _green_contexts(
    a_tl: Timeline, b_tl: Timeline
) -> tuple[GreenContextExplanation | None, Literal["a", "b"] | None]:
    """The explanation when exactly one run uses green contexts and both ran kernels."""
    ga, gb = uses_green_contexts(a_tl), uses_green_contexts(b_tl)
    if ga == gb or not (_has_kernels(a_tl) and _has_kernels(b_tl)):
        return None, None
    if gb:
        return green_context_explanation(b_tl, a_tl), "b"
    return green_context_explanation(a_tl, b_tl), "a"


# ---- verdict ---------------------------------------------------------------------------------------

VERDICT_CAUSES = 3


def step_durations(an: Analysis) -> np.ndarray:
    """Durations (ns) of the analysis' steps, every rank (empty when the trace marks none)."""
    return np.array([s.end_ns - s.start_ns for s in an.steps], dtype=np.int64)


def _gpu_span(an: Analysis) -> int:
    if not an.devices:
        return 0
    return int(max(d.end_ns for d in an.devices) - min(d.start_ns for d in an.devices))


def verdict(
    a: Analysis,
    b: Analysis,
    devices: list[DeviceComparison],
    gaps: tuple[GapCauseDelta, ...],
    findings: tuple[FindingDelta, ...],
    a_steps: np.ndarray | None = None,
    b_steps: np.ndarray | None = None,
) -> Verdict | None:
    """Per-step time when both runs mark steps, else GPU span; idle change; the causes that moved."""
    if not a.devices and not b.devices:
        return None
    na = 0 if a_steps is None else int(a_steps.size)
    nb = 0 if b_steps is None else int(b_steps.size)
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
        a_ns, b_ns = round(float(a_steps.mean())), round(float(b_steps.mean()))  # type: ignore[union-attr]
    else:
        basis, a_ns, b_ns = "span", _gpu_span(a), _gpu_span(b)
        if bool(na) != bool(nb) or (sa is None) != (sb is None):
            warnings.append("only one run has steps: compared by GPU span")
    both = [d for d in devices if d.present == "both"] or devices
    idle = Delta(sum(d.idle_ns.a for d in both), sum(d.idle_ns.b for d in both))
    span = Delta(sum(d.span_ns.a for d in both), sum(d.span_ns.b for d in both))
    moved = sorted((g for g in gaps if g.total_ns.delta), key=lambda g: -abs(g.total_ns.delta))
    return Verdict(
        basis=basis,
        a_ns=int(a_ns),
        b_ns=int(b_ns),
        steps_a=na,
        steps_b=nb,
        idle_ns=idle,
        idle_fraction_a=idle.a / span.a if span.a else 0.0,
        idle_fraction_b=idle.b / span.b if span.b else 0.0,
        causes=tuple(moved[:VERDICT_CAUSES]),
        new_findings=tuple(f.rule for f in findings if f.status == "new"),
        gone_findings=tuple(f.rule for f in findings if f.status == "gone"),
        spread_a=spread_a,
        spread_b=spread_b,
        warnings=tuple(warnings),
    )


UNRELATED_SHARE = 0.2  # below this share of kernel time in kernels both runs ran, they are unrelated


def relatedness_caveats(
    devices: list[DeviceComparison], a_timeline: Timeline | None, b_timeline: Timeline | None
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


def compare(
    a: Analysis,
    b: Analysis,
    a_timeline: Timeline | None = None,
    b_timeline: Timeline | None = None,
    *,
    top_kernels: int = TOP_KERNELS,
) -> Comparison:
    """Baseline `a` against variant `b`. Deltas are b - a; percentages are relative to a."""
    pairs, notes = _match_devices(a, b)
    gaps_a, gaps_b = _gaps_by_device(a), _gaps_by_device(b)
    devices = [_device_comparison(da, db, gaps_a, gaps_b) for da, db in pairs]
    if a.options.gap_threshold_ns != b.options.gap_threshold_ns:
        notes.append(
            f"gap thresholds differ: A {a.options.gap_threshold_ns} ns, B {b.options.gap_threshold_ns} ns"
        )
    kernels: tuple[KernelDelta, ...] = ()
    have_timelines = a_timeline is not None and b_timeline is not None
    green: GreenContextExplanation | None = None
    green_run: Literal["a", "b"] | None = None
    comm: CommOverlapExplanation | None = None
    if a_timeline is not None and b_timeline is not None:
        kernels = _kernels(a_timeline, b_timeline, top_kernels)
        if has_comm(a_timeline) and has_comm(b_timeline):
            # NCCL on its own partition: the compute/comm explanation replaces the matmul/elementwise one
            # over the steps (set-up such as the communicator's warm-up left out) when both runs have
            # them, so that the explanation speaks of the same time as the verdict
            if a.step_rows and b.step_rows:
                from .scope import steps_span_timeline

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
    answer = verdict(
        a,
        b,
        devices,
        gap_deltas,
        finding_deltas,
        step_durations(a),
        step_durations(b),
    )
    caveats = relatedness_caveats(devices, a_timeline, b_timeline)
    if caveats:
        notes += [f"caution: {c}" for c in caveats]
        if answer is not None:
            answer = replace(answer, caveats=tuple(caveats))
    return Comparison(
        a=a.trace,
        b=b.trace,
        devices=tuple(devices),
        gaps=gap_deltas,
        findings=finding_deltas,
        kernels=kernels,
        totals=_totals(devices),
        notes=tuple(notes),
        kernels_compared=have_timelines,
        green_contexts=green,
        green_contexts_run=green_run,
        verdict=answer,
        comm_overlap=comm,
    )
