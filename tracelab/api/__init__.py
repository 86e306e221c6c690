"""The library facade: what the CLI and the dashboard use, and what a Python user imports.

    from tracelab import api
    timeline = api.load("trace.json")               # parse a file (or a run directory)
    ctx = api.AnalysisContext(timeline)              # what the analyses derive from it, kept while you hold it
    analysis = api.analyze(timeline, context=ctx)    # devices, gaps, steps, findings (with prose)
    doc = api.to_json(analysis)                      # the `analyze --json` document (schema 2)
    run = api.import_trace("trace.json", store)      # parse and save into a store (run.run_id)
    rid = api.store_timeline(timeline, store, source_path="x", fingerprint="...")  # a parsed Timeline
    timeline, title = api.resolve("my-run", store)   # a path or a run id / name in the store
    cmp = api.compare(analysis_a, analysis_b)
    api.report("out.html", analysis, timeline)

One-way flow: parsers -> model -> analyses -> render -> (this facade) -> cli/app. The functions live in
small modules (runs, imports, analysis, report, sql, tools); the types they take and return are in
`tracelab.api.types`. Heavy modules are imported inside the functions, so importing this is cheap.
"""

from __future__ import annotations

from .analysis import (
    AnalysisContext,
    analyze,
    check_gap_threshold_us,
    check_scope,
    compare,
    comparison_json,
    critical_path,
    critical_path_categories,
    document_extras,
    find_steps,
    gaps_in_setup,
    gate,
    health,
    kernel_table,
    launch_occupancy,
    memory,
    options,
    range_tree_order,
    ranges,
    ranges_document,
    rank_analysis,
    rank_heatmap,
    rank_wait_matrix,
    run_start,
    scoped_timeline,
    start_extras,
    stream_overlap_matrix,
    to_json,
    warm_up,
)
from .imports import import_path, import_upload
from .report import report, report_parts
from .runs import (
    Imported,
    default_db_path,
    demo_run_paths,
    import_trace,
    load,
    open_store,
    resolve,
    runs_dir,
    store_error,
    store_timeline,
    store_views,
)
from .sql import sql
from .tools import check_workload, default_backend, record_command, record_workload, serve_mcp, workloads

__all__ = [
    "AnalysisContext",
    "Imported",
    "analyze",
    "check_gap_threshold_us",
    "check_scope",
    "check_workload",
    "compare",
    "comparison_json",
    "critical_path",
    "critical_path_categories",
    "default_backend",
    "default_db_path",
    "demo_run_paths",
    "document_extras",
    "find_steps",
    "gaps_in_setup",
    "gate",
    "health",
    "import_path",
    "import_trace",
    "import_upload",
    "kernel_table",
    "launch_occupancy",
    "load",
    "memory",
    "open_store",
    "options",
    "range_tree_order",
    "ranges",
    "ranges_document",
    "rank_analysis",
    "rank_heatmap",
    "rank_wait_matrix",
    "record_command",
    "record_workload",
    "report",
    "report_parts",
    "resolve",
    "run_start",
    "runs_dir",
    "scoped_timeline",
    "serve_mcp",
    "sql",
    "start_extras",
    "store_error",
    "store_timeline",
    "store_views",
    "stream_overlap_matrix",
    "to_json",
    "warm_up",
    "workloads",
]
