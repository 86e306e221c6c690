"""The types the facade's functions take and return, for callers that name them (the dashboard, type
annotations). Importing this loads the store (sqlite-utils, pandas): the command line imports it only
for type checking."""

from __future__ import annotations

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.core.memo import AnalysisContext
from tracelab.analyses.ranks.view import RankAnalysis
from tracelab.analyses.ranks.wait_matrix import WaitMatrix
from tracelab.analyses.results import CAUSES, SCHEMA_VERSION, Analysis, AnalysisOptions, Finding, GapTable

from ..model import EventKind, Timeline
from ..sandbox import Budget, SandboxError
from ..store import RunRecord, Store

__all__ = [
    "CAUSES",
    "SCHEMA_VERSION",
    "Analysis",
    "AnalysisContext",
    "AnalysisOptions",
    "Budget",
    "Comparison",
    "EventKind",
    "Finding",
    "GapTable",
    "RankAnalysis",
    "RunRecord",
    "SandboxError",
    "Store",
    "Timeline",
    "WaitMatrix",
]
