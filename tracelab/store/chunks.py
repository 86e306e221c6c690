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

import msgspec
import numpy as np
import pandas as pd

from ..model.grouping import sorted_unique, stable_order
from ..model.timeline import DEFAULTS, EVENT_COLUMNS
from ..settings import usable_cores

CHUNK_EVENTS = 4096
CODEC_RAW, CODEC_ZLIB = 0, 1
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def byte_widths(rng: np.ndarray) -> np.ndarray:
    """The fewest bytes (0, 1, 2, 4 or 8) that hold offsets up to each unsigned range."""
    return np.select([rng == 0, rng <= 0xFF, rng <= 0xFFFF, rng <= 0xFFFFFFFF], [0, 1, 2, 4], 8)


class Chunks(msgspec.Struct, frozen=True):
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


class _Cut(msgspec.Struct, frozen=True):
    """Where the chunks of a run lie: its events in chunk order (`order`: rows of ev), their lane, start
    and end in that order, and each chunk's first row, end row and count in it."""

    order: np.ndarray
    lane: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bounds: np.ndarray
    ends: np.ndarray
    counts: np.ndarray


def _cut(ev: pd.DataFrame, size: int) -> _Cut:
    """Sort the events by (lane, start) and cut each lane's run every `size` events."""
    n = len(ev)
    lane = ev["lane"].to_numpy()
    start = ev["start"].to_numpy()
    if n and bool(np.all(start[1:] >= start[:-1])):
        order = stable_order(lane)  # a Timeline is sorted by start: stable by lane suffices
    else:
        order = np.lexsort((start, lane))
    lane_s = lane[order]
    # chunk bounds: every `size` events within each lane's run
    runs = np.flatnonzero(np.r_[True, lane_s[1:] != lane_s[:-1]]) if n else np.zeros(0, np.int64)
    run_ends = np.r_[runs[1:], n].astype(np.int64)
    bounds = np.concatenate([np.arange(a, b, size) for a, b in zip(runs.tolist(), run_ends.tolist())] or [[]])
    bounds = bounds.astype(np.int64)
    ends = np.r_[bounds[1:], n].astype(np.int64)
    return _Cut(order, lane_s, start[order], ev["end"].to_numpy()[order], bounds, ends, ends - bounds)


def _encode_column(
    ev: pd.DataFrame, c: str, cut: _Cut
) -> tuple[int | np.ndarray, np.ndarray | None, list[bytes | None] | None]:
    """Column `c` frame-of-reference per chunk: its base per chunk (one int when it is constant over the
    run), its width per chunk (None: 0 everywhere) and its payload per chunk (None: no payload at all)."""
    if c == "seq":
        a = cut.order.astype(np.int64, copy=False)
    elif c == "end":
        a = cut.end - cut.start
    elif c == "start":
        a = cut.start
    else:
        col = ev[c].to_numpy()
        lo_v, hi_v = col.min(), col.max()
        if lo_v == hi_v:  # constant over the run: no gather, no payload
            return int(lo_v), None, None
        a = col[cut.order]
    # native dtype throughout: offsets wrap modulo 2**bits like the range does, and a width
    # never exceeds the itemsize, so the narrowed low bits are exact
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    mn = np.minimum.reduceat(a, cut.bounds)
    rng = np.maximum.reduceat(a, cut.bounds).view(unsigned) - mn.view(unsigned)
    w = byte_widths(rng)
    present = sorted_unique(w[w > 0])
    if not len(present):
        return mn, w, None
    out: list[bytes | None] = [None] * len(cut.bounds)
    # chunk by chunk into one chunk-sized buffer: the offsets of the whole column (np.repeat of the
    # bases, a subtraction, a narrowing copy) cost 10x more on 4.5M events
    values, bases = a.view(unsigned), mn.view(unsigned)
    scratch = np.empty(int(cut.counts.max()), dtype=unsigned)
    bounds, ends, widths = cut.bounds.tolist(), cut.ends.tolist(), w.tolist()
    for i in np.flatnonzero(w).tolist():
        rel = scratch[: ends[i] - bounds[i]]
        np.subtract(values[bounds[i] : ends[i]], bases[i], out=rel)
        width = widths[i]
        out[i] = (rel if width == rel.itemsize else rel.astype(_UINT[width])).tobytes()
    return mn, w, out


def _join_blobs(
    payloads: list[list[bytes | None] | None], bases: np.ndarray, widths: np.ndarray, compress: bool
) -> list[bytes]:
    """Each chunk's blob: codec, bases, widths, then its payload column by column."""
    codec = bytes([CODEC_ZLIB if compress else CODEC_RAW])
    blobs = []
    live = [p for p in payloads if p is not None]
    for i in range(len(bases)):
        pieces = [p[i] for p in live if p[i] is not None]
        for p in live:  # the blob replaces its pieces: peak memory stays one copy
            p[i] = None
        body = b"".join([bases[i].tobytes(), widths[i].tobytes(), *pieces])
        blobs.append(codec + (zlib.compress(body, 1) if compress else body))
    return blobs


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
    n = len(ev)
    cut = _cut(ev, size or CHUNK_EVENTS)
    bounds = cut.bounds
    nchunk = len(bounds)
    bases = np.zeros((nchunk, len(columns)), np.int64)
    widths = np.zeros((nchunk, len(columns)), np.uint8)
    if not nchunk:
        z = np.zeros(0, np.int64)
        return Chunks(lane=z, start_min=z, start_max=z, end_max=z, max_dur=z, n=cut.counts, kinds=z, blobs=[])
    if workers is None:
        workers = max(1, min(usable_cores(), 4) - spare) if n >= PARALLEL_MIN_EVENTS else 1
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="store-encode") as pool:
            encoded = list(pool.map(lambda c: _encode_column(ev, c, cut), columns))
    else:
        encoded = [_encode_column(ev, c, cut) for c in columns]
    for j, (base, width, _) in enumerate(encoded):
        bases[:, j] = base
        if width is not None:
            widths[:, j] = width
    kind_bits = _kind_bits(ev["kind"].to_numpy(), cut.order)
    return Chunks(
        lane=cut.lane[bounds],
        start_min=cut.start[bounds],
        start_max=cut.start[cut.ends - 1],
        end_max=np.maximum.reduceat(cut.end, bounds),
        max_dur=np.maximum.reduceat(cut.end - cut.start, bounds),
        n=cut.counts,
        kinds=np.bitwise_or.reduceat(kind_bits, bounds),
        blobs=_join_blobs([p for _, _, p in encoded], bases, widths, compress),
    )


_KIND_BITS = np.left_shift(1, np.minimum(np.arange(256, dtype=np.int64), 62))  # per byte value of an int8 kind


def _kind_bits(kind: np.ndarray, order: np.ndarray) -> np.ndarray:
    """1 << kind_bit(kind) of each event in `order`: for the int8 kind column one lookup in a 256-entry table
    (a byte read as unsigned is 128..255 when negative: bit 62 too), not four passes over int64 copies."""
    if kind.dtype == np.int8:
        return _KIND_BITS[kind.view(np.uint8)[order]]
    return np.left_shift(1, kind_bit(kind[order].astype(np.int64)))


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
