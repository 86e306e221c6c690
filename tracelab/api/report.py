"""Reports: the api computes every analysis a report shows, then `tracelab.render.reports.write` writes it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracelab.analyses.core.memo import AnalysisContext, using

if TYPE_CHECKING:
    from tracelab.analyses.results import Analysis
    from tracelab.render.reports.write import ReportParts

    from ..model import Timeline


def report_parts(
    analysis: Analysis,
    timeline: Timeline | None = None,
    against: tuple[Analysis, Timeline | None] | None = None,
    context: AnalysisContext | None = None,
    *,
    kernels: bool = True,
) -> ReportParts:
    """What a report of `analysis` shows besides the analysis itself: the comparison with `against` (a
    baseline), the kernel table, the trace health, GPU time by range, GPU memory and the critical path
    (the last four need the timeline; `kernels=False`: no kernel table, as the .json report has none)."""
    from tracelab.analyses.compare import compare
    from tracelab.render.reports.write import ReportParts, report_title

    comparison = labels = None
    if against is not None:
        base_analysis, base_timeline = against
        comparison = compare(base_analysis, analysis, base_timeline, timeline)
        labels = (report_title(base_analysis, base_timeline), report_title(analysis, timeline))
    if timeline is None:
        return ReportParts(comparison, labels)
    from tracelab.analyses.device.kernels import kernel_summary
    from tracelab.analyses.ranks.critical_path import critical_path_for

    from .analysis import health, memory, ranges

    with using(timeline, context):
        collectives = None
        if len(analysis.trace.ranks) > 1:
            from tracelab.analyses.ranks.collectives import match_collectives

            collectives = match_collectives(timeline)
        cpath = critical_path_for(timeline, analysis, collectives)
        extras = (health(timeline, analysis), ranges(timeline, analysis), memory(timeline, analysis))
        table = kernel_summary(timeline) if kernels else None
    return ReportParts(comparison, labels, table, extras, cpath if cpath.steps else None)


def report(
    out: str | Path,
    analysis: Analysis,
    timeline: Timeline | None = None,
    against: tuple[Analysis, Timeline | None] | None = None,
    context: AnalysisContext | None = None,
) -> Path:
    """Write a report of `analysis` to `out` (format from the suffix: .html, .md, .json); `against` adds a
    comparison with a baseline. Returns the path written."""
    from tracelab.render.reports.write import report_format, write_report

    fmt = report_format(out)  # an unknown format is one line before any analysis
    parts = report_parts(analysis, timeline, against, context, kernels=fmt != "json")
    return write_report(out, analysis, timeline, parts)
