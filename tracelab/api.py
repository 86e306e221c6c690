"""The library facade: what the CLI and the dashboard use, and what a Python user imports.

    from tracelab import api
    timeline = api.load("trace.json")               # parse a file (or a run directory)
    analysis = api.analyze(timeline)                 # devices, gaps, steps, findings (with prose)
    doc = api.to_json(analysis)                      # the `analyze --json` document (schema 2)
    run = api.import_trace("trace.json", store)      # parse and save into a store (run.run_id)
    rid = api.store_timeline(timeline, store, source_path="x", fingerprint="...")  # a parsed Timeline
    timeline = api.resolve("my-run", store)          # a path or a run id / name in the store
    cmp = api.compare(analysis_a, analysis_b)
    api.report("out.html", analysis, timeline)

One-way flow: parsers -> model -> analyses -> render -> (this facade) -> cli/app.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelab.io.detect import Progress

    from .analyses.compare import Comparison
    from .analyses.results import Analysis, AnalysisOptions
    from .model import Timeline
    from .store import Store

__all__ = [
    "Imported",
    "analyze",
    "compare",
    "document_extras",
    "health",
    "import_trace",
    "load",
    "memory",
    "ranges",
    "ranges_document",
    "report",
    "resolve",
    "scoped_timeline",
    "sql",
    "store_timeline",
    "store_views",
    "to_json",
]

def load(path: str | Path, progress: Progress | None = None) -> Timeline:
    """Parse a trace file or run directory into a Timeline (format detected from the content).
    Raises tracelab.errors.BadInput (one line naming the file) for input it cannot read."""
    from tracelab.io.detect import load_trace

    return load_trace(path, progress)


@dataclass(frozen=True)
class Imported:
    run_id: str
    new: bool  # False: the same content was already in the store (its run id is returned)


def import_trace(
    path: str | Path,
    store: Store,
    name: str | None = None,
    *,
    replace: bool = False,
    source_path: str | None = None,
    parse_progress: Progress | None = None,
    store_progress: Progress | None = None,
) -> Imported:
    """Parse a trace (file or directory) and save it as a run of `store`: the one import workflow (the
    CLI's `import` and the dashboard's upload page both call this). Content already in the store (same
    fingerprint) is not parsed again: its run id comes back with new=False, unless `replace`.
    `source_path` is what the store records as the source (default: the absolute path)."""
    from tracelab.io import trace_fingerprint

    from .errors import BadInput, DuplicateRun

    p = Path(path)
    if not p.exists():
        raise BadInput("no such file or directory", p)
    fp = trace_fingerprint(p)
    existing = store.find_fingerprint(fp)
    if existing and not replace:
        return Imported(existing, False)
    timeline = load(p, parse_progress)
    try:
        rid = store_timeline(
            timeline,
            store,
            source_path=source_path or str(p.absolute()),
            fingerprint=fp,
            name=name,
            progress=store_progress,
            replace=replace,
        )
    except DuplicateRun as e:  # imported concurrently by another process
        return Imported(e.run_id, False)
    return Imported(rid, True)


def store_timeline(
    timeline: Timeline,
    store: Store,
    *,
    source_path: str | Path,
    fingerprint: str,
    name: str | None = None,
    progress: Progress | None = None,
    replace: bool = False,
) -> str:
    """Save a parsed Timeline as a run of `store` in one transaction, with what the dashboard's first
    view of it reads (`tracelab.render.timeline_overview`: the whole-run timeline of a big run);
    returns the run id. DuplicateRun when the store holds this fingerprint already (unless `replace`)."""
    from .analyses.parallel import in_background
    from .render.timeline_overview import overview_views

    return store.import_timeline(
        timeline,
        source_path=source_path,
        fingerprint=fingerprint,
        name=name,
        progress=progress,
        replace=replace,
        views=in_background(lambda: overview_views(timeline)),  # computed while the events are written
    )


def store_views(store: Store, run_id: str, timeline: Timeline | None = None) -> bool:
    """Compute and store the views `store_timeline` stores with a run, for a run imported before they
    existed (`timeline`: the run's, when loaded already). Returns whether the run has any."""
    from .render.timeline_overview import overview_views

    views = overview_views(timeline if timeline is not None else store.load(run_id))
    if views:
        store.put_views(run_id, views)
    return bool(views)


def resolve(ref: str | Path, store: Store | None = None) -> tuple[Timeline, str]:
    """A path (parsed directly) or a run id / id prefix / name in `store`: (timeline, title)."""
    from .errors import BadInput, UnknownRun

    p = Path(ref)
    if p.exists():
        return load(p), str(p)
    if store is None:
        raise BadInput("no such file (and no store to look the name up in)", str(ref))
    try:
        rid = store.resolve(str(ref))
    except UnknownRun:
        raise BadInput("no such file, and no run with this id or name in the store (see `tracelab runs`)", str(ref)) from None
    return store.load(rid), f"run {rid} · {store.get_run(rid).name}"


def analyze(
    timeline: Timeline,
    options: AnalysisOptions | None = None,
    rule_options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    steps: str | None = None,
    window_us: str | None = None,
) -> Analysis:
    """Analyze a timeline and fill in the findings' prose. `steps="A:B"` (step indices, a Python slice)
    or `window_us="START:END"` (µs from the run start) restrict every figure to that range (BadInput
    when the range is bad or empty); without them the figures cover the whole trace."""
    from .analyses.analyze import analyze_scoped
    from .analyses.results import AnalysisOptions
    from .render.findings import with_prose

    return with_prose(analyze_scoped(timeline, options or AnalysisOptions(), rule_options, steps=steps, window_us=window_us))


def scoped_timeline(timeline: Timeline, steps: str | None = None, window_us: str | None = None) -> Timeline:
    """The timeline restricted to `--steps` / `--window` (the whole timeline without them): what reports and
    comparisons draw their timeline figures from, so they cover the same range as the analysis."""
    if steps is None and window_us is None:
        return timeline
    from .analyses.scope import scope_timeline

    return scope_timeline(timeline, steps, window_us)[0]


def to_json(analysis: Analysis) -> dict[str, Any]:
    """The `analyze --json` document (schema 2, DESIGN.md)."""
    from .render.document import to_document

    return to_document(analysis)


def compare(a: Analysis, b: Analysis, timeline_a: Timeline | None = None, timeline_b: Timeline | None = None) -> Comparison:
    """Deltas between two analyses, b - a (per device, gaps by cause, findings, top kernels when the
    timelines are given)."""
    from .analyses.compare import compare as _compare

    return _compare(a, b, timeline_a, timeline_b)


def report(
    out: str | Path,
    analysis: Analysis,
    timeline: Timeline | None = None,
    against: tuple[Analysis, Timeline | None] | None = None,
) -> Path:
    """Write a report of `analysis` to `out` (format from the suffix: .html, .md, .json); `against` adds a
    comparison with a baseline. Returns the path written."""
    from .render.reports import write_report

    return write_report(out, analysis, timeline, against=against)


def sql(
    query: str,
    store: Store,
    runs: tuple[str, ...] | list[str] | None = None,
    *,
    cache: Any = None,
    max_rows: int | None = None,
) -> Any:
    """Run one read-only SELECT over the store's SQL views (tracelab/store/sql.py; DESIGN.md "SQL views"):
    a `SqlResult`. `runs`: run ids / prefixes / names whose event and analysis views are filled (default:
    every run); `cache`: a `ViewCache` kept between queries. BadInput for SQL that fails or would write."""
    from .store.sql import query as run_query

    records = store.runs()
    if runs:
        wanted = list(dict.fromkeys(store.resolve(r) for r in runs))
        records = [r for r in records if r.id in wanted]
    runs_rows = {
        "run_id": [r.id for r in records],
        "name": [r.name for r in records],
        "source": [r.source for r in records],
        "format": [r.format for r in records],
        "backend": [r.backend for r in records],
        "workload": [r.workload for r in records],
        "variant": [r.variant for r in records],
        "gpu": [r.gpu for r in records],
        "created": [r.created for r in records],
        "events": [r.events for r in records],
        "start_ns": [r.start_ns for r in records],
        "end_ns": [r.end_ns for r in records],
        "ranks": [len(r.ranks) for r in records],
    }

    def fill(rid: str, views: frozenset[str]) -> dict[str, Any]:
        from .analyses import sql_rows

        tl = store.load(rid)
        out: dict[str, Any] = {}
        if "events" in views:
            out["events"] = sql_rows.event_rows(rid, tl)
        if "kernels" in views:
            out["kernels"] = sql_rows.kernel_rows(rid, tl)
        if "ranges" in views:
            out["ranges"] = sql_rows.range_rows(rid, tl)
        if "collectives" in views:
            out["collectives"] = sql_rows.collective_rows(rid, tl)
        if views & {"gaps", "steps", "findings"}:
            an = analyze(tl)
            if "gaps" in views:
                from .render.gap_evidence import gap_evidence

                out["gaps"] = sql_rows.gap_rows(rid, an, gap_evidence(an))
            if "steps" in views:
                out["steps"] = sql_rows.step_rows(rid, an)
            if "findings" in views:
                out["findings"] = sql_rows.finding_rows(rid, an)
        return out

    return run_query(query, [(r.id, r.created) for r in records], runs_rows, fill, cache=cache, max_rows=max_rows)


def health(timeline: Timeline, analysis: Analysis | None = None) -> Any:
    """The trace health section (tracelab/analyses/health.py): what the trace can and cannot support."""
    from .analyses.health import trace_health

    return trace_health(timeline, analysis)


def ranges(timeline: Timeline, analysis: Analysis | None = None) -> Any:
    """GPU time by host range (NVTX, record_function, Kineto cpu_op / user_annotation) projected through
    launch correlation (tracelab/analyses/range_projection.py): a `RangeProjection`. Shares are of the
    analysis' total step time when it has steps, else of the GPU span."""
    from .analyses.range_projection import project_ranges

    ref = sum(s.end_ns - s.start_ns for s in analysis.steps) if analysis is not None else 0
    return project_ranges(timeline, ref, "steps" if ref else "gpu span")


def ranges_document(projection: Any, top: int | None = None) -> dict[str, Any]:
    """The `ranges` part of `analyze --json` (every name; `top` keeps the largest only)."""
    from dataclasses import replace

    from .render.report_extras import ranges_doc

    return ranges_doc(projection if top is None else replace(projection, stats=projection.stats[:top]))


def memory(timeline: Timeline, analysis: Analysis | None = None) -> Any:
    """The GPU memory timeline (tracelab/analyses/gpu_memory.py), or None without memory events."""
    from .analyses.gpu_memory import memory_timeline

    return memory_timeline(timeline, analysis)


def document_extras(timeline: Timeline, analysis: Analysis, ranks: Any = None) -> dict[str, Any]:
    """What `analyze --json` (and the MCP server's analyze) adds after the analysis document, for
    `timeline` = the analysed range (`scoped_timeline`): a multi-rank run's `ranks`, `collectives`,
    `stragglers`, … (`ranks` = its `rank_analysis`), the `critical_path` of the steps (issue 24), then
    `health`, `ranges` and `memory` (issue 27; memory null without memory events)."""
    from .analyses.critical_path import critical_path_document, critical_path_for
    from .render.report_extras import extras_doc

    out: dict[str, Any] = {}
    if ranks:
        from .analyses.ranks import rank_document_of

        out.update(rank_document_of(ranks))
    out["critical_path"] = critical_path_document(
        critical_path_for(timeline, analysis, ranks.collectives if ranks else None)
    )
    out.update(extras_doc(timeline, analysis))
    return out
