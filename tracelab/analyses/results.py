"""Typed, frozen analysis results. `document` turns an `Analysis` into the `analyze --json`
document (schema 2, DESIGN.md); everything renders from these types, never from raw events."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np

from tracelab.analyses.gaps.input_wait import DEFAULT_INPUT_WORDS

if TYPE_CHECKING:
    from tracelab.analyses.steps.table import StepRow

SCHEMA_VERSION = 2

GapCause = Literal["host_sync", "launch_latency", "dependency_wait", "no_work", "unknown", "input_wait", "profiler"]
Severity = Literal["info", "warning", "critical"]
SmSource = Literal["measured", "estimated", "none"]

StepSource = Literal["marked", "inferred"]


class AnalysisOptions(msgspec.Struct, frozen=True):
    gap_threshold_ns: int = 10_000
    # Drop GPU events whose correlation matches no host launch before analysing (TraceLens does).
    exclude_orphans: bool = False
    # user ranges named with a word starting so are data loading (gap cause input_wait;
    # tracelab.analyses.gaps.input_wait.DEFAULT_INPUT_WORDS)
    input_words: tuple[str, ...] = DEFAULT_INPUT_WORDS


class Overlap(msgspec.Struct, frozen=True):
    compute_compute_ns: int = 0
    compute_copy_ns: int = 0
    compute_comm_ns: int = 0
    copy_copy_ns: int = 0


class StreamSummary(msgspec.Struct, frozen=True):
    stream: int
    context: int | None
    green_context: int | None
    busy_ns: int
    kernels: int
    memcpys: int
    memsets: int = 0


class SmPartition(msgspec.Struct, frozen=True):
    green_context: int | None  # None = the part of the device outside every green context
    sm_count: int
    busy_fraction: float


class SmSummary(msgspec.Struct, frozen=True):
    source: SmSource = "none"
    busy_fraction: float = 0.0
    partitions: tuple[SmPartition, ...] = ()
    excluded_wait_ns: int = 0  # the leading peer wait left out of the SM figures (sm_time.sm_excluded_wait)


class DeviceSummary(msgspec.Struct, frozen=True):
    rank: int
    device: int
    name: str
    sm_count: int
    start_ns: int
    end_ns: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    kernel_ns: int  # union of kernel intervals (comm kernels included)
    memcpy_ns: int  # union of memcpy intervals
    memset_ns: int  # union of memset intervals
    comm_ns: int  # union of communication-kernel intervals
    overlap: Overlap
    streams: tuple[StreamSummary, ...]
    sm: SmSummary = SmSummary()
    kernels: int = 0
    memcpys: int = 0
    memsets: int = 0


class Gap(msgspec.Struct, frozen=True):
    rank: int
    device: int
    start_ns: int
    end_ns: int
    duration_ns: int
    cause: GapCause
    host_data: str = ""  # which host data the rank's trace had: "cpu_ops", "cuda_api", "none" (+ "+os_calls")
    launch_start_ns: int = -1  # start of the next op's launch call (-1: not in the trace)
    launch_tid: int = -1  # thread of that call
    host_active: float = 0.0  # share of [gap start, next launch) the launching thread's recorded activity covers
    detail: int = -1  # row of the analysis' GapDetails that holds this gap's evidence (-1: none)


# codes are indices: a new cause goes at the end ("profiler", issue 27), so earlier codes keep their meaning
CAUSES: tuple[GapCause, ...] = ("dependency_wait", "host_sync", "input_wait", "launch_latency", "no_work", "unknown",
                                "profiler")
HOST_DATA: tuple[str, ...] = ("cpu_ops", "cuda_api", "none")


@contextmanager
def bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector while hundreds of thousands of acyclic objects are made (Gap
    objects, the documents' gap dicts): it would rescan the growing heap over and over (half the time
    of building the gaps of `analyze --json` on a 1M-kernel trace)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class GapTable(Sequence[Gap]):
    """The gaps of an analysis as columns; a `Gap` is made only when one is asked for (a big trace has
    hundreds of thousands of gaps and most callers look at a few, or at columns). Behaves like the
    tuple of Gaps it stands for: len, indexing, slicing (a tuple), iteration in order, equality with
    another GapTable or with a tuple / list of Gaps. Each gap's `detail` (its row of the analysis'
    GapDetails) is a column too: `analyze`'s table has 0, 1, 2, ...; `rows(lo, hi)` is a part of it
    that keeps them. Iterating over every gap makes the Gap objects once and keeps them."""

    __slots__ = ("_cols", "_items", "host_data_labels")

    COLUMNS = ("rank", "device", "start", "end", "cause", "host_data", "launch_start", "launch_tid",
               "host_active", "detail")

    def __init__(self, rank: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray,
                 cause: np.ndarray, host_data: np.ndarray, host_data_labels: tuple[str, ...],
                 launch_start: np.ndarray, launch_tid: np.ndarray, host_active: np.ndarray,
                 detail: np.ndarray | None = None) -> None:
        """cause: index into CAUSES; host_data: index into host_data_labels; launch_start: -1 when the
        launch is not in the trace; host_active: as Gap.host_active (rounded); detail: the GapDetails
        row of each gap (default 0, 1, 2, ...)."""
        n = np.asarray(start).size
        self._cols = {
            "rank": np.asarray(rank, dtype=np.int64), "device": np.asarray(device, dtype=np.int64),
            "start": np.asarray(start, dtype=np.int64), "end": np.asarray(end, dtype=np.int64),
            "cause": np.asarray(cause, dtype=np.int8), "host_data": np.asarray(host_data, dtype=np.int64),
            "launch_start": np.asarray(launch_start, dtype=np.int64),
            "launch_tid": np.asarray(launch_tid, dtype=np.int64),
            "host_active": np.asarray(host_active, dtype=np.float64),
            "detail": np.arange(n, dtype=np.int64) if detail is None else np.asarray(detail, dtype=np.int64),
        }
        self.host_data_labels = tuple(host_data_labels)
        self._items: tuple[Gap, ...] | None = None

    @classmethod
    def concat(cls, parts: Sequence[GapTable]) -> GapTable:
        """The parts one after the other (their detail columns as they are)."""
        labels = tuple(dict.fromkeys(lab for p in parts for lab in p.host_data_labels))
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z, z, z, z, z, (), z, z, np.zeros(0))
        cols = {}
        for name in cls.COLUMNS:
            if name == "host_data":
                remap = [np.array([labels.index(lab) for lab in p.host_data_labels] + [0], dtype=np.int64)
                         for p in parts]
                cols[name] = np.concatenate([m[p.column(name)] for m, p in zip(remap, parts, strict=True)])
            else:
                cols[name] = np.concatenate([p.column(name) for p in parts])
        return cls(host_data_labels=labels, **cols)

    @classmethod
    def of(cls, gaps: Sequence[Gap]) -> GapTable:
        """The columns of any sequence of Gaps (itself when it is a GapTable)."""
        if isinstance(gaps, GapTable):
            return gaps
        labels = tuple(dict.fromkeys(g.host_data for g in gaps))
        return cls(
            [g.rank for g in gaps], [g.device for g in gaps], [g.start_ns for g in gaps],
            [g.end_ns for g in gaps], [CAUSES.index(g.cause) for g in gaps],
            [labels.index(g.host_data) for g in gaps], labels, [g.launch_start_ns for g in gaps],
            [g.launch_tid for g in gaps], [g.host_active for g in gaps], [g.detail for g in gaps],
        )

    def column(self, name: str) -> np.ndarray:
        """A column (COLUMNS) as a numpy array: rank, device, start, end (ns), cause (index into
        CAUSES), host_data (index into host_data_labels), launch_start (-1: not in the trace),
        launch_tid, host_active, detail."""
        return self._cols[name]

    @property
    def duration(self) -> np.ndarray:
        return self._cols["end"] - self._cols["start"]

    def __len__(self) -> int:
        return int(self._cols["start"].size)

    def rows(self, lo: int, hi: int) -> GapTable:
        """Gaps lo..hi-1 as a table (columns are views; details kept)."""
        c = self._cols
        return GapTable(*(c[n][lo:hi] for n in ("rank", "device", "start", "end", "cause", "host_data")),
                        self.host_data_labels,
                        *(c[n][lo:hi] for n in ("launch_start", "launch_tid", "host_active", "detail")))

    def _rows(self, idx: np.ndarray) -> list[Gap]:
        """The Gaps at rows idx."""
        c = self._cols
        labels = self.host_data_labels
        cols = [c[n][idx].tolist() for n in ("rank", "device", "start", "end", "launch_start", "launch_tid",
                                              "host_active", "detail")]
        causes = [CAUSES[k] for k in c["cause"][idx].tolist()]
        basis = [labels[k] for k in c["host_data"][idx].tolist()]
        return [
            Gap(rank=r, device=d, start_ns=s, end_ns=e, duration_ns=e - s, cause=k, host_data=h,
                launch_start_ns=ls, launch_tid=lt, host_active=ha, detail=i)
            for r, d, s, e, ls, lt, ha, i, k, h in zip(*cols, causes, basis, strict=True)
        ]

    def _all(self) -> tuple[Gap, ...]:
        if self._items is None:
            with bulk_allocation():
                self._items = tuple(self._rows(np.arange(len(self))))
        return self._items

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            if self._items is not None:
                return self._items[i]
            return tuple(self._rows(np.arange(len(self))[i]))
        n = len(self)
        j = int(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError("gap index out of range")
        if self._items is not None:
            return self._items[j]
        return self._rows(np.array([j]))[0]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GapTable):
            return len(self) == len(other) and all(
                np.array_equal(self._cols[n], other._cols[n]) for n in self.COLUMNS if n != "host_data"
            ) and [self.host_data_labels[k] for k in self._cols["host_data"].tolist()] == [
                other.host_data_labels[k] for k in other._cols["host_data"].tolist()]
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"GapTable({len(self)} gaps)"

    def __reduce__(self):
        c = self._cols
        return (GapTable, (c["rank"], c["device"], c["start"], c["end"], c["cause"], c["host_data"],
                           self.host_data_labels, c["launch_start"], c["launch_tid"], c["host_active"],
                           c["detail"]))

    def longest(self, k: int | None = None) -> list[Gap]:
        """The k longest gaps (all when k is None), longest first; equal lengths in table order (as
        `sorted(gaps, key=lambda g: -g.duration_ns)` orders them)."""
        order = np.argsort(-self.duration, kind="stable")
        if k is not None:
            order = order[:k]
        if self._items is not None:
            return [self._items[j] for j in order.tolist()]
        return self._rows(order)


def cause_totals(gaps: Sequence[Gap], ties: Literal["longest", "table"] = "longest") -> list[tuple[str, int, int]]:
    """(cause, gaps, total ns) of every cause present, most time first; equal totals in the order in
    which the causes first appear among the gaps sorted longest first (`ties="longest"`: the text
    summary), or in the gaps' own order (`"table"`: the reports' table and figure)."""
    table = GapTable.of(gaps)
    dur = table.duration
    cause = table.column("cause")
    order = np.argsort(-dur, kind="stable") if ties == "longest" else np.arange(dur.size)
    first = np.full(len(CAUSES), dur.size, dtype=np.int64)
    np.minimum.at(first, cause[order].astype(np.int64), np.arange(dur.size, dtype=np.int64))
    rows = [(int(first[k]), c, int(np.count_nonzero(cause == k)), int(dur[cause == k].sum()))
            for k, c in enumerate(CAUSES) if first[k] < dur.size]
    rows.sort()  # first appearance, then a stable sort by total
    rows.sort(key=lambda r: -r[3])
    return [(c, n, t) for _, c, n, t in rows]


def longest_gaps(gaps: Sequence[Gap], k: int | None = None) -> list[Gap]:
    """The k longest gaps, longest first, ties in their order (any sequence of Gaps)."""
    if isinstance(gaps, GapTable):
        return gaps.longest(k)
    out = sorted(gaps, key=lambda g: -int(g.duration_ns))
    return out if k is None else out[:k]


class GapDetails(msgspec.Struct, frozen=True, eq=False):
    """The structured evidence of the gaps of an analysis, as columns: row `Gap.detail` describes that
    gap. Names are ids into `strings` (the timeline's string table, then the names of the profiler-overhead
    intervals: tracelab.analyses.core.overhead.overhead_names); -1 means none / not in the trace.
    Times are ns on the trace clock. No prose: tracelab.render.text.gap_evidence writes the sentences.

    What each cause's evidence uses (docs/DESIGN.md, "Gap causes"):
    - the op that ends the gap: next_kind (EventKind), next_name, next_stream, next_graph (a CUDA graph
      node); its launch call: launch_found, launch_name, launch_tid, launch_start;
    - host_sync: the wait (wait_name, wait_tid, wait_start, wait_end), wait_covers (it covers
      wait_fraction >= 50% of the gap; else it was in progress when the gap began);
    - launch_latency: host_active (share of [gap start, next launch) the launching thread's recorded
      host activity covers); host_op: the outermost CPU op the launching thread was in halfway to the
      launch (host_sync: halfway from the wait's return to the launch);
    - dependency_wait: dep_name / dep_start, the stream-wait record issued before the launch;
    - no_work, blocked in the OS (os_blocked): os_self, the share of [gap start, next launch) the launching
      thread spent in OS runtime calls outside its CUDA calls; os_all, the share during which no launching
      thread of its process ran (os_threads of them); os_calls, its OS calls in that window, and the one
      that names it (os_name, os_start, os_end: running halfway through, else the last one);
    - input_wait: input_fraction, the share of [gap start, next launch) the launching thread spent in
      data-loading ranges or OS waits for data (tracelab.analyses.gaps.input_wait); the range or call that names
      it (input_name, input_start, input_end; input_os: an OS call): running halfway, else the last range;
    - no_work, host idle (host_idle; torch.profiler): idle_fraction, the longest stretch of [gap start,
      next launch) with no CPU op or CUDA call on the launching thread, as a share of it;
    - profiler: profiler_fraction, the share of the gap the profiler's own work on the rank's processes covers
      (nsys PROFILER_OVERHEAD: buffer flushes, CUPTI set-up); the interval that names it (profiler_name: an
      id past the timeline's strings, into this table's `strings`; profiler_start, profiler_end): the one
      running halfway through the gap, else the overlapping one that reaches furthest;
    - after_wait: a wait was in progress when the gap began but covered less than half of it: every
      fraction above is measured from its return (wait_end), and the cause is that of the time after it;
    - host_data: which host data the rank's trace had (index into HOST_DATA); os_data: whether it had OS
      runtime calls (nsys --trace=osrt)."""

    strings: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray  # index into CAUSES
    host_data: np.ndarray  # index into HOST_DATA
    next_kind: np.ndarray
    next_name: np.ndarray
    next_stream: np.ndarray
    next_graph: np.ndarray
    launch_found: np.ndarray
    launch_name: np.ndarray
    launch_tid: np.ndarray
    launch_start: np.ndarray
    wait_covers: np.ndarray
    wait_name: np.ndarray
    wait_tid: np.ndarray
    wait_start: np.ndarray
    wait_end: np.ndarray
    wait_fraction: np.ndarray
    host_active: np.ndarray
    host_op: np.ndarray
    dep_name: np.ndarray
    dep_start: np.ndarray
    os_data: np.ndarray
    os_blocked: np.ndarray
    os_self: np.ndarray
    os_all: np.ndarray
    os_threads: np.ndarray
    os_calls: np.ndarray
    os_name: np.ndarray
    os_start: np.ndarray
    os_end: np.ndarray
    input_fraction: np.ndarray
    input_name: np.ndarray
    input_start: np.ndarray
    input_end: np.ndarray
    input_os: np.ndarray
    host_idle: np.ndarray
    idle_fraction: np.ndarray
    after_wait: np.ndarray
    profiler_fraction: np.ndarray
    profiler_name: np.ndarray
    profiler_start: np.ndarray
    profiler_end: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    @staticmethod
    def column_names() -> tuple[str, ...]:
        return tuple(f for f in GapDetails.__struct_fields__ if f != "strings")

    @classmethod
    def concat(cls, strings: tuple[str, ...], parts: Sequence[dict[str, np.ndarray]]) -> GapDetails:
        """One table from per-part column dicts (in row order), joined column by column: each part's column
        is taken out of its dict once joined, so no column is held twice at once beyond the one being joined
        (the parts' dicts are left empty)."""
        cols = {}
        for name in cls.column_names():
            arrays = [p.pop(name) for p in parts]
            cols[name] = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls(strings=strings, **cols)

    def take(self, rows: np.ndarray) -> GapDetails:
        """The rows `rows`, in that order."""
        return GapDetails(self.strings, **{n: getattr(self, n)[rows] for n in self.column_names()})


class Finding(msgspec.Struct, frozen=True):
    rule: str
    severity: Severity
    count: int
    wasted_ns: int
    message: str = ""  # prose, filled by tracelab.render.text.findings (api.analyze does it)
    where: str = ""  # prose, filled with the message
    # structured details, documented per rule (DESIGN.md "Findings"): numbers, places, windows
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    # "steps": it fires within the steps; "setup": only before the first step; "whole": no steps
    scope: str = "whole"


class StepInfo(msgspec.Struct, frozen=True):
    """One training step of a rank (tracelab.analyses.steps.infer.Step, as the analysis reports it)."""

    rank: int
    index: int
    start_ns: int
    end_ns: int
    source: StepSource


class TraceInfo(msgspec.Struct, frozen=True):
    source: str
    format: str
    ranks: tuple[int, ...]
    # the run start: first event of any kind (the one time origin of every rendered offset); None unknown
    start_ns: int | None = None


class Analysis(msgspec.Struct, frozen=True):
    trace: TraceInfo
    devices: tuple[DeviceSummary, ...]
    gaps: Sequence[Gap]  # a GapTable from `analyze` (columns; Gap objects made when asked for)
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    options: AnalysisOptions = AnalysisOptions()
    steps: tuple[StepInfo, ...] = ()
    step_rows: tuple[StepRow, ...] = ()  # the per-step table (tracelab.analyses.steps.table)
    # the gaps' structured evidence (row Gap.detail); its prose is built by tracelab.render.text.gap_evidence
    gap_details: GapDetails | None = None
    setup: tuple[Any, ...] = ()  # per rank: what ran before its first step (tracelab.analyses.steps.setup_phase.RankSetup)

