"""Set-up kept apart from the steps (issue 24, item 4).

Everything of a rank before its first step is its *set-up*: imports, model construction, the
communicator's warm-up, the first copies to the GPU. Per rank: the set-up's span (first GPU activity
to the first step's start), the GPU's idle time in it, the gaps that end in it and the longest one.

Findings get a `scope`: "steps" when the rule fires on the steps alone, "setup" when it fires on the
whole run but not on the steps (its events all lie in the set-up), "whole" when the run has no steps.
The steps alone are only re-examined when the set-up is material (SETUP_SHARE of some rank's GPU
span): otherwise every finding of a run with steps is "steps". When they are, the "steps" findings are
those of the steps alone, with their numbers (set-up events left out of count and waste), whether or
not the rule fired on the whole run: a threshold taken as a share of the span (e.g.
serialized_copy_compute's min_span_fraction) is diluted by a long set-up, whose length depends on when
the profiler started (nsys from the process's start, torch.profiler later), not on the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.core.bands import group_index
from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.core.rows import rank_rows
from tracelab.analyses.results import CAUSES, Finding, Gap, GapTable
from tracelab.model import Timeline

SETUP_SHARE = 0.05  # re-examine the findings on the steps alone when the set-up holds this share


class RankSetup(msgspec.Struct, frozen=True):
    rank: int
    start_ns: int  # the rank's first GPU activity
    end_ns: int  # its first step's start
    span_ns: int
    gpu_busy_ns: int
    idle_ns: int
    gaps: int  # gaps (at least the display threshold) that end in the set-up
    gap_ns: int
    top_gap_start_ns: int  # -1 when none
    top_gap_ns: int
    top_gap_cause: str


def rank_setups(timeline: Timeline, step_rows: tuple, gap_seq: Sequence[Gap]) -> tuple[RankSetup, ...]:
    """The set-up of every rank that has steps and GPU activity before its first step."""
    gaps = GapTable.of(gap_seq)
    first: dict[int, int] = {}
    for r in step_rows:
        first[r.rank] = min(first.get(r.rank, r.start_ns), r.start_ns)
    start, end = timeline.col("start"), timeline.col("end")
    g_rank, g_start, g_end = gaps.column("rank"), gaps.column("start"), gaps.column("end")
    g_cause = gaps.column("cause")
    out = []
    for rank, rows in sorted(rank_rows(timeline).items()):
        if rank not in first or rows.size == 0:
            continue
        stop = first[rank]
        lo = int(start[rows].min())
        if stop <= lo:
            continue
        us, ue = merge(start[rows], end[rows])
        busy = int(covered_length(us, ue, np.array([lo]), np.array([stop]))[0])
        mine = (g_rank == rank) & (g_end <= stop)
        dur = (g_end - g_start)[mine]
        top = int(np.argmax(dur)) if dur.size else -1
        top_gap = (int(g_start[mine][top]), int(dur[top]), CAUSES[int(g_cause[mine][top])]) if top >= 0 else (-1, 0, "")
        out.append(RankSetup(rank, lo, stop, stop - lo, busy, stop - lo - busy, int(mine.sum()), int(dur.sum()), *top_gap))
    return tuple(out)


def is_material(setups: tuple[RankSetup, ...], spans: Mapping[int, int]) -> bool:
    """Whether some rank's set-up holds SETUP_SHARE of its GPU span."""
    return any(s.span_ns >= SETUP_SHARE * max(1, spans.get(s.rank, 0)) for s in setups)


def scope_findings(findings: tuple[Finding, ...], has_steps: bool, material: bool,
                   steps_only: Callable[[], tuple[Finding, ...]]) -> tuple[Finding, ...]:
    """Each finding with its scope; set-up findings last. `steps_only` evaluates the rules on the
    steps alone (called only when the set-up is material): its findings are the "steps" ones, also
    those of rules that did not fire on the whole run."""
    if not has_steps:
        return tuple(msgspec.structs.replace(f, scope="whole") for f in findings)
    if not material:
        return tuple(msgspec.structs.replace(f, scope="steps") for f in findings)
    inside = steps_only()
    fired_inside = {f.rule for f in inside}
    steps = [msgspec.structs.replace(f, scope="steps") for f in inside]
    setup = [msgspec.structs.replace(f, scope="setup") for f in findings if f.rule not in fired_inside]
    return (*steps, *setup)


def setup_document(setups: tuple[RankSetup, ...]) -> dict[str, Any] | None:
    """The `setup` object of the analysis document (None without steps)."""
    if not setups:
        return None
    top = max(setups, key=lambda s: s.top_gap_ns)
    return {"end_ns": max(s.end_ns for s in setups),
            "span_ns": max(s.span_ns for s in setups),
            "idle_ns": sum(s.idle_ns for s in setups),
            "gaps": sum(s.gaps for s in setups),
            "gap_ns": sum(s.gap_ns for s in setups),
            "top_gap": {"rank": top.rank, "start_ns": top.top_gap_start_ns, "duration_ns": top.top_gap_ns,
                        "cause": top.top_gap_cause} if top.top_gap_ns else None,
            "ranks": [
                {"rank": s.rank, "start_ns": s.start_ns, "end_ns": s.end_ns, "span_ns": s.span_ns,
                 "idle_ns": s.idle_ns, "gaps": s.gaps, "gap_ns": s.gap_ns}
                for s in setups
            ]}


def in_setup_mask(gaps: Sequence[Gap], setups: Sequence[RankSetup]) -> np.ndarray:
    """Per gap (in the order of `gaps`): whether it ends in its rank's set-up (at or before the first step)."""
    table = GapTable.of(gaps)
    ends = {s.rank: s.end_ns for s in setups}
    if not ends or not len(table):
        return np.zeros(len(table), dtype=bool)
    ranks = np.array(sorted(ends), dtype=np.int64)
    stop = np.array([ends[r] for r in ranks.tolist()], dtype=np.int64)
    i, known = group_index(ranks, table.column("rank"))
    return known & (table.column("end") <= np.where(known, stop[i], -1))


def steps_gaps_first(gaps: Sequence[Gap], setups: Sequence[RankSetup], k: int | None = None) -> list[Gap]:
    """The gaps to list (issue 24: "the idle-gap list leads with the steps' gaps"): the steps' gaps, longest
    first, then the set-up's, longest first; the first k of them (all when k is None). One order for the
    CLI's gap list and the dashboard's Gaps page."""
    table = GapTable.of(gaps)
    setup = in_setup_mask(table, setups)
    order = np.lexsort((np.arange(len(table)), -table.duration, setup))  # ties keep their order
    return table._rows(order if k is None else order[:k])
