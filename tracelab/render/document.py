"""The `analyze --json` document (schema 2, docs/DESIGN.md): the analysis' numbers
(tracelab.analyses.results.document) with each gap's evidence in words (tracelab.render.gap_evidence)."""

from __future__ import annotations

from typing import Any

from ..analyses.results import Analysis, document
from .gap_evidence import gap_evidence

__all__ = ["to_document"]


def to_document(analysis: Analysis) -> dict[str, Any]:
    """The `analyze --json` document of `analysis` (every gap's evidence text included)."""
    return document(analysis, gap_evidence(analysis))
