"""`analyze`: a Timeline in, one frozen `Analysis` out (devices, gaps, steps, findings, notes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..model import Flag, Timeline
from .devices import device_rows, device_summaries
from .gaps import find_gaps, host_views
from .results import Analysis, AnalysisOptions, StepInfo, TraceInfo
from .rules import FindingContext, evaluate_all
from .steps import find_steps


def drop_orphans(timeline: Timeline) -> tuple[Timeline, int]:
    """The timeline without events flagged ORPHAN (GPU work whose correlation matches no host
    launch), and how many were dropped. TraceLens-compatible totals exclude them."""
    orphan = (timeline.events["flags"].to_numpy() & Flag.ORPHAN) != 0
    n = int(orphan.sum())
    if n == 0:
        return timeline, 0
    events = timeline.events[~orphan].reset_index(drop=True)
    return replace(timeline, events=events), n


DEFAULT_OPTIONS = AnalysisOptions()


def analyze(
    timeline: Timeline,
    options: AnalysisOptions = DEFAULT_OPTIONS,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Analysis:
    """Per-device busy/idle/overlap, idle gaps with causes, steps and findings (DESIGN.md
    definitions). `rule_options` overrides rule thresholds by rule id."""
    notes = list(timeline.meta.notes)
    run_start = int(timeline.events["start"].min()) if len(timeline.events) else None
    if options.exclude_orphans:
        timeline, dropped = drop_orphans(timeline)
        notes.append(
            f"excluded {dropped} GPU events whose correlation matches no host launch (TraceLens-compatible mode)"
        )
    rows = device_rows(timeline)
    if not rows:
        notes.append("no GPU activity (kernels, memcpys, memsets) in this trace")
    hosts = host_views(timeline)
    devices = device_summaries(timeline, rows)
    gaps = find_gaps(timeline, options.gap_threshold_ns, rows=rows, hosts=hosts)
    steps = find_steps(timeline)
    notes.extend(steps.notes)
    ctx = FindingContext(timeline, rows, hosts, devices, gaps, steps)
    findings, skipped = evaluate_all(ctx, rule_options)
    notes.extend(f"{s.rule} not evaluated: {s.reason}" for s in skipped)
    meta = timeline.meta
    ranks = meta.ranks or tuple(int(r) for r in np.unique(timeline.events["rank"].to_numpy()))
    return Analysis(
        trace=TraceInfo(source=meta.source, format=meta.format, ranks=tuple(ranks), start_ns=run_start),
        devices=devices,
        gaps=gaps,
        findings=findings,
        notes=tuple(notes),
        options=options,
        steps=tuple(
            StepInfo(rank=s.rank, index=s.index, start_ns=s.start_ns, end_ns=s.end_ns, source=s.source)
            for s in steps.steps
        ),
    )
