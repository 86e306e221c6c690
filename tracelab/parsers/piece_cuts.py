"""Byte-level helpers that cut the traceEvents array into pieces (`kineto_stream`, `early_scan`).

Nothing here imports numpy: the early scanner uses them while the command line is still loading it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MAX_EVENT_BYTES = 64 << 20  # one element of traceEvents larger than this is refused
_WS_RUN = re.compile(rb"[ \t\r\n]*")


def _skip_ws(buf: bytes | bytearray, i: int) -> int:
    """Index of the first non-whitespace byte at or after i (C speed: no Python loop per byte)."""
    m = _WS_RUN.match(buf, i)
    return m.end() if m else i


def candidate_cut(buf: bytes | bytearray, lo: int, tries: int = 64) -> int:
    """Index of the last '}' followed by ',' and then '{' (whitespace allowed): a likely boundary
    between two events; -1 if none. The decoder confirms it."""
    hi = len(buf)
    for _ in range(tries):
        cut = buf.rfind(b"},", lo, hi)
        if cut < 0:
            return -1
        j = _skip_ws(buf, cut + 2)
        if j < len(buf) and buf[j] == 0x7B:
            return cut
        hi = cut + 1
    return -1


def _cut(buf: bytearray, a: int, b: int) -> bytearray:
    """del buf[a:b]; if a view of buf is still alive somewhere (a BufferError), a trimmed copy instead."""
    try:
        del buf[a:b]
        return buf
    except BufferError:
        out = bytearray(buf)
        del out[a:b]
        return out


def _grow(buf: bytearray, data: bytes) -> bytearray:
    """buf += data, or a grown copy when a live view pins buf (see _cut); a block read into an empty
    buf is taken as it is (the reader's bytearrays are the parser's)."""
    if not buf and isinstance(data, bytearray):
        return data
    try:
        buf += data
        return buf
    except BufferError:
        return bytearray(buf) + data


def with_brackets(buf: bytearray, lo: int, hi: int, fn: Callable[[memoryview], T]) -> T:
    """fn(view of buf[lo:hi+1]) with buf[lo] set to '[' and buf[hi] to ']' for the call (the ',' or
    '[' before the first element and the ',' after the last one): a piece decoded in place."""
    keep_lo, keep_hi = buf[lo], buf[hi]
    buf[lo], buf[hi] = 0x5B, 0x5D
    try:
        with memoryview(buf) as mv, mv[lo : hi + 1] as piece:
            return fn(piece)
    finally:
        buf[lo], buf[hi] = keep_lo, keep_hi
