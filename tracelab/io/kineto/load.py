"""Kineto (PyTorch profiler) Chrome-trace JSON -> Timeline.

Both schemas are read: the current one (cats `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`,
`cuda_driver`, `cuda_sync`, `cpu_op`, `user_annotation`, `gpu_user_annotation`, `deviceProperties`,
`distributedInfo`, fractional-µs timestamps) and the 2021 one (`Kernel`, `Memcpy`, `Memset`, `Runtime`,
`Operator`, tid "stream 7", `computeProperties`, lowercase 'external id'); AMD/HIP traces use the same
cats with hip* API names.

How: the traceEvents array is streamed in chunks (`kineto_stream`). Each chunk goes through the C
scanner (`_kineto_scan.c`, built by setup.py when a compiler is there), which writes the fields we use
straight into column buffers, with the chunk's distinct strings in a small table; a chunk it declines
(anything outside strictly valid JSON of the expected types) is decoded by msgspec into small typed
structs instead, the reference path (`kineto_rows` gives both one interface). Names are interned per
distinct value; device limits and copy kinds come from `kineto_devices`. Times become integer ns on the trace's own clock: round(ts_µs * 1000).

What is kept: complete ("X") events. Flows (ac2g), instants ([memory]), counters and metadata rows are
counted in meta.stats but not kept. python_function and unknown cats become OTHER host events;
user_annotation -> NVTX_RANGE; gpu_user_annotation -> GPU_ANNOTATION on its stream.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np
import orjson

from tracelab.errors import TraceFormatError
from tracelab.io.kineto.blocks import is_compressed
from tracelab.io.kineto.pieces import _Parsed
from tracelab.io.kineto.stream import BLOCK_SIZE, ChunkError, EventChunks
from tracelab.model import Timeline

__all__ = ["_Parsed", "load_kineto", "relabel_rank"]


def load_kineto(
    path: str | Path, rank: int | None = None, *, progress: Callable[[int, int], None] | None = None
) -> Timeline:
    """Parse a Kineto trace (`.json` / `.json.gz`). `rank` overrides the rank of distributedInfo;
    `progress(done_bytes, total_bytes)` is called as the file is read.

    Raises TraceFormatError (one line naming the file) for anything that is not a usable Kineto trace.
    The file is opened read-only."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError("no such file", path)
    with open(path, "rb") as f:
        plain = not is_compressed(f.read(4))  # the inflated size of gzip / zstd is unknown
    parsed = _Parsed(pipeline=True, input_bytes=path.stat().st_size if plain else 0)
    chunks = EventChunks(path, parsed.add_chunk, block_size=BLOCK_SIZE, progress=progress)
    try:
        for _ in chunks:
            pass
        meta_obj = _load_metadata(chunks.metadata_json)
        parsed.comm_args = chunks.comm_args
        return parsed.finish(path, meta_obj, rank)
    except ChunkError as exc:
        raise TraceFormatError(_explain(path, str(exc)), path) from None
    finally:
        parsed.close()


def relabel_rank(tl: Timeline, rank: int) -> Timeline:
    """The same timeline with every event, lane and device moved to `rank`."""
    cols = dict(tl.cols, rank=np.full(tl.n_events, rank, dtype=np.int32))
    lanes = dict(tl.lane_cols, rank=np.full(tl.n_lanes, rank, dtype=np.int32))
    devices = tuple(msgspec.structs.replace(d, rank=rank) for d in tl.devices)
    contexts = tuple(msgspec.structs.replace(c, rank=rank) for c in tl.contexts)
    return dataclasses.replace(
        tl, cols=cols, lane_cols=lanes, devices=devices, contexts=contexts, meta=msgspec.structs.replace(tl.meta, ranks=(rank,))
    )


# ---------------------------------------------------------------------------------------------------


def _explain(path: Path, reason: str) -> str:
    if reason.startswith("no traceEvents") and _looks_like_execution_trace(path):
        return (
            "is a PyTorch execution trace (nodes/schema), not a Kineto trace: record it with torch.profiler"
        )
    return reason


def _looks_like_execution_trace(path: Path) -> bool:
    try:
        import gzip

        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            start = f.read(4096)
        return b'"nodes"' in start and b'"schema"' in start
    except (OSError, EOFError, zlib.error):
        return False


def _load_metadata(raw: bytes | None) -> dict:
    if raw is None:
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "UTF-8" in str(exc):
            raise ChunkError("invalid UTF-8 outside traceEvents") from None
        raise ChunkError(f"corrupt JSON outside traceEvents ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise ChunkError("JSON outside traceEvents is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ChunkError("top-level JSON value is not an object")
    return obj
