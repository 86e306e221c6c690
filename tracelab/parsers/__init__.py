"""Trace parsers: everything becomes a `tracelab.model.Timeline`.

`load_trace(path)` picks the parser by content; `trace_fingerprint(path)` is the content hash the store
uses to detect a second import of the same trace. Parser modules are imported lazily.
"""

from .detect import load_trace, trace_fingerprint

__all__ = ["load_trace", "trace_fingerprint"]
