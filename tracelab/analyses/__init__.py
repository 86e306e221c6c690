"""Pure analyses: Timeline -> frozen results (tracelab.analyses.results). No prose: tracelab.render
writes the words (finding messages, gap evidence, the JSON document).

Sub-packages follow the questions asked: `core` (shared machinery), `device` (one GPU), `gaps` (idle and
its causes), `steps`, `ranks` (several ranks and collectives), `sm` (per-SM lanes) and `rules` (one
module per finding). `pipeline.analyze` runs them all into one `Analysis`.

`analyze`, `Analysis` and `AnalysisOptions` are imported on first use, so importing the result types
(`tracelab.analyses.results`) does not load every analysis (and pandas with them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelab.analyses.pipeline import analyze
    from tracelab.analyses.results import Analysis, AnalysisOptions

__all__ = ["Analysis", "AnalysisOptions", "analyze"]


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from tracelab.analyses.pipeline import analyze as fn

        return fn
    if name in ("Analysis", "AnalysisOptions"):
        from tracelab.analyses import results

        return getattr(results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
