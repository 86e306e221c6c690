"""Built-in GPU workloads: one small module per workload, each with named variants.

`WORKLOADS` maps a workload's name to its `Workload` (description, effect, variants, parameters).
Importing this package needs no GPU and no torch; running a variant (`runner.py`) needs both.
"""

from __future__ import annotations

from ..errors import BadInput
from . import (
    comm_overlap,
    default_stream,
    fusion,
    graphs,
    green_contexts,
    input_pipeline,
    overlap,
    pdl,
    priorities,
    sync_pitfalls,
)
from .base import Workload

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        overlap.WORKLOAD,
        sync_pitfalls.WORKLOAD,
        pdl.WORKLOAD,
        graphs.WORKLOAD,
        green_contexts.WORKLOAD,
        fusion.WORKLOAD,
        default_stream.WORKLOAD,
        priorities.WORKLOAD,
        comm_overlap.WORKLOAD,
        input_pipeline.WORKLOAD,
    )
}


def get_workload(name: str) -> Workload:
    """The workload called `name` (BadInput naming the known ones otherwise)."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise BadInput(f"unknown workload {name!r} (choose from: {', '.join(WORKLOADS)})") from None


__all__ = ["WORKLOADS", "Workload", "get_workload"]
