"""Pure analyses: Timeline -> frozen results (tracelab.analyses.results)."""

from .analyze import analyze
from .results import Analysis, AnalysisOptions, to_document

__all__ = ["Analysis", "AnalysisOptions", "analyze", "to_document"]
