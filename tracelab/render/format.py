"""The run origin: every renderer writes points in time as offsets from ONE origin, the run start (the
first event of any kind, what the store records as the run's `start_ns`). The numbers themselves are
formatted by `tracelab.text_format`, the one formatter (below the analyses, so rules use it too)."""

from __future__ import annotations

from typing import Any

__all__ = ["run_origin"]


def run_origin(analysis: Any) -> int:
    """The run start of an `Analysis` (its `trace.start_ns`: the first event of any kind), falling back
    to the first GPU activity of its devices, then 0. Every renderer writes times as offsets from it."""
    start = getattr(getattr(analysis, "trace", None), "start_ns", None)
    if start is not None:
        return int(start)
    starts = [int(d.start_ns) for d in getattr(analysis, "devices", ())]
    return min(starts) if starts else 0
