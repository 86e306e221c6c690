"""Decode the chunks of one big Kineto trace in parallel processes; the same Timeline as `load_kineto`.

The serial parser reads the file (decompressing on a second thread), cuts the `traceEvents` array at
element boundaries (`kineto_stream.EventChunks`) and decodes each piece into column arrays
(`kineto._Parsed`). Here the main process still reads and cuts, but each piece goes to a worker
process (forked before the reader thread starts, so nothing is imported again) that decodes it with
its own string table; the main process then interns each piece's strings in piece order and remaps
its name / category ids. Because the serial parser interns in first-seen order per piece (names, then
categories) and the pieces are the same, the ids, columns and Timeline are identical, byte for byte
(tests/test_kineto_parallel.py).

The serial cutter checks a fast candidate cut by decoding it and falls back to an exact scan when
the decoder rejects it. Here the decode happens later in a worker, so a candidate is accepted
speculatively; if any worker rejects its piece (a cut inside a string, or corrupt JSON), or anything
else goes wrong, the whole file is parsed again serially, which gives the serial result or the serial
error message. At most 2 × workers pieces are in flight, so memory stays bounded by the chunk size.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tracelab.model import Timeline
from tracelab.settings import usable_cores

from .kineto_stream import BLOCK_SIZE, ChunkError, EventChunks, PieceRejected

# the rest of `kineto._Parsed`'s attributes is per-file state (counters, flags, first examples)
# (private attributes, the leading "_" ones, are the parser's machinery, never state to merge)
_NOT_STATE = ("ids", "strings", "parts", "columns", "input_bytes", "comm_args")

# where the time of the last parallel load went (seconds), for benchmarks/bench_decode.py's model:
# read_cut = main process reading, decompressing and cutting (minus waiting for workers); wait = main
# process waiting for workers; decode = sum of the workers' decode times; merge = interning the pieces'
# strings and building the Timeline after the last piece
last_stats: dict[str, Any] = {}


def _decode_piece(piece: bytes) -> tuple[Any, ...]:
    """Worker: one piece (`[` + events + `]`) -> its column parts, local strings, the parser's other
    state (counters, first examples, flags) and the seconds it took."""
    from .kineto import _Parsed

    t0 = time.perf_counter()
    parsed = _Parsed()
    parsed.add_chunk(memoryview(piece))
    state = {k: v for k, v in vars(parsed).items() if k not in _NOT_STATE and not k.startswith("_")}
    return parsed.parts, parsed.strings, state, time.perf_counter() - t0


def _merge_state(parsed: Any, state: dict[str, Any]) -> None:
    """Fold one piece's parser state into `parsed` the way the serial parser accumulates it: counts
    add up, flags OR, a first example (a string) is kept from the first piece that has one, and lists of
    collected rows are concatenated."""
    for k, v in state.items():
        old = getattr(parsed, k)
        if isinstance(v, bool):
            setattr(parsed, k, old or v)
        elif isinstance(v, int):
            setattr(parsed, k, old + v)
        elif isinstance(v, str):
            setattr(parsed, k, old or v)
        elif isinstance(v, list):  # collected rows (the "overhead" events): concatenated
            setattr(parsed, k, old + v)
        else:  # a kind of state this merge does not know: let the serial parser do it
            raise TypeError(f"cannot merge parser state {k!r} of type {type(v).__name__}")


def load_kineto_parallel(
    path: str | Path,
    rank: int | None = None,
    *,
    workers: int | None = None,
    block_size: int = BLOCK_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> Timeline:
    """`load_kineto`, with the pieces decoded by `workers` processes (default: the usable cores)."""
    from . import kineto

    path = Path(path)
    workers = workers or usable_cores()
    if workers < 2 or not path.is_file() or "fork" not in multiprocessing.get_all_start_methods():
        return kineto.load_kineto(path, rank, progress=progress)
    try:
        results, meta_obj = _decode_all(path, workers, block_size, progress)
    except (ChunkError, PieceRejected, OSError, RuntimeError, ValueError, EOFError) as exc:
        # a rejected speculative cut, corrupt JSON, a lost worker: the serial parser decides
        last_stats.clear()
        last_stats["fallback"] = type(exc).__name__
        return kineto.load_kineto(path, rank, progress=progress)
    t_merge = time.perf_counter()
    parsed = kineto._Parsed()
    try:
        for parts, strings, state, _seconds in results:
            remap = np.append(parsed.intern(strings), np.int32(-1))
            for part in parts:
                for c in ("name", "category"):
                    ids = part[c]
                    part[c] = remap[np.where(ids < 0, len(strings), ids)]
                parsed.parts.append(part)
            _merge_state(parsed, state)
    except TypeError as exc:
        last_stats.clear()
        last_stats["fallback"] = str(exc)
        return kineto.load_kineto(path, rank, progress=progress)
    parsed.comm_args = meta_obj.pop("_tracelab_comm_args", None)
    timeline = parsed.finish(path, meta_obj, rank)
    last_stats["merge"] = time.perf_counter() - t_merge
    return timeline


def _decode_all(
    path: Path, workers: int, block_size: int, progress: Callable[[int, int], None] | None
) -> tuple[list[Any], dict]:
    from . import kineto

    ctx = multiprocessing.get_context("fork")
    results: list[Any] = []
    waited = 0.0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        pool.submit(int).result()  # fork every worker now, before EventChunks starts its reader thread
        t_start = time.perf_counter()
        pending: deque[Future] = deque()

        def submit(piece: memoryview) -> int:
            nonlocal waited
            pending.append(pool.submit(_decode_piece, bytes(piece)))
            while len(pending) > 2 * workers:  # bounded memory: wait for the oldest piece
                t = time.perf_counter()
                results.append(pending.popleft().result())
                waited += time.perf_counter() - t
            return 0

        chunks = EventChunks(path, submit, block_size=block_size, progress=progress)
        for _ in chunks:
            pass
        meta_obj = kineto._load_metadata(chunks.metadata_json)
        if chunks.comm_args:
            meta_obj = {**meta_obj, "_tracelab_comm_args": chunks.comm_args}
        t = time.perf_counter()
        results.extend(f.result() for f in pending)
        waited += time.perf_counter() - t
        read_cut = time.perf_counter() - t_start - waited
    last_stats.clear()
    last_stats.update(
        fallback="",
        start=t_start - t0,
        read_cut=read_cut,
        wait=waited,
        decode=sum(r[-1] for r in results),
        pieces=len(results),
    )
    return results, meta_obj
