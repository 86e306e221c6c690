"""Trace parsers: everything becomes a `tracelab.model.Timeline`.

`load_trace(path)` picks the parser by content; `trace_fingerprint(path)` is the content hash the store
uses to detect a second import of the same trace. One sub-package per format: `kineto/` (torch.profiler
JSON), `nsys/` (Nsight Systems SQLite exports), `rundir/` (recorded run directories). Parser modules are
imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelab.io.detect import load_trace, trace_fingerprint

__all__ = ["load_trace", "trace_fingerprint"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tracelab.io import detect

        return getattr(detect, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
