"""Training steps (iterations) of a Timeline, per rank: marked when the trace has markers, else
inferred from the repeating structure of its host call sequence. docs/DESIGN.md ("Steps") documents
the method, the checks and the failure modes.

Marked: host ranges named `ProfilerStep#N` (torch.profiler schedule), or else NVTX /
record_function ranges named like a step (`step 3`, `train_step`, `iteration 12`; top-level ones
only). `source="marked"`. Under nsys `--pytorch=autograd-nvtx` such a range is named
"step 3, op_id = 1234" (maybe with ", sizes = ..." after it): its name is read up to ", op_id = ".

Inferred (no markers on the rank; `source="inferred"`), in this order:
1. a loop of CUDA graph replays (consecutive launches of the same graph at a steady cadence): one
   step per replay;
2. the repetition of a call sequence (`step_sequence`): the host API calls of the launching threads
   (every call, then launches and blocking calls only; merged, then per thread), the cleanest
   repetition among them first; its period P, a boundary anchor (the trace's start, a blocking call
   once per period, or the longest recurring host pause) and the cut (`step_cut`); a period under
   SHORT_BLOCK calls is a block inside the step, cut by the recurring host pause;
3. one host-paced launch of the same kernel over and over, covering most of the trace: one step
   per launch.
Each step then starts at the host range that leads to its first call (`step_cut.refine_starts`); the
note says how much host time right before the steps nothing recorded (where the iteration's own
boundary cannot be placed). Where no steps are found, `Steps.notes` says why.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import msgspec
import numpy as np

from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.core.memo import column, memo
from tracelab.analyses.core.names import short_name
from tracelab.analyses.core.rows import names_matching, ranks_of, rows_of
from tracelab.analyses.core.step_names import PROFILER_STEP, PROFILER_STEP_NAME, STEP_LIKE, STEP_LIKE_NAME
from tracelab.analyses.steps.anchor import (
    HostRanges,
    reanchor_at_input_copies,
    reanchor_at_loader,
    refine_starts,
)
from tracelab.analyses.steps.cut import (
    SHORT_BLOCK,
    Cut,
    _empty,
    cut_by_pause,
    cut_steps,
    find_anchor,
    group_quantile,
    pause_period,
    regular_period,
)
from tracelab.analyses.steps.sequence import (
    MIN_REPEATS,
    LaunchSequence,
    Period,
    find_period,
    sequence_variants,
)
from tracelab.model import EventKind, Timeline

__all__ = ["Step", "StepSource", "Steps", "find_period", "find_steps", "infer_steps", "marked_steps",
           "marked_steps_noted"]

StepSource = Literal["marked", "inferred"]


class Step(msgspec.Struct, frozen=True):
    rank: int
    index: int  # 0-based, per rank, in time order
    start_ns: int
    end_ns: int
    source: StepSource


class Steps(msgspec.Struct, frozen=True, dict=True):
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    @cached_property
    def _by_rank(self) -> dict[int, list[Step]]:
        """The steps grouped by rank (in their order), once: `of_rank` of every rank is one pass, not one each."""
        out: dict[int, list[Step]] = {}
        for s in self.steps:
            out.setdefault(s.rank, []).append(s)
        return out

    def of_rank(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of a rank's steps, int64, sorted by start."""
        mine = self._by_rank.get(rank, [])
        starts = np.array([s.start_ns for s in mine], dtype=np.int64)
        ends = np.array([s.end_ns for s in mine], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order]

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({s.rank for s in self.steps}))

    def __len__(self) -> int:
        return len(self.steps)


def marked_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-level marked steps of a rank: (start, end) sorted by start; empty when none."""
    return marked_steps_noted(timeline, rank)[:2]


def _untangle(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Top-level ranges of (s, e) sorted by start, none overlapping the one before: a range inside an
    earlier one is dropped; one that begins before the earlier ones end begins where they end (steps
    follow each other, so their lengths never add up to more than the span). Returns the ranges and how
    many were clipped."""
    prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
    top = (e > prev_max) & (e > s)
    s, e, prev = s[top], e[top], prev_max[top]
    clipped = s < prev
    return np.maximum(s, prev).astype(np.int64), e.astype(np.int64), int(clipped.sum())


def marked_steps_noted(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray, str]:
    """`marked_steps` and a note when marked ranges overlapped (each was clipped to begin where the
    ranges before it end; '' when none did)."""
    host_range = rows_of(timeline, rank, (EventKind.CPU_OP, EventKind.NVTX_RANGE))
    names = column(timeline, "name")[host_range]
    for pattern in (PROFILER_STEP, STEP_LIKE):
        pos = host_range[names_matching(timeline, pattern)[names]]
        if pos.size == 0:
            continue
        s = column(timeline, "start")[pos]
        order = np.argsort(s, kind="stable")
        s, e, clipped = _untangle(s[order], column(timeline, "end")[pos][order])
        note = (f"rank {rank}: {clipped:,} of {len(s):,} marked steps began before the previous one ended "
                "(overlapping step ranges): each was cut to begin where the one before ends") if clipped else ""
        return s, e, note
    return *_empty(), ""


UNRECORDED_NOTE = 0.05  # a note when the host time before steps that nothing recorded is this long
CLEAN = 0.75  # sequences whose best lag repeats this share of calls are tried first, richest first
RUN_COVERAGE = 0.5  # host-paced single launches must span this share of the launch sequence
ALLOCATOR_BREAK = 1.5  # the allocator's calls break the period when leaving them out makes it this much shorter


def _merged(seqs: list[LaunchSequence]) -> tuple[LaunchSequence, LaunchSequence]:
    """(launches and blocking calls of all launching threads, every API call of them)."""
    rich = seqs[0].where.endswith("every API call")
    launches = seqs[1] if rich else seqs[0]
    return launches, seqs[0]


def _launch_run_steps(seqs: list[LaunchSequence], rank: int, timeline: Timeline, graph: bool,
                      ) -> tuple[np.ndarray, np.ndarray, str] | None:
    """Steps of one launch each: CUDA graph replays (graph=True), or host-paced launches of one
    kernel that span most of the launch sequence."""
    launches, calls = _merged(seqs)
    only = launches.start[launches.launch]
    span = max(int(only[-1] - only[0]), 1) if only.size else 1
    run = launch_run(launches, graph=True) if graph else launch_run(
        launches, graph=False, min_paced=HOST_PACED, min_span=RUN_COVERAGE * span)
    if run is None:
        return None
    s, e = cut_launch_run(launches, run, calls)
    name = short_name(timeline.name(int(launches.tokens[run.first])) or "?")
    what = (f"one CUDA graph replay each ({run.count} replays in a row of the graph starting with {name}"
            if graph
            else f"one launch each ({run.count} launches in a row of {name}, {run.paced:.0f} launch "
            f"durations apart: the host works between them")
    note = (f"rank {rank}: no step markers; {s.size} steps inferred from the launch sequence of "
            f"{launches.where}: {what}, every {run.interval_ns / 1e3:.0f} µs)")
    return s, e, note


def host_ranges(timeline: Timeline, rank: int, threads: np.ndarray) -> HostRanges:
    """(start, end, name) of the host ranges (CPU ops, NVTX / record_function ranges) of the given threads
    of a rank, sorted by start, step-like ranges left out."""
    rows = rows_of(timeline, rank, (EventKind.CPU_OP, EventKind.NVTX_RANGE))
    step_like = names_matching(timeline, PROFILER_STEP_NAME, STEP_LIKE_NAME)
    rows = rows[np.isin(column(timeline, "tid")[rows], threads) & ~step_like[column(timeline, "name")[rows]]]
    start, end = column(timeline, "start")[rows], column(timeline, "end")[rows]
    order = np.argsort(start, kind="stable")
    names = column(timeline, "name")[rows][order].astype(np.int64)
    return HostRanges(start[order].astype(np.int64), end[order].astype(np.int64), names)


def unrecorded_before(starts: np.ndarray, calls: LaunchSequence, ranges: HostRanges) -> float:
    """Median, over the steps after the first, of the host time right before a step's start in
    which neither a call nor a host range was recorded, ns."""
    if starts.size < 2:
        return 0.0
    s_all = np.r_[calls.start, ranges[0]]
    e_all = np.r_[calls.end, ranges[1]]
    order = np.argsort(s_all, kind="stable")
    run_max = np.maximum.accumulate(e_all[order])  # the latest end of anything started so far
    k = np.searchsorted(s_all[order], starts[1:], side="left") - 1
    prev = np.where(k >= 0, run_max[np.maximum(k, 0)], starts[1:])
    return float(np.median(np.maximum(starts[1:] - prev, 0)))


def _repetition_steps(seq: LaunchSequence, per: Period, rank: int, timeline: Timeline, calls: LaunchSequence,
                      ) -> tuple[np.ndarray, np.ndarray, str] | str:
    """(starts, ends, note) from the repetition of one sequence, or the reason there are none. `calls`:
    every call of the rank's launching threads (where the trace starts; the batch fetches' threads)."""
    origin = calls.start
    base = per.lag or per.smallest
    if 0 < base < SHORT_BLOCK:
        # a short block repeating inside each iteration (an elementwise chain): the calls once per
        # iteration (the batch copy, the first matmul) give the iteration's period
        regular = regular_period(seq.tokens, base)
        if regular:
            match = float(np.mean(seq.tokens[:-regular] == seq.tokens[regular:]))
            got = _repetition_steps(seq, Period(regular, match, regular, match, smallest=regular), rank, timeline, calls)
            if not isinstance(got, str):
                return got
        pp = pause_period(seq, base)
        if pp.lag > base:  # the calls repeat inside the step: the recurring pause finds it
            s, e = cut_by_pause(seq, pp)
            if s.size >= MIN_REPEATS:
                return s, e, (
                    f"rank {rank}: no step markers; {s.size} steps inferred from the launch sequence "
                    f"of {seq.where}: a block of {base} launches repeats, and every {pp.lag} launches "
                    f"the host pauses {pp.ratio:.0f}× longer than usual; each step starts after that pause")
    if not per.lag:
        return f"{seq.where}: {per.reason}"
    anchor = find_anchor(seq, per.lag, timeline, origin)
    if anchor is None:
        return f"{seq.where}: period {per.lag} launches but no operation occurs once per period"
    s, e = cut_steps(seq, per.lag, anchor)
    if s.size < MIN_REPEATS:
        return f"{seq.where}: period {per.lag} launches but only {s.size} steps cut"
    where = "ends when it returns" if anchor.at_end else "starts at its launch"
    why = {
        "blocking": "a blocking call once per period", "trace_start": "the trace starts with the repetition",
        "pause": "the longest recurring host pause is before it",
        "input_copy": "the batch's host-to-device copy, once per period, begins the iteration",
    }[anchor.how]
    note = (f"rank {rank}: no step markers; {s.size} steps inferred from the launch sequence of "
            f"{seq.where} (period {per.lag} launches, {per.match:.0%} repeat one period later); each "
            f"step {where}: {anchor.name} ({why})")
    # only a cut at the longest recurring pause (the weakest anchor) moves to the batch fetches (the
    # DataLoader's iterator op, once per found step), else to the batch uploads
    for again, what in ((reanchor_at_loader, "the batch fetches (the DataLoader's iterator op, one in each step)"),
                        (reanchor_at_input_copies, "the batch's host-to-device copies, launched once per step")):
        got = again(timeline, rank, s, e, calls) if anchor.how == "pause" else None
        if got is not None and (got[0].size != s.size or np.any(got[0] != s)):
            return got[0], got[1], note + f"; re-anchored at {what}: {got[0].size} steps (was {s.size})"
    return s, e, note


def _steady(recorded: list[LaunchSequence], without: list[LaunchSequence] | None,
            ) -> tuple[list[LaunchSequence], str, Period | None]:
    """The sequences to look for a period in, a note and the period of the first (None when not found
    here): `recorded`, or `without` (the caching allocator's calls left out) where those calls break the
    period (a loop that keeps each step's outputs asks for a new block every few steps: the calls repeat
    only once every few steps, and the richest sequence's period is that many steps). Where they do not,
    the sequences stay as recorded."""
    if not recorded or without is None or not without:
        return recorded, "", None
    dropped = recorded[0].tokens.size - without[0].tokens.size
    was, now = find_period(recorded[0].tokens), find_period(without[0].tokens)
    if not (dropped > 0 and was.lag and now.lag and was.lag >= ALLOCATOR_BREAK * now.lag):
        return recorded, "", was
    return without, (
        f"; the caching allocator's {dropped} calls (cudaMalloc and the like) left out: they recur every few "
        f"steps, not once a step (with them the sequence repeats every {was.lag} calls, without them every "
        f"{now.lag})"
    ), now


def infer_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Inferred steps of a rank: (start, end, note). Empty arrays and a note saying why when none."""
    seqs, allocator_note, first_period = _steady(*sequence_variants(timeline, rank))
    if not seqs:
        return *_empty(), f"rank {rank}: no training steps found: no step markers and no launches to infer steps from"
    calls = seqs[0]
    ranges = host_ranges(timeline, rank, np.array(calls.threads, dtype=np.int64))

    def refined(s: np.ndarray, e: np.ndarray, note: str) -> tuple[np.ndarray, np.ndarray, str]:
        note += allocator_note
        s2, e2 = refine_starts(s, e, calls, ranges)
        moved = int(np.count_nonzero(s2 != s))
        if moved:
            note += f"; {moved} of the starts moved earlier, to the host range that leads to the step's first call"
        blind = unrecorded_before(s2, calls, ranges)
        length = float(np.median(e2 - s2)) if s2.size else 0.0
        if s2.size > 1 and length > 0 and blind / length >= UNRECORDED_NOTE:
            note += (f"; before each step's first recorded host activity the host recorded nothing for a "
                     f"median {blind / 1e3:.0f} µs ({blind / length:.0%} of a step): the loop's own boundary "
                     f"lies somewhere in that stretch, which the trace cannot place")
        return s2, e2, note

    if seqs[0].where != "GPU ops":
        found = _launch_run_steps(seqs, rank, timeline, graph=True)
        if found is not None:
            return refined(*found)
    reasons = []
    noisy: list[tuple[float, int, Period]] = []
    # clean sequences richest first, as found; the noisier ones after, cleanest first
    for i, q in enumerate(seqs):
        per = first_period if i == 0 and first_period is not None else find_period(q.tokens)
        if per.best_match < CLEAN:
            noisy.append((-per.best_match, i, per))
            continue
        got = _repetition_steps(q, per, rank, timeline, calls)
        if not isinstance(got, str):
            return refined(*got)
        reasons.append(got)
    for _, i, per in sorted(noisy, key=lambda t: (t[0], t[1])):
        got = _repetition_steps(seqs[i], per, rank, timeline, calls)
        if not isinstance(got, str):
            return refined(*got)
        reasons.append(got)
    if seqs[0].where != "GPU ops":
        found = _launch_run_steps(seqs, rank, timeline, graph=False)
        if found is not None:
            return refined(*found)
    return *_empty(), "rank {}: no training steps found: no step markers, and none inferred: {}".format(
        rank, "; ".join(dict.fromkeys(reasons)))


def find_steps(timeline: Timeline) -> Steps:
    """Steps of every rank: marked ones where the trace has markers, else inferred ones (once per analysis
    context: the critical path begun before the analysis ends asks for them too)."""
    return memo(timeline, ("steps",), lambda: _find_steps(timeline))


def _find_steps(timeline: Timeline) -> Steps:
    steps: list[Step] = []
    notes: list[str] = []
    for rank in ranks_of(timeline):
        s, e, overlap_note = marked_steps_noted(timeline, rank)
        source: StepSource = "marked"
        if overlap_note:
            notes.append(overlap_note)
        if s.size == 0:
            s, e, note = infer_steps(timeline, rank)
            source = "inferred"
            notes.append(note)
        steps.extend(Step(rank, i, int(a), int(b), source) for i, (a, b) in enumerate(zip(s.tolist(), e.tolist(), strict=True)))
    return Steps(steps=tuple(steps), notes=tuple(notes))


STEADY_CADENCE = 0.5  # interquartile range of the intervals between launches over their median
HOST_PACED = 6.0  # launches at least this many call durations apart: the host works in between


class LaunchRun(msgspec.Struct, frozen=True):
    first: int  # position in the sequence of the run's first launch
    count: int
    graph: bool  # CUDA graph replays (else launches of one kernel)
    interval_ns: float  # median time from launch to launch
    paced: float  # median interval over the median launch call duration


def launch_run(seq: LaunchSequence, graph: bool, min_paced: float = 0.0,
               min_span: float = 0.0) -> LaunchRun | None:
    """The longest run of ≥ MIN_REPEATS consecutive launches of the same token (nothing else
    launched or waited for between them) at a steady cadence, of graph launches (graph=True) or of
    anything else, at least `min_paced` call durations apart and spanning at least `min_span` ns
    (count × interval); None when there is none. Vectorized over all runs at once."""
    tok = seq.tokens
    n = tok.size
    if n < MIN_REPEATS:
        return None
    run_start = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
    run_len = np.diff(np.r_[run_start, n])
    keep = run_len >= MIN_REPEATS
    lo, m = run_start[keep], run_len[keep]
    if lo.size == 0:
        return None
    seg, p = expand_ranges(lo, lo + m)
    all_launch = np.bincount(seg, weights=~seq.launch[p], minlength=lo.size) == 0
    is_graph = np.bincount(seg, weights=~seq.graph[p], minlength=lo.size) == 0
    inner = p > lo[seg]  # intervals: from the launch before, inside the run
    iv = (seq.start[p] - seq.start[np.maximum(p - 1, 0)]).astype(np.float64)
    med = group_quantile(seg[inner], iv[inner], lo.size, 0.5)
    q25 = group_quantile(seg[inner], iv[inner], lo.size, 0.25)
    q75 = group_quantile(seg[inner], iv[inner], lo.size, 0.75)
    dur = np.maximum(group_quantile(seg, (seq.end[p] - seq.start[p]).astype(np.float64), lo.size), 1.0)
    ok = all_launch & (is_graph == graph) & (med > 0) & (q75 - q25 <= STEADY_CADENCE * med)
    ok &= (med / dur >= min_paced) & (m * med >= min_span)
    if not ok.any():
        return None
    c = int(np.flatnonzero(ok)[np.argmax(m[ok])])  # the longest (the first of equals)
    return LaunchRun(int(lo[c]), int(m[c]), bool(is_graph[c]), float(med[c]), float(med[c] / dur[c]))


def cut_launch_run(seq: LaunchSequence, run: LaunchRun, calls: LaunchSequence) -> Cut:
    """One step per launch of the run. A step starts at the first call after the longest host
    pause since the previous launch (e.g. the stream-capture check just before a graph launch),
    looked up in `calls` (the same thread(s) with every API call); the last one ends at the next
    call after the loop, at most a median interval after its start."""
    launch_start = seq.start[run.first : run.first + run.count]
    launch_end = seq.end[run.first : run.first + run.count]
    c_start, c_end = calls.start, calls.end
    at = np.searchsorted(c_start, launch_start)  # the launch itself in `calls`
    prev_end = np.r_[launch_start[0], launch_end[:-1]]  # the first launch: from itself
    lo = np.minimum(np.searchsorted(c_start, prev_end, side="left"), at)
    # the first step: as many calls back as the others have at most, not into the set-up
    back = int(np.max(at[1:] - lo[1:])) if at.size > 1 else 0
    after_prev = int(np.searchsorted(c_start, seq.end[run.first - 1], side="left")) if run.first else 0
    lo[0] = min(at[0], max(at[0] - back, after_prev))
    pause = np.r_[0, c_start[1:] - c_end[:-1]]
    seg, idx = expand_ranges(lo, at + 1)
    order = np.lexsort((-pause[idx], seg))
    firsts = np.r_[0, np.flatnonzero(np.diff(seg[order])) + 1]
    starts = c_start[idx[order][firsts]]
    nxt = int(np.searchsorted(c_start, launch_end[-1], side="left"))
    cap = int(starts[-1]) + int(run.interval_ns)
    last_end = min(cap, int(c_start[nxt])) if nxt < c_start.size else cap
    ends = np.r_[starts[1:], max(last_end, int(launch_end[-1]))]
    return starts.astype(np.int64), ends.astype(np.int64)
