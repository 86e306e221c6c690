"""Pure analyses: Timeline -> frozen results (tracelab.analyses.results). No prose: tracelab.render
writes the words (finding messages, gap evidence, the JSON document).

`analyze`, `Analysis` and `AnalysisOptions` are imported on first use, so importing the
result types (`tracelab.analyses.results`) does not load every analysis (and pandas with them). As
before, `tracelab.analyses.analyze` names the function, not its module (which stays importable as
`from tracelab.analyses.analyze import ...`)."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analyze import analyze
    from .results import Analysis, AnalysisOptions

__all__ = ["Analysis", "AnalysisOptions", "analyze"]


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from .analyze import analyze as fn

        return fn
    if name in ("Analysis", "AnalysisOptions"):
        from . import results

        return getattr(results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # importing the submodule `analyze` must not hide the function of the same name
        if name == "analyze" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
