"""Analysing timelines: the analysis, its scope, the extras of `analyze --json`, comparisons, the
cross-rank part, and the smaller analyses the dashboard's pages show. Every function that runs analyses
takes an optional `context` (`AnalysisContext` of the timeline, held by the caller): what the analyses
derive from the timeline is computed once per context (without one, once per call)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from tracelab.analyses.core.memo import AnalysisContext, using

if TYPE_CHECKING:
    from tracelab.analyses.comparison import Comparison
    from tracelab.analyses.gate import Gate
    from tracelab.analyses.ranks.view import RankAnalysis
    from tracelab.analyses.ranks.wait_matrix import WaitMatrix
    from tracelab.analyses.results import Analysis, AnalysisOptions

    from ..model import Timeline

__all__ = ["AnalysisContext"]


def analyze(
    timeline: Timeline,
    options: AnalysisOptions | None = None,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    steps: str | None = None,
    window_us: str | None = None,
    context: AnalysisContext | None = None,
) -> Analysis:
    """Analyze a timeline and fill in the findings' prose. `steps="A:B"` (step indices, a Python slice)
    or `window_us="START:END"` (µs from the run start) restrict every figure to that range (BadInput
    when the range is bad or empty); without them the figures cover the whole trace."""
    from tracelab.analyses.pipeline import analyze_scoped
    from tracelab.analyses.results import AnalysisOptions
    from tracelab.render.text.findings import with_prose

    with using(timeline, context):
        return with_prose(analyze_scoped(timeline, options or AnalysisOptions(), rule_options, steps=steps, window_us=window_us))


def warm_up() -> None:
    """Import what the first analysis of a run imports (the pipeline, its rules, the findings' prose), so a
    server that calls this at start answers its first analysis without paying for the imports (about 0.3 s
    of a cold Gaps page without bytecode caches, issue 28)."""
    import tracelab.analyses.pipeline
    import tracelab.analyses.ranks.leading_wait
    import tracelab.analyses.results
    import tracelab.analyses.scope
    import tracelab.analyses.steps.setup_phase
    import tracelab.analyses.steps.windows
    import tracelab.render.text.findings  # noqa: F401


def scoped_timeline(timeline: Timeline, steps: str | None = None, window_us: str | None = None) -> Timeline:
    """The timeline restricted to `--steps` / `--window` (the whole timeline without them): what reports and
    comparisons draw their timeline figures from, so they cover the same range as the analysis."""
    if steps is None and window_us is None:
        return timeline
    from tracelab.analyses.scope import scope_timeline

    return scope_timeline(timeline, steps, window_us)[0]


def to_json(analysis: Analysis) -> dict[str, Any]:
    """The `analyze --json` document (schema 2, DESIGN.md)."""
    from tracelab.render.export.document import to_document

    return to_document(analysis)


def compare(
    a: Analysis, b: Analysis, timeline_a: Timeline | None = None, timeline_b: Timeline | None = None
) -> Comparison:
    """Deltas between two analyses, b - a (per device, gaps by cause, findings, top kernels when the
    timelines are given)."""
    from tracelab.analyses.compare import compare as _compare

    return _compare(a, b, timeline_a, timeline_b)


def health(timeline: Timeline, analysis: Analysis | None = None, context: AnalysisContext | None = None) -> Any:
    """The trace health section (tracelab/analyses/health.py): what the trace can and cannot support."""
    from tracelab.analyses.health import trace_health

    with using(timeline, context):
        return trace_health(timeline, analysis)


def ranges(timeline: Timeline, analysis: Analysis | None = None, context: AnalysisContext | None = None) -> Any:
    """GPU time by host range (NVTX, record_function, Kineto cpu_op / user_annotation) projected through
    launch correlation (tracelab/analyses/device/range_projection.py): a `RangeProjection`. Shares are of the
    analysis' total step time when it has steps, else of the GPU span."""
    from tracelab.analyses.device.range_projection import with_reference

    ref = sum(s.end_ns - s.start_ns for s in analysis.steps) if analysis is not None else 0
    with using(timeline, context) as ctx:
        projection = _projection(timeline, ctx)
    return with_reference(projection, ref, "steps") if ref else projection


def _projection(timeline: Timeline, ctx: AnalysisContext) -> Any:
    """GPU time by range with the GPU span as reference, once per context (`start_extras` may have begun it)."""
    from tracelab.analyses.device.range_projection import project_ranges

    return ctx.memo(("range projection",), lambda: project_ranges(timeline))


def start_extras(timeline: Timeline, context: AnalysisContext) -> None:
    """Begin, on helper threads now, what `analyze --json`'s extras need of a big timeline before the
    analysis is done: GPU time by range (it needs the steps only for its shares: `ranges` takes it from
    `context`, waiting for it if needed), the per-rank edges of the critical path's graph and, on a one-rank
    timeline, the critical path of the steps as soon as they are found (`critical_path` takes it when the
    analysis's step windows are the same). A small timeline (one analysis thread,
    `analyses/parallel.threads_for`) starts nothing, nor does a very big one (`analyses/parallel.memory_first`:
    their temporaries would add to the analysis's peak memory; at ×64, 7.9 M events, the range projection's
    and the graph build's are near 0.25 and 0.5 GiB): its extras run after the analysis."""
    from tracelab.analyses.parallel import in_background, memory_first, threads_for
    from tracelab.analyses.ranks.critical_path import start_path
    from tracelab.analyses.ranks.path_graph import per_rank_edges

    if threads_for(timeline.n_events) > 1 and not memory_first(timeline.n_events):
        with using(timeline, context) as ctx:
            in_background(lambda: _projection(timeline, ctx))
            in_background(lambda: per_rank_edges(timeline))
            in_background(lambda: start_path(timeline))


def ranges_document(projection: Any, top: int | None = None) -> dict[str, Any]:
    """The `ranges` part of `analyze --json` (every name; `top` keeps the largest only)."""
    from tracelab.render.reports.extras import ranges_doc

    return ranges_doc(projection if top is None else msgspec.structs.replace(projection, stats=projection.stats[:top]))


def memory(timeline: Timeline, analysis: Analysis | None = None, context: AnalysisContext | None = None) -> Any:
    """The GPU memory timeline (tracelab/analyses/device/gpu_memory.py), or None without memory events."""
    from tracelab.analyses.device.gpu_memory import memory_timeline

    with using(timeline, context):
        return memory_timeline(timeline, analysis)


def document_extras(
    timeline: Timeline, analysis: Analysis, ranks: RankAnalysis | None = None, context: AnalysisContext | None = None
) -> dict[str, Any]:
    """What `analyze --json` (and the MCP server's analyze) adds after the analysis document, for
    `timeline` = the analysed range (`scoped_timeline`): a multi-rank run's `ranks`, `collectives`,
    `stragglers`, … (`ranks` = its `rank_analysis`), the `critical_path` of the steps (issue 24), then
    `health`, `ranges` and `memory` (issue 27; memory null without memory events)."""
    from tracelab.analyses.parallel import memory_first, run_each, threads_for
    from tracelab.analyses.ranks.critical_path import critical_path_document, critical_path_for
    from tracelab.render.reports.extras import ranges_doc

    out: dict[str, Any] = {}
    with using(timeline, context):
        if ranks:
            from tracelab.analyses.ranks.rank_document import rank_document_of

            out.update(rank_document_of(ranks))
        # independent of each other: side by side on threads for a big timeline (analyses/parallel.py)
        path, h, p, m = run_each(
            [
                lambda: critical_path_for(timeline, analysis, ranks.collectives if ranks else None),
                lambda: health(timeline, analysis),
                lambda: ranges(timeline, analysis),
                lambda: memory(timeline, analysis),
            ],
            threads_for(timeline.n_events),
            first=[True, False, True, False],
            release=memory_first(timeline.n_events),
        )
    out["critical_path"] = critical_path_document(path)
    out.update({"health": h.to_dict(), "ranges": ranges_doc(p), "memory": None if m is None else m.to_dict()})
    return out


def rank_analysis(timeline: Timeline, analysis: Analysis, context: AnalysisContext | None = None) -> RankAnalysis:
    """The cross-rank part of a run (tracelab/analyses/ranks/view.py: per-rank figures, collectives,
    stragglers; `multi_rank` False for one rank), for `timeline` = the analysed range."""
    from tracelab.analyses.ranks.view import rank_analysis as ranks_of

    with using(timeline, context):
        return ranks_of(timeline, analysis)


def rank_wait_matrix(
    timeline: Timeline, analysis: Analysis, ranks: RankAnalysis, context: AnalysisContext | None = None
) -> WaitMatrix:
    """Who waited for whom in the run's collectives, rank × rank (tracelab/analyses/ranks/wait_matrix.py),
    over the steps like the Ranks table (row i sums to rank i's "waited in collectives") or the whole run."""
    from tracelab.analyses.ranks.wait_matrix import wait_matrix

    spans = None
    if analysis.step_rows:
        from tracelab.analyses.steps.windows import steps_spans

        spans = steps_spans(analysis.step_rows)
    with using(timeline, context):
        return wait_matrix(timeline, ranks.collectives, [r.rank for r in ranks.ranks], spans)


def rank_heatmap(
    timeline: Timeline, ranks: RankAnalysis, analysis: Analysis, context: AnalysisContext | None = None
) -> Any:
    """Busy fraction and collective wait per rank and step (or time bin) of a multi-rank run
    (tracelab/analyses/ranks/view.py: `RankHeatmap`), from its cross-rank analysis and the analysis's steps (their
    GPU windows where the step table has them, issue 24)."""
    from tracelab.analyses.ranks.heatmap import rank_heatmap as heatmap

    with using(timeline, context):
        return heatmap(timeline, ranks.collectives, steps=analysis.step_rows or analysis.steps)


def critical_path(
    timeline: Timeline, analysis: Analysis, ranks: RankAnalysis | None = None, context: AnalysisContext | None = None
) -> Any:
    """The critical path of each step (tracelab/analyses/ranks/critical_path.py), across ranks through the
    collectives of `ranks` when given."""
    from tracelab.analyses.ranks.critical_path import critical_path_for

    with using(timeline, context):
        return critical_path_for(timeline, analysis, ranks.collectives if ranks else None)


def critical_path_categories() -> tuple[str, ...]:
    """The categories a critical path's time falls into, in display order."""
    from tracelab.analyses.ranks.path_model import CATEGORIES

    return tuple(CATEGORIES)


def gate(a: Analysis, b: Analysis, fail_pct: float, comparison: Comparison) -> Gate:
    """The CI gate of `compare --fail-if-slower PCT`: whether B's steady-state step time is slower than
    A's by more than PCT % (one-sided Mann-Whitney U on the per-step times)."""
    from tracelab.analyses.gate import gate as decide

    v = comparison.verdict
    return decide(a, b, fail_pct, v.a_ns if v else 0, v.b_ns if v else 0, v.basis if v else "span")


def comparison_json(a: Analysis, b: Analysis, comparison: Comparison, decision: Gate | None = None) -> dict[str, Any]:
    """The `compare --json` document: both analyses, the comparison and the gate's decision when asked."""
    from tracelab.analyses.results import SCHEMA_VERSION
    from tracelab.render.export.comparison import comparison_document

    doc: dict[str, Any] = {"schema": SCHEMA_VERSION, "a": to_json(a), "b": to_json(b),
                           "comparison": comparison_document(comparison)}
    if decision is not None:
        doc["gate"] = decision.to_dict()
    return doc


def options(
    gap_threshold_us: float | None = None, exclude_orphans: bool = False, input_words: tuple[str, ...] = ()
) -> AnalysisOptions:
    """AnalysisOptions from the command-line settings (None / empty: the defaults)."""
    from tracelab.analyses.results import AnalysisOptions

    if gap_threshold_us is None:
        opts = AnalysisOptions(exclude_orphans=exclude_orphans)
    else:
        opts = AnalysisOptions(gap_threshold_ns=round(gap_threshold_us * 1000), exclude_orphans=exclude_orphans)
    return msgspec.structs.replace(opts, input_words=tuple(input_words)) if input_words else opts


def check_scope(steps: str | None, window_us: str | None) -> None:
    """BadInput for bad --steps / --window syntax (before any file is read)."""
    if steps is not None or window_us is not None:
        from tracelab.analyses.scope import parse_scope

        parse_scope(steps, window_us)


def check_gap_threshold_us(value: str) -> float:
    """A --gap-threshold-us value as a float; BadInput for nan, inf, huge or negative values."""
    from tracelab.analyses.scope import check_gap_threshold_us as check

    return check(value)


def run_start(timeline: Timeline) -> int:
    """The run's first event time (ns): what offsets 'from the run start' count from."""
    from tracelab.analyses.scope import run_start as start

    return start(timeline)


def find_steps(timeline: Timeline, context: AnalysisContext | None = None) -> Any:
    """The training steps of each rank (tracelab/analyses/steps/infer.py: `Steps`)."""
    from tracelab.analyses.steps.infer import find_steps as steps_of

    with using(timeline, context):
        return steps_of(timeline)


def range_tree_order(stats: Any) -> Any:
    """The ranges of a projection in tree order (parents before their children)."""
    from tracelab.analyses.device.range_projection import tree_order

    return tree_order(stats)


def launch_occupancy(timeline: Timeline, context: AnalysisContext | None = None) -> Any:
    """Per-kernel launch occupancy (tracelab/analyses/sm/occupancy.py)."""
    from tracelab.analyses.sm.occupancy import launch_occupancy as occupancy

    with using(timeline, context):
        return occupancy(timeline)


def gaps_in_setup(analysis: Analysis) -> Any:
    """Per gap of `analysis.gaps` (in its order): whether it lies in its rank's set-up, before the first step
    (tracelab/analyses/steps/setup_phase.py: `in_setup_mask`; all False when the run has no steps)."""
    from tracelab.analyses.steps.setup_phase import in_setup_mask

    return in_setup_mask(analysis.gaps, analysis.setup)


def kernel_table(timeline: Timeline, occupancy: Any = None, context: AnalysisContext | None = None) -> Any:
    """The kernels grouped by name: calls, total / mean / max time, share, occupancy when given
    (tracelab/analyses/device/kernels.py)."""
    from tracelab.analyses.device.kernels import kernel_table as table

    with using(timeline, context):
        return table(timeline, occupancy)


def stream_overlap_matrix(timeline: Timeline, rank: int, device: int, context: AnalysisContext | None = None) -> Any:
    """How long each pair of streams of one device ran at the same time (tracelab/analyses/device/overlap.py)."""
    from tracelab.analyses.device.overlap import stream_overlap_matrix as matrix

    with using(timeline, context):
        return matrix(timeline, rank, device)
