"""The results of `tracelab compare A B` (tracelab.analyses.compare): frozen, structured, no prose."""

from __future__ import annotations

from typing import Literal

import msgspec

from tracelab.analyses.ranks.comm_partition import CommOverlapExplanation
from tracelab.analyses.results import TraceInfo
from tracelab.analyses.sm.green_explain import GreenContextExplanation

FindingStatus = Literal["new", "gone", "changed", "same"]


class Delta(msgspec.Struct, frozen=True):
    """A figure in A and in B. `delta` = b - a; `pct` = 100 * delta / a (None when a is 0)."""

    a: int
    b: int

    @property
    def delta(self) -> int:
        return self.b - self.a

    @property
    def pct(self) -> float | None:
        return None if self.a == 0 else 100.0 * (self.b - self.a) / self.a


class DeviceComparison(msgspec.Struct, frozen=True):
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


class GapCauseDelta(msgspec.Struct, frozen=True):
    cause: str
    count: Delta
    total_ns: Delta


class FindingDelta(msgspec.Struct, frozen=True):
    rule: str
    status: FindingStatus
    severity_a: str | None  # the highest severity of this rule in A (None: absent)
    severity_b: str | None
    count: Delta
    wasted_ns: Delta
    message_a: str
    message_b: str


class KernelDelta(msgspec.Struct, frozen=True):
    name: str  # untrusted text: escape it when rendering
    calls: Delta
    total_ns: Delta
    mean_ns_a: float
    mean_ns_b: float
    status: Literal["both", "a", "b"]


class Verdict(msgspec.Struct, frozen=True):
    """The one-line answer of a comparison, as numbers (the wording is in render/text/compare.py).

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


class Comparison(msgspec.Struct, frozen=True):
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
