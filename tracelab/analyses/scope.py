"""Restricting a Timeline to chosen steps or a time window (`--steps A:B`, `--window START_US:END_US`).

`--steps A:B` is a Python slice of each rank's steps (tracelab.analyses.steps.infer): steps A, A+1, ...,
B-1; either side may be left out (`1:` drops the first step, `:5` keeps steps 0-4) and a single `A`
means step A alone. The range of a rank is the chosen steps' span on the GPU (issue 24): from the first
chosen step's GPU start to the latest end of their GPU windows (a step's GPU window: the GPU work its
host range launched, step_table.gpu_windows; its host range when it launched none); host events are
kept over that span widened to the steps' host ranges (step_windows.steps_spans; each rank its own
range: ranks do not step in lockstep). On asynchronous code the host enqueues a step long before its GPU
work runs: the host range alone would miss most of the step's GPU work and take the previous steps'.
`--window START_US:END_US` is one range for every rank, in microseconds from the run start (the
earliest event of the trace); either side may be left out.

`apply_scope` keeps the events that overlap the range and clips them at its edges, so busy, idle,
overlap and gaps computed on the result are the figures of that range under the usual definitions
(a device's span runs from its first to its last GPU activity inside the range).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec
import numpy as np

from tracelab.analyses.core.bands import group_index
from tracelab.analyses.core.rows import rank_rows
from tracelab.analyses.steps.infer import Steps, find_steps
from tracelab.analyses.steps.table import StepRow, gpu_windows
from tracelab.analyses.steps.windows import steps_spans
from tracelab.errors import BadInput
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import sorted_unique
from tracelab.model.kinds import GPU_ACTIVITY_KINDS
from tracelab.text_format import fmt_ns

_INT_RANGE = re.compile(r"^\s*(\d*)\s*(:\s*(\d*)\s*)?$")
_NUM = r"(\d+(?:\.\d*)?|\.\d+)?"
_US_RANGE = re.compile(rf"^\s*{_NUM}\s*:\s*{_NUM}\s*$")
OPEN_END = np.iinfo(np.int64).max // 4


class Scope(msgspec.Struct, frozen=True):
    steps: tuple[int, int] | None  # [first, stop): step indices, a Python slice
    window_ns: tuple[int, int] | None  # [start, end) in ns from the run start


TIME_LIMIT_US = (1 << 62) / 1000.0  # every time tracelab holds is below 2^62 ns (parsers/validate.py)


def check_gap_threshold_us(text: str) -> float:
    """--gap-threshold-us as a float: a finite number of µs from 0 to TIME_LIMIT_US; BadInput (one
    line) otherwise (nan, inf, 1e308, -5)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= TIME_LIMIT_US:
        raise BadInput(f"--gap-threshold-us {text[:40]!r}: expected a number of microseconds from 0 to {TIME_LIMIT_US:.3g}")
    return value


def _us_to_ns(text: str, window_us: str) -> int:
    value = float(text)
    if not math.isfinite(value) or abs(value) >= TIME_LIMIT_US:
        raise BadInput(f"--window {window_us[:80]!r}: {text[:40]} µs is out of range (times are below {TIME_LIMIT_US:.3g} µs)")
    return round(value * 1000)


def parse_scope(steps: str | None, window_us: str | None) -> Scope | None:
    """The scope given by `--steps` / `--window` (None when neither is given); BadInput on bad
    syntax, an empty range, or both options at once."""
    if steps is None and window_us is None:
        return None
    if steps is not None and window_us is not None:
        raise BadInput("give --steps or --window, not both")
    if steps is not None:
        m = _INT_RANGE.match(steps)
        if not m or (not m.group(1) and not m.group(2)):
            raise BadInput(f"--steps {steps!r}: expected A:B (step indices, e.g. 1:10, 3:, :5 or 4)")
        first = int(m.group(1)) if m.group(1) else 0
        stop = first + 1 if m.group(2) is None else int(m.group(3)) if m.group(3) else OPEN_END
        if stop <= first:
            raise BadInput(f"--steps {steps!r}: the range is empty (B must be greater than A)")
        return Scope(steps=(first, stop), window_ns=None)
    assert window_us is not None
    m = _US_RANGE.match(window_us)
    if not m:
        raise BadInput(f"--window {window_us!r}: expected START_US:END_US (microseconds from the run start, e.g. 1000:2500)")
    start = _us_to_ns(m.group(1), window_us) if m.group(1) else 0
    end = _us_to_ns(m.group(2), window_us) if m.group(2) else OPEN_END
    if end <= start:
        raise BadInput(f"--window {window_us!r}: the window is empty (END_US must be greater than START_US)")
    return Scope(steps=None, window_ns=(start, end))


def run_start(timeline: Timeline) -> int:
    """The run start: the earliest event of the trace (0 for an empty one)."""
    start = timeline.events["start"].to_numpy()
    return int(start.min()) if start.size else 0


class _Window(NamedTuple):
    """A step with its GPU window (the fields of step_table.StepRow that step_windows reads)."""

    rank: int
    index: int
    start_ns: int
    end_ns: int
    gpu_start_ns: int
    gpu_end_ns: int


def chosen_steps(timeline: Timeline, scope: Scope, steps: Steps) -> list[_Window]:
    """The steps `scope.steps` chooses on every rank, each with its GPU window (step_table.gpu_windows:
    the GPU work its host range launched); BadInput when a rank has fewer steps than the first chosen."""
    assert scope.steps is not None
    first, stop = scope.steps
    ranks = steps.ranks()
    if not ranks:
        why = "; ".join(steps.notes) or "the trace has no steps"
        raise BadInput(f"--steps {first}:{_stop_text(stop)}: no steps found ({why})")
    gpu_of = rank_rows(timeline)
    empty = np.zeros(0, dtype=np.int64)
    out: list[_Window] = []
    for rank in ranks:
        s, e = steps.of_rank(rank)
        if first >= s.size:
            raise BadInput(f"--steps {first}:{_stop_text(stop)}: rank {rank} has {s.size} steps (0..{s.size - 1})")
        g0, g1 = gpu_windows(timeline, rank, gpu_of.get(rank, empty), s, e)
        for i in range(first, min(stop, s.size)):  # one entry per chosen step
            out.append(_Window(rank, i, int(s[i]), int(e[i]), int(g0[i]), int(g1[i])))
    return out


def _stop_text(stop: int) -> str:
    return "" if stop >= OPEN_END else str(stop)


def apply_scope(timeline: Timeline, scope: Scope | None, steps: Steps) -> tuple[Timeline, str]:
    """The timeline restricted to the scope (events overlapping the range, clipped at its edges)
    and a note saying what the figures cover. Scope None: the whole timeline, and a note saying how
    many steps and how much warm-up the figures include. A `--steps` range is the chosen steps' GPU
    span (`step_windows.steps_spans`: GPU work inside their GPU windows, host events inside those
    widened to the steps' host ranges), as `steps_span_timeline` clips a run to all its steps."""
    if scope is None:
        return timeline, whole_run_note(steps)
    rank = timeline.col("rank")
    origin = run_start(timeline)
    if scope.window_ns is not None:
        lo_rel, hi_rel = scope.window_ns
        lo, hi = origin + lo_rel, origin + min(hi_rel, OPEN_END)
        ranges = {int(r): (lo, hi) for r in sorted_unique(rank).tolist()}
        clipped = clip_spans(timeline, {r: (a, b, a, b) for r, (a, b) in ranges.items()})
        inside = _steps_inside(steps, ranges)
        end_text = "the end" if hi_rel >= OPEN_END else f"+{fmt_ns(hi_rel)}"
        note = f"figures cover the window +{fmt_ns(lo_rel)} … {end_text} from the run start ({inside})"
        return _with_scope(clipped, scope, ranges), note
    chosen = chosen_steps(timeline, scope, steps)
    spans = steps_spans(chosen)
    clipped = clip_spans(timeline, spans)
    parts = []
    for r in sorted(spans):
        g0, g1 = spans[r][0], spans[r][1]
        idx = [w.index for w in chosen if w.rank == r]
        n_all = steps.of_rank(r)[0].size
        parts.append(f"rank {r}: steps {min(idx)}–{max(idx)} of 0–{n_all - 1} ({fmt_ns(g1 - g0)} on the GPU, "
                     f"+{fmt_ns(g0 - origin)} … +{fmt_ns(g1 - origin)})")
    source = _source_text(steps)
    note = "figures cover " + "; ".join(parts) + (f" ({source} steps)" if source else "")
    ranges = {r: (v[0], v[1]) for r, v in spans.items()}
    out = _with_scope(clipped, scope, ranges)
    extra = dict(out.meta.extra)
    extra["scope"] = {**extra["scope"], "host_ranges_ns": {str(r): [v[2], v[3]] for r, v in spans.items()},
                      "chosen": {str(r): [w.index for w in chosen if w.rank == r] for r in spans}}
    return out.with_meta(extra=extra), note


_GPU_SIDE = np.array([*(int(k) for k in GPU_ACTIVITY_KINDS), int(EventKind.GPU_ANNOTATION)], dtype=np.int64)


def clip_spans(timeline: Timeline, spans: Mapping[int, tuple[int, int, int, int]]) -> Timeline:
    """The timeline clipped per rank to `spans` {rank: (gpu_lo, gpu_hi, host_lo, host_hi)}
    (`step_windows.steps_spans`): GPU work (kernels, copies, memsets, GPU annotations, SM blocks) to
    [gpu_lo, gpu_hi), every other event to [host_lo, host_hi); a rank without a span keeps nothing."""
    rank = timeline.col("rank")
    g_lo, g_hi = _per_rank_bounds(rank, {r: (v[0], v[1]) for r, v in spans.items()})
    h_lo, h_hi = _per_rank_bounds(rank, {r: (v[2], v[3]) for r, v in spans.items()})
    gpu = np.isin(timeline.col("kind"), _GPU_SIDE)
    return _clip(timeline, np.where(gpu, g_lo, h_lo), np.where(gpu, g_hi, h_hi), {r: (v[0], v[1]) for r, v in spans.items()})


def _per_rank_bounds(rank: np.ndarray, ranges: Mapping[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the [lo, hi) of its rank's range; (0, 0) (nothing kept) for a rank without one."""
    table = sorted(ranges)
    lo_r, hi_r = (np.array([ranges[r][k] for r in table] or [0], dtype=np.int64) for k in (0, 1))
    idx, known = group_index(np.array(table, dtype=np.int64), rank)
    return np.where(known, lo_r[idx], 0), np.where(known, hi_r[idx], 0)


def _clip(timeline: Timeline, lo: np.ndarray, hi: np.ndarray, gpu_ranges: Mapping[int, tuple[int, int]]) -> Timeline:
    """Events overlapping [lo, hi) (per event), clipped to it; instantaneous events inside it; SM blocks
    overlapping their rank's `gpu_ranges` entry, clipped to it. By columns: no pandas unless the
    timeline carries SM blocks."""
    start, end = timeline.col("start"), timeline.col("end")
    keep = ((end > lo) & (start < hi)) | ((end == start) & (start >= lo) & (start < hi))
    cols = {k: np.asarray(v)[keep] for k, v in timeline.cols.items()}
    cols["start"] = np.maximum(start[keep], lo[keep]).astype(np.int64)
    cols["end"] = np.minimum(end[keep], hi[keep]).astype(np.int64)
    blocks = timeline.sm_blocks
    if blocks is not None and len(blocks):
        b_lo, b_hi = _per_rank_bounds(blocks["rank"].to_numpy(), gpu_ranges)
        bs, be = blocks["start"].to_numpy(), blocks["end"].to_numpy()
        bkeep = (be > b_lo) & (bs < b_hi)
        blocks = blocks[bkeep].copy()
        blocks["start"] = np.maximum(bs[bkeep], b_lo[bkeep])
        blocks["end"] = np.minimum(be[bkeep], b_hi[bkeep])
        blocks = blocks.reset_index(drop=True)
    return dataclasses.replace(timeline, cols=cols, sm_blocks=blocks)


def _with_scope(timeline: Timeline, scope: Scope, ranges: dict[int, tuple[int, int]]) -> Timeline:
    extra = dict(timeline.meta.extra)
    extra["scope"] = {"steps": list(scope.steps) if scope.steps else None,
                      "window_ns": list(scope.window_ns) if scope.window_ns else None,
                      "ranges_ns": {str(r): [int(a), int(b)] for r, (a, b) in ranges.items()}}
    return timeline.with_meta(extra=extra)


def _steps_inside(steps: Steps, ranges: dict[int, tuple[int, int]]) -> str:
    total = inside = 0
    for r in steps.ranks():
        s, e = steps.of_rank(r)
        lo, hi = ranges.get(r, (0, 0))
        total += s.size
        inside += int(np.count_nonzero((s >= lo) & (e <= hi)))
    return f"{inside} of {total} steps fully inside" if total else "no steps found"


def _source_text(steps: Steps) -> str:
    return "/".join(sorted({s.source for s in steps.steps}))


def whole_run_note(steps: Steps) -> str:
    if not steps.steps:
        return "figures cover the whole trace (no steps found)"
    parts = []
    for r in steps.ranks():
        s, e = steps.of_rank(r)
        d = e - s
        med, first = float(np.median(d)), int(d[0])
        ratio = f", {first / med:.1f}× the median step" if med > 0 else ""
        parts.append(f"rank {r}: {s.size} steps, median {fmt_ns(int(med))}; warm-up step 0 {fmt_ns(first)}{ratio}")
    return (f"figures cover the whole trace, {_source_text(steps)} steps included: " + "; ".join(parts)
            + " (--steps 1: leaves the warm-up out)")


def steps_in_ranges(steps: Steps, ranges: dict[int, tuple[int, int]]) -> Steps:
    """The steps that overlap their rank's range, clipped to it; they keep their indices."""
    kept = []
    for st in steps.steps:
        lo, hi = ranges.get(st.rank, (0, 0))
        a, b = max(st.start_ns, lo), min(st.end_ns, hi)
        if b > a:
            kept.append(msgspec.structs.replace(st, start_ns=a, end_ns=b))
    return Steps(tuple(kept), steps.notes)


def scope_timeline(timeline: Timeline, steps_option: str | None, window_option: str | None,
                   ) -> tuple[Timeline, Steps, str]:
    """What `--steps` / `--window` do, in one call: the timeline restricted to the scope, its steps
    (`--steps`: the chosen ones, whole; `--window`: those inside the range, clipped; with their original
    indices) and the note on what the figures cover. Without either option: the whole timeline, all its
    steps, and the warm-up note."""
    steps = find_steps(timeline)
    scope = parse_scope(steps_option, window_option)
    scoped, note = apply_scope(timeline, scope, steps)
    if scope is None:
        return scoped, steps, note
    info = scoped.meta.extra["scope"]
    if "chosen" in info:
        chosen = {(int(r), i) for r, idx in info["chosen"].items() for i in idx}
        return scoped, Steps(tuple(s for s in steps.steps if (s.rank, s.index) in chosen), steps.notes), note
    ranges = {int(r): (int(v[0]), int(v[1])) for r, v in info["ranges_ns"].items()}
    return scoped, steps_in_ranges(steps, ranges), note


def steps_span_timeline(timeline: Timeline, rows: Sequence[StepRow]) -> Timeline:
    """The timeline clipped, per rank, to its steps (`step_windows.steps_spans`): GPU work to the steps'
    GPU windows (from the first step's GPU start to the last GPU end: asynchronous work outlives the
    host range), host events to that span widened to the steps' host ranges. What set-up and teardown
    did stays out. The whole timeline when `rows` is empty. `apply_scope` clips `--steps A:B` the same way."""
    if not rows:
        return timeline
    return clip_spans(timeline, steps_spans(rows))
