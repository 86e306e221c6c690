"""Pure analyses: Timeline -> frozen results (tracelab.analyses.results)."""

from .analyze import analyze
from .results import Analysis, AnalysisOptions, to_document

__all__ = ["analyze", "Analysis", "AnalysisOptions", "to_document"]
