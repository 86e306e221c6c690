"""Kineto categories -> event kinds, and the per-kind lookup tables the parser uses (one lookup per
event through `.view(np.uint8)`, never a Python loop)."""

from __future__ import annotations

import numpy as np

from tracelab.model import EventKind, SyncKind

# Kineto category -> event kind (both schemas). Anything else with ph "X" on a host pid is OTHER.
_CAT_KIND: dict[str, int] = {
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "cuda_runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "cpu_op": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "user_annotation": EventKind.NVTX_RANGE,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
}
_LEGACY_CATS = {"Kernel", "Memcpy", "Memset", "Runtime", "Operator"}
_SKIP_CATS = {"Trace"}  # the profiler's own span
_DROP = -1
# CUPTI's own work (CUPTI_ACTIVITY_KIND_OVERHEAD: "Buffer Flush", "Activity Buffer Request", "Lazy Function
# Loading"), written by Kineto as "X" events of category "overhead" on pid -1: kept for the trace health and
# the gap cause `profiler` (meta.extra["health"]["overhead"]), not as events
_OVERHEAD = -2
MAX_OVERHEAD = 100_000
_KIND_OF: dict[str, int] = {
    **{k: int(v) for k, v in _CAT_KIND.items()},
    **{k: _DROP for k in _SKIP_CATS},
    "overhead": _OVERHEAD,
    "": _DROP,
}
# Kineto's own log, written as top-level "WARNING" / "ERROR" arrays by builds without glog (PyTorch's wheels)
# until kineto#1460 (2026-07): "Dropped N activity records", "Exceeded max GPU buffer count (...) - terminating
# tracing", ... (tracelab.analyses.health reads them as dropped-event metadata)
LOG_KEYS = ("WARNING", "ERROR")
MAX_LOG_LINES = 200
_GPU = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_ON_DEVICE = (*_GPU, int(EventKind.SYNC), int(EventKind.GPU_ANNOTATION))
_WITH_CORRELATION = (*_GPU, int(EventKind.SYNC), int(EventKind.RUNTIME), int(EventKind.DRIVER))


def _kind_lut(kinds: tuple[int, ...]) -> np.ndarray:
    """A table over the 256 int8 kind codes (read through `.view(np.uint8)`, so _DROP = -1 is 255):
    np.isin(kind, kinds) as one lookup per event."""
    lut = np.zeros(256, dtype=bool)
    lut[np.array(kinds, dtype=np.int64) & 0xFF] = True
    return lut


_IS_ON_DEVICE = _kind_lut(_ON_DEVICE)
_IS_GPU = _kind_lut(_GPU)
_HAS_ARGS = _kind_lut((*_WITH_CORRELATION, *_ON_DEVICE))
_IS_COPY = _kind_lut((int(EventKind.MEMCPY), int(EventKind.MEMSET)))
_IS_API = _kind_lut((int(EventKind.RUNTIME), int(EventKind.DRIVER)))

_SYNC_NAMES = {
    "stream sync": SyncKind.STREAM,
    "event sync": SyncKind.EVENT,
    "context sync": SyncKind.DEVICE,
    "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}
