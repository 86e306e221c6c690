"""Pure analyses: Timeline -> frozen results (tracelab.analyses.results). No prose: tracelab.render
writes the words (finding messages, gap evidence, the JSON document)."""

from .analyze import analyze
from .results import Analysis, AnalysisOptions

__all__ = ["Analysis", "AnalysisOptions", "analyze"]
