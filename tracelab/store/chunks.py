"""Chunked columnar event encoding: a run's events, cut per lane into chunks of consecutive events.

Each chunk holds up to CHUNK_EVENTS events of ONE lane in (start, seq) order, every column stored
frame-of-reference: the chunk's minimum (the base) plus each value's offset from it, in the fewest
bytes (0 = constant over the chunk, 1, 2, 4 or 8) that hold the chunk's range. `end` is stored as the
duration. Blob layout (little-endian):

    codec: u8 (0 raw, 1 zlib of the rest) | bases: int64[ncols] | widths: u8[ncols] | offsets column by column

Encoding is vectorized per column (reduceat over chunk bounds, one narrowing cast per distinct
width); the only Python loops run per chunk x column, never per event.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model.grouping import sorted_unique
from ..model.timeline import DEFAULTS, EVENT_COLUMNS
from ..settings import usable_cores

CHUNK_EVENTS = 4096
CODEC_RAW, CODEC_ZLIB = 0, 1
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def byte_widths(rng: np.ndarray) -> np.ndarray:
    """The fewest bytes (0, 1, 2, 4 or 8) that hold offsets up to each unsigned range."""
    return np.select([rng == 0, rng <= 0xFF, rng <= 0xFFFF, rng <= 0xFFFFFFFF], [0, 1, 2, 4], 8)


@dataclass(frozen=True)
class Chunks:
    """Per-chunk arrays (chunk order = (lane, start)) and the encoded blobs."""

    lane: np.ndarray
    start_min: np.ndarray
    start_max: np.ndarray
    end_max: np.ndarray
    max_dur: np.ndarray
    n: np.ndarray
    kinds: np.ndarray  # bit k set when the chunk holds an event of kind k
    blobs: list[bytes]


PARALLEL_MIN_EVENTS = 200_000  # below this, encoding the columns one after the other is as fast


def encode(
    ev: pd.DataFrame,
    columns: Sequence[str],
    size: int | None = None,
    compress: bool = False,
    workers: int | None = None,
    spare: int = 0,
) -> Chunks:
    """Cut `ev` (Timeline.events) into per-lane chunks of `columns` ("seq" = the row in ev).

    The columns are encoded independently, on `workers` threads (default: up to 4 cores for
    PARALLEL_MIN_EVENTS events or more; numpy releases the GIL while it gathers, reduces and narrows),
    and each chunk's blob is then joined in column order: the bytes do not depend on `workers`.
    `spare`: cores the default leaves to work running beside it (the import's overview thread; with
    both on two cores, one encoder thread beside it took 1.42-1.46 s for the two against 1.51-1.66 s
    with four)."""
    size = size or CHUNK_EVENTS
    n = len(ev)
    lane = ev["lane"].to_numpy()
    start = ev["start"].to_numpy()
    if n and bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(lane, kind="stable")  # a Timeline is sorted by start: stable by lane suffices
    else:
        order = np.lexsort((start, lane))
    lane_s = lane[order]
    # chunk bounds: every `size` events within each lane's run
    runs = np.flatnonzero(np.r_[True, lane_s[1:] != lane_s[:-1]]) if n else np.zeros(0, np.int64)
    run_ends = np.r_[runs[1:], n].astype(np.int64)
    bounds = np.concatenate([np.arange(a, b, size) for a, b in zip(runs.tolist(), run_ends.tolist())] or [[]])
    bounds = bounds.astype(np.int64)
    ends = np.r_[bounds[1:], n].astype(np.int64)
    counts = ends - bounds
    nchunk = len(bounds)
    start_s = start[order]
    end_s = ev["end"].to_numpy()[order]
    ncol = len(columns)
    bases = np.zeros((nchunk, ncol), np.int64)
    widths = np.zeros((nchunk, ncol), np.uint8)
    if nchunk:
        kind_bits = np.left_shift(1, kind_bit(ev["kind"].to_numpy()[order].astype(np.int64)))
        kinds = np.bitwise_or.reduceat(kind_bits, bounds)
        end_max = np.maximum.reduceat(end_s, bounds)
        dur_max = np.maximum.reduceat(end_s - start_s, bounds)
    else:
        kinds = end_max = dur_max = np.zeros(0, np.int64)

    def column(j: int) -> list[bytes | None] | None:
        """Column j's base and width per chunk (into bases / widths) and its payload per chunk."""
        c = columns[j]
        if c == "seq":
            a = order.astype(np.int64, copy=False)
        elif c == "end":
            a = end_s - start_s
        elif c == "start":
            a = start_s
        else:
            col = ev[c].to_numpy()
            lo_v, hi_v = col.min(), col.max()
            if lo_v == hi_v:  # constant over the run: no gather, no payload
                bases[:, j] = int(lo_v)
                return None
            a = col[order]
        # native dtype throughout: offsets wrap modulo 2**bits like the range does, and a width
        # never exceeds the itemsize, so the narrowed low bits are exact
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        mn = np.minimum.reduceat(a, bounds)
        rng = np.maximum.reduceat(a, bounds).view(unsigned) - mn.view(unsigned)
        w = byte_widths(rng)
        bases[:, j] = mn
        widths[:, j] = w
        present = sorted_unique(w[w > 0])
        if not len(present):
            return None
        out: list[bytes | None] = [None] * nchunk
        rel = a.view(unsigned) - np.repeat(mn, counts).view(unsigned)
        for width in present.tolist():
            narrow = rel if rel.dtype.itemsize == width else rel.astype(_UINT[width])
            for i in np.flatnonzero(w == width).tolist():
                out[i] = narrow[bounds[i] : ends[i]].tobytes()
        return out

    if workers is None:
        workers = max(1, min(usable_cores(), 4) - spare) if n >= PARALLEL_MIN_EVENTS else 1
    if not nchunk:
        payloads: list[list[bytes | None] | None] = []
    elif workers > 1:
        with ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="store-encode"
        ) as pool:
            payloads = list(pool.map(column, range(ncol)))
    else:
        payloads = [column(j) for j in range(ncol)]
    codec = bytes([CODEC_ZLIB if compress else CODEC_RAW])
    blobs = []
    live = [p for p in payloads if p is not None]
    for i in range(nchunk):
        pieces = [p[i] for p in live if p[i] is not None]
        for p in live:  # the blob replaces its pieces: peak memory stays one copy
            p[i] = None
        body = b"".join([bases[i].tobytes(), widths[i].tobytes(), *pieces])
        blobs.append(codec + (zlib.compress(body, 1) if compress else body))
    return Chunks(
        lane=lane_s[bounds] if nchunk else np.zeros(0, np.int64),
        start_min=start_s[bounds] if nchunk else np.zeros(0, np.int64),
        start_max=start_s[ends - 1] if nchunk else np.zeros(0, np.int64),
        end_max=end_max,
        max_dur=dur_max,
        n=counts,
        kinds=kinds,
        blobs=blobs,
    )


def kind_bit(kind):
    """The bit of the chunk `kinds` set that stands for an event kind (62 for any kind outside 0..61)."""
    return np.where((kind >= 0) & (kind < 62), kind, 62)


def decode(blob: bytes, n: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """One chunk's columns (EVENT_COLUMNS dtypes; "seq" int64). ValueError / zlib.error if corrupt."""
    dtypes = ["int64" if c in ("seq", "end") else EVENT_COLUMNS.get(c, "int64") for c in columns]
    out = dict(zip(columns, decode_columns(blob, n, dtypes)))
    if "end" in out and "start" in out:
        out["end"] = out["start"] + out["end"]
    return out


def encode_columns(arrays: Sequence[np.ndarray], compress: bool = False) -> bytes:
    """Equal-length integer (or bool) columns as ONE blob of the chunk layout above (each column
    frame-of-reference over all its values): what `Store` keeps a run's per-block SM records in."""
    n = len(arrays[0]) if len(arrays) else 0
    bases, widths, pieces = [], [], []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype == bool:
            a = a.astype(np.uint8)
        if a.dtype.kind not in "iu" or len(a) != n:
            raise ValueError("encode_columns takes equal-length integer columns")
        a = a.astype(np.int64, copy=False)
        lo = int(a.min()) if n else 0
        rel = a.view(np.uint64) - np.uint64(lo & 0xFFFFFFFFFFFFFFFF)  # offsets, wrapping like the range
        width = int(byte_widths(rel.max())) if n else 0
        bases.append(lo)
        widths.append(width)
        if width:
            pieces.append(rel.astype(_UINT[width]).tobytes())
    body = b"".join([np.array(bases, np.int64).tobytes(), np.array(widths, np.uint8).tobytes(), *pieces])
    return bytes([CODEC_ZLIB if compress else CODEC_RAW]) + (zlib.compress(body, 1) if compress else body)


def decode_columns(blob: bytes, n: int, dtypes: Sequence[str]) -> list[np.ndarray]:
    """The columns of a chunk-layout blob of `n` rows, as `dtypes`. ValueError / zlib.error if corrupt."""
    if not blob or blob[0] not in (CODEC_RAW, CODEC_ZLIB):
        raise ValueError("unknown chunk codec")
    body = zlib.decompress(memoryview(blob)[1:]) if blob[0] == CODEC_ZLIB else memoryview(blob)[1:]
    ncol = len(dtypes)
    head = 9 * ncol
    if len(body) < head:
        raise ValueError("chunk header truncated")
    bases = np.frombuffer(body, np.int64, ncol, 0).tolist()
    widths = np.frombuffer(body, np.uint8, ncol, 8 * ncol).tolist()
    if len(body) != head + n * sum(widths) or any(w not in (0, 1, 2, 4, 8) for w in widths):
        raise ValueError(f"chunk holds {len(body)} bytes, not the {head + n * sum(widths)} its header says")
    out: list[np.ndarray] = []
    off = head
    for dtype, base, w in zip(dtypes, bases, widths):
        if w == 0:
            out.append(np.full(n, base, dtype=dtype))
            continue
        v = np.frombuffer(body, _UINT[w], n, off).astype(np.int64)
        off += n * w
        v += base
        out.append(v.astype(dtype, copy=False))
    return out


def complete(cols: dict[str, np.ndarray], n: int, lane: int) -> dict[str, np.ndarray]:
    """EVENT_COLUMNS in order and dtype: the chunk's lane, defaults for columns stored before they existed."""
    out = {}
    for c, dtype in EVENT_COLUMNS.items():
        if c == "lane":
            out[c] = np.full(n, lane, dtype=dtype)
        elif c in cols:
            out[c] = cols[c]
        else:
            out[c] = np.full(n, DEFAULTS[c], dtype=dtype)
    return out
