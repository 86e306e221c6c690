"""Findings: the rules of `tracelab.analyses.rules` (one module per rule) run over a Timeline plus its
gaps. One Finding per rule for the whole run (all ranks and devices); `data` holds the details, the
prose is built by `tracelab.render.findings`. This module keeps the entry points other code imports
(`find_all`, `FindingContext`, `find_steps`)."""

from __future__ import annotations

import re

import numpy as np

from ..model import EventKind, Timeline
from .results import Finding
from .rules import FindingContext, NotEvaluated, evaluate_all
from .rules.pageable_memcpy import RULE as _PAGEABLE

__all__ = ["PAGEABLE_MIN_BYTES", "FindingContext", "NotEvaluated", "find_all", "find_steps", "finding_notes"]

PAGEABLE_MIN_BYTES: int = int(_PAGEABLE.options["min_bytes"])

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
STEP_LIKE = re.compile(
    r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*$", re.IGNORECASE
)


def find_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-level marked training steps of a rank: (start, end, name id) sorted by start."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    host_range = np.isin(kind, [int(EventKind.CPU_OP), int(EventKind.NVTX_RANGE)]) & (
        ev["rank"].to_numpy() == rank
    )
    names = ev["name"].to_numpy()
    for pattern in (PROFILER_STEP, STEP_LIKE):
        ids = np.fromiter((i for i, s in enumerate(timeline.strings) if pattern.search(s)), dtype=np.int64)
        if ids.size == 0:
            continue
        pos = np.flatnonzero(host_range & np.isin(names, ids))
        if pos.size == 0:
            continue
        s = ev["start"].to_numpy()[pos]
        e = ev["end"].to_numpy()[pos]
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        top = ~(e <= prev_max) | (np.arange(pos.size) == 0)
        top &= e > s
        return s[top], e[top], names[pos][top]
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty, empty


def find_all(ctx: FindingContext) -> tuple[Finding, ...]:
    """Every rule that fires, most severe first, then by GPU time wasted."""
    return evaluate_all(ctx)[0]


def finding_notes(skipped: tuple[NotEvaluated, ...]) -> list[str]:
    """The rules that were not evaluated, in words (for Analysis.notes)."""
    return [f"{s.rule} not evaluated: {s.reason}" for s in skipped]
