"""`analyze`: a Timeline in, one frozen `Analysis` out (devices, gaps, findings, notes)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..model import Flag, Timeline
from .devices import device_rows, device_summaries
from .findings import FindingContext, find_all, finding_notes
from .gaps import find_gaps, host_views
from .results import Analysis, AnalysisOptions, TraceInfo


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


def analyze(timeline: Timeline, options: AnalysisOptions = DEFAULT_OPTIONS) -> Analysis:
    """Per-device busy/idle/overlap, idle gaps with causes, and findings (DESIGN.md definitions)."""
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
    ctx = FindingContext(timeline, rows, hosts, devices, gaps)
    findings = find_all(ctx)
    notes.extend(finding_notes(ctx))
    meta = timeline.meta
    ranks = meta.ranks or tuple(int(r) for r in np.unique(timeline.events["rank"].to_numpy()))
    return Analysis(
        trace=TraceInfo(source=meta.source, format=meta.format, ranks=tuple(ranks), start_ns=run_start),
        devices=devices,
        gaps=gaps,
        findings=findings,
        notes=tuple(notes),
        options=options,
    )
