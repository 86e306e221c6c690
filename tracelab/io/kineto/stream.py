"""Stream the `traceEvents` array of a Chrome-trace JSON file (plain or gzip) in chunks.

A Kineto trace is one JSON object whose `traceEvents` value is a long array of small objects. Loading
the whole file makes Python objects for everything at once; instead we read it in blocks, cut the
array at top-level element boundaries and hand each piece (`[` + elements + `]`) to a decoder, so
memory stays bounded by the block size.

Cutting: the fast path takes the last `},` in the buffer as a candidate boundary and lets the decoder
check it: a piece that starts at a true element boundary decodes as a JSON array only if it also ends
at one (a cut inside a string or a nested object leaves the piece unbalanced). When the decoder rejects
the candidate, an exact vectorized scan (numpy: unescaped quotes, brackets outside strings, depth by
cumulative sum) finds the boundary. The same scan locates the `traceEvents` key and the end of the
array, so everything outside the array (deviceProperties, distributedInfo, ...) is parsed on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np

from tracelab.io.kineto.blocks import BLOCK_SIZE, BlockReader, ChunkError, open_blocks

MAX_HEADER = 256 << 20  # a traceEvents key further into the file than this is not a Kineto trace
_KEY = b'"traceEvents"'
_WS = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"

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

_LUT = np.zeros(256, dtype=np.int8)
_LUT[ord("{")] = _LUT[ord("[")] = 1
_LUT[ord("}")] = _LUT[ord("]")] = -1


class PieceRejected(Exception):
    """Raised by a decoder when a candidate piece is not valid JSON (the cut was wrong or the data is bad)."""


def _unescaped_quotes(a: np.ndarray) -> np.ndarray:
    """Positions of the '"' bytes that open or close strings: a quote preceded by an odd run of
    backslashes is escaped. Vectorized over quotes; loops once per backslash of the longest run."""
    q = np.flatnonzero(a == 34)
    if not len(q):
        return q
    prev = a[np.maximum(q - 1, 0)] == 92
    prev[q == 0] = False
    active = np.flatnonzero(prev)
    if not len(active):
        return q
    run = np.zeros(len(q), dtype=np.int64)
    k = 1
    while len(active):
        run[active] += 1
        k += 1
        pos = q[active] - k
        ok = pos >= 0
        active = active[ok]
        active = active[a[pos[ok]] == 92]
    return q[(run & 1) == 0]


def _structure(buf: bytes | bytearray | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a buffer that starts outside any string: positions of the brackets outside strings, the
    bracket codes (+1 open, -1 close) and the depth after each, relative to the buffer start."""
    a = np.frombuffer(buf, dtype=np.uint8)
    q = _unescaped_quotes(a)
    codes = _LUT[a]
    s = np.flatnonzero(codes)
    if len(q):
        s = s[(np.searchsorted(q, s) & 1) == 0]
    c = codes[s]
    return s, c, np.cumsum(c, dtype=np.int64)


class _KeyScanner:
    """Finds the '[' of the top-level `"traceEvents": [` in a growing buffer that starts with '{'.

    Each byte is scanned about once: the scan resumes where the previous one stopped, carrying the
    bracket depth and whether it stopped inside a string (it then resumes at the start of a trailing
    backslash run, or at the opening quote of a string short enough to be a key still being read).
    Keys nested in other values or inside strings, however many, cost one vectorized pass per block."""

    def __init__(self) -> None:
        self.pos = 0  # next byte to scan
        self.depth = 0  # bracket depth at self.pos
        self.in_string = False  # whether self.pos is inside a string

    STEP = 1 << 16  # bytes scanned at least per step

    def find(self, buf: bytearray, final: bool) -> int | None:
        """The index just after the array's '[', or None when more data is needed."""
        while True:
            nxt = buf.find(_KEY, self.pos)
            end = len(buf) if nxt < 0 else min(len(buf), max(nxt + len(_KEY) + 1, self.pos + self.STEP))
            start = self._scan(buf, end, final and end == len(buf))
            if start is not None or end == len(buf):
                return start

    def _scan(self, buf: bytearray, end: int, final: bool) -> int | None:
        region = memoryview(buf)[self.pos : end]
        a = np.frombuffer(region, dtype=np.uint8)
        q = _unescaped_quotes(a)
        parity = 1 if self.in_string else 0
        codes = _LUT[a]
        s = np.flatnonzero(codes)
        if len(q):
            s = s[((np.searchsorted(q, s) + parity) & 1) == 0]
        elif parity:
            s = s[:0]
        depth = np.cumsum(codes[s], dtype=np.int64) + self.depth
        opening = q[parity::2]  # quotes that open strings
        if len(opening):
            hits = np.array([m.start() for m in re.finditer(re.escape(_KEY), region)], dtype=np.int64)
            if len(hits):  # keys are strings: their '"' opens one (opening is sorted)
                at = np.minimum(np.searchsorted(opening, hits), len(opening) - 1)
                hits = hits[opening[at] == hits]
            if len(hits):
                # depth after the last bracket before each key (the carried depth if there is none)
                d = np.concatenate(([self.depth], depth))[np.searchsorted(s, hits)]
                for h in hits[d == 1].tolist():
                    j = _skip_ws(buf, self.pos + h + len(_KEY))
                    if j < len(buf) and buf[j] != ord(":"):
                        continue  # a string value that happens to read "traceEvents"
                    if j < len(buf):
                        j = _skip_ws(buf, j + 1)
                    if j >= len(buf):  # the rest of this key is not read yet: rescan from it
                        if final:
                            _raise_truncated()
                        self.pos, self.depth, self.in_string = self.pos + h, 1, False
                        return None
                    if buf[j] == ord("["):
                        return j + 1
                    raise ChunkError("traceEvents is not an array")
        if final:
            raise ChunkError("no traceEvents array (not a Kineto / Chrome trace)")
        ends_in_string = bool((len(q) + parity) & 1)
        if not ends_in_string:
            self.depth = int(depth[-1]) if len(depth) else self.depth
            self.pos += len(a)
            self.in_string = False
            return None
        last_open = int(opening[-1]) if len(opening) else -1
        if last_open >= 0 and len(a) - last_open <= len(_KEY) + 1:
            k = int(np.searchsorted(s, last_open)) - 1  # may be a key still being read: rescan it
            self.depth = int(depth[k]) if k >= 0 else self.depth
            self.pos += last_open
            self.in_string = False
            return None
        self.depth = int(depth[-1]) if len(depth) else self.depth
        not_bs = np.flatnonzero(a != 92)
        back = len(a) - 1 - int(not_bs[-1]) if len(not_bs) else len(a)
        self.pos += len(a) - (back & 1)  # an odd trailing backslash run escapes the next byte: re-read one
        self.in_string = True
        return None


def _raise_truncated() -> None:
    raise ChunkError("truncated JSON (file ends inside the trace)")


class EventChunks:
    """Iterate `decode(piece)` over pieces of the traceEvents array; afterwards `.metadata_json` holds
    the rest of the top-level object (with `"traceEvents": []`), or None for a bare array file."""

    def __init__(
        self,
        path: str | Path,
        decode: Callable[[memoryview], T],
        block_size: int = BLOCK_SIZE,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.progress = progress
        self.size = self.path.stat().st_size
        self.decode = decode
        self.block_size = block_size
        self.metadata_json: bytes | None = None
        self.bytes_read = 0
        self.comm_args: dict[str, list] | None = None  # NCCL kernels' collective metadata (kineto_comm_args)

    def __iter__(self) -> Iterator[T]:
        reader = open_blocks(self.path, self.block_size)
        try:
            yield from self._chunks(reader)
            self.comm_args = reader.comm_args.result()
        finally:
            reader.close()

    def _advanced(self, n: int, position: int) -> None:
        """n more bytes of the trace read, `position` reached in the file."""
        self.bytes_read += n
        if self.progress is not None:
            self.progress(position, self.size)

    def _more(self, reader: BlockReader) -> bytes:
        data = reader.read()
        self._advanced(len(data), reader.position)
        return data

    def _more_after(self, reader: BlockReader, buf: bytearray, sep: int) -> tuple[bytearray, bool]:
        """(buf[sep:] followed by the next block, whether the file has ended)."""
        out, got = reader.read_after(buf, sep)
        self._advanced(got, reader.position)
        return out, not got

    def _chunks(self, reader: BlockReader) -> Iterator[T]:
        """The whole array: its start found, then `_elements`."""
        buf = bytearray()
        at_file_start = True
        scanner: _KeyScanner | None = None
        header = 0  # bytes read before the traceEvents array (after leading whitespace)
        while True:
            data = self._more(reader)
            eof = not data
            if scanner is None:
                buf = _grow(buf, data)
                if at_file_start and len(buf) >= len(_BOM) or eof:
                    if buf.startswith(_BOM):
                        buf = _cut(buf, 0, len(_BOM))
                    at_file_start = False
                if at_file_start:
                    continue
                lead = _skip_ws(buf, 0)
                if lead:  # leading whitespace, however long, is dropped as it arrives
                    buf = _cut(buf, 0, lead)
                if not buf:
                    if eof:
                        raise ChunkError("empty file (no JSON)")
                    continue
                if buf[0] == ord("["):
                    start = 1
                    break
                if buf[0] != ord("{"):
                    raise ChunkError("not a Kineto trace (expected a JSON object with a traceEvents array)")
                scanner = _KeyScanner()
            else:
                buf = _grow(buf, data)
            header = len(buf)
            start = scanner.find(buf, final=eof)
            if start is not None:
                break
            if header > MAX_HEADER:
                raise ChunkError(f"no traceEvents array in the first {MAX_HEADER >> 20} MB (not a Kineto trace)")
        yield from self._elements(reader, buf, start - 1, eof, bytes(buf[:start]))

    def _elements(self, reader: BlockReader, buf: bytearray, sep: int, eof: bool, prefix: bytes) -> Iterator[T]:
        """The array's elements, from buf[sep + 1] on, in pieces; then the metadata outside the array.
        buf[sep] is a byte before the next element that may be overwritten with '[' (the array's own '['
        or the ',' after the previous element): elements are decoded in place, without copies. `prefix`:
        the file up to the array's '['."""
        bare = prefix == b"["
        fast = True
        while True:
            lead = _skip_ws(buf, sep + 1)
            if lead > sep + 1:  # whitespace between elements, however long, is dropped as it arrives
                buf = _cut(buf, sep + 1, lead)
            if not eof and len(buf) - sep < self.block_size:
                buf, eof = self._more_after(reader, buf, sep)
                sep = 0
                continue
            if not eof and len(buf) - sep > MAX_EVENT_BYTES + self.block_size:
                raise ChunkError(
                    f"an element of traceEvents is larger than {MAX_EVENT_BYTES >> 20} MB (refused)"
                )
            if fast and (not eof or len(buf) - sep > (1 << 20)):
                cut = candidate_cut(buf, sep + 1)
                if cut > sep:
                    try:
                        result = self._decode_range(buf, sep, cut + 1)
                    except PieceRejected:
                        pass
                    else:
                        yield result
                        sep = cut + 1
                        continue
            if eof:
                end = sep + 1 + self._array_end(memoryview(buf)[sep + 1 :])
                if buf[sep + 1 : end].strip(_WS):
                    yield self._decode_exact(buf, sep, end)
                self.metadata_json = None if bare else prefix + b"]" + bytes(buf[end + 1 :])
                return
            rel, closes = self._exact_cut(memoryview(buf)[sep + 1 :])
            if rel is None:  # no element ends in this buffer before the array closes (or at all)
                fast = fast and not closes
                while not eof:  # read on: to the end of the file when the array closes here
                    data = self._more(reader)
                    eof = not data
                    buf = _grow(buf, data)
                    if not closes:
                        break
                continue
            cut = sep + 1 + rel
            j = _skip_ws(buf, cut + 1)
            while j >= len(buf) and not eof:  # the ',' after this element is still unread
                buf = _cut(buf, cut + 1, j)  # whitespace already seen
                data = self._more(reader)
                eof = not data
                buf = _grow(buf, data)
                j = _skip_ws(buf, cut + 1)
            if j < len(buf) and buf[j] == ord("]"):  # that was the last event: finish at the end of file
                fast = False
                while not eof:
                    data = self._more(reader)
                    eof = not data
                    buf = _grow(buf, data)
                continue
            if j >= len(buf) or buf[j] != ord(","):
                raise ChunkError("corrupt JSON in traceEvents (expected ',' between events)")
            yield self._decode_exact(buf, sep, cut + 1)
            sep = j

    def _decode_range(self, buf: bytearray, lo: int, hi: int) -> T:
        """decode(buf[lo:hi+1]) with buf[lo] set to '[' and buf[hi] to ']' for the call."""
        return with_brackets(buf, lo, hi, self.decode)

    def _decode_exact(self, buf: bytearray, lo: int, hi: int) -> T:
        try:
            return self._decode_range(buf, lo, hi)
        except PieceRejected as exc:
            raise ChunkError(f"corrupt JSON in traceEvents ({exc})") from None

    @staticmethod
    def _exact_cut(rest: memoryview) -> tuple[int | None, bool]:
        """(index of the last '}' that closes a top-level element, whether the array closes in `rest`).
        The index is None when no element ends in `rest` or when the array closes there (the end-of-file
        path then takes the last elements and the array end together)."""
        s, c, depth = _structure(rest)
        closed = bool((depth < 0).any())
        if closed:
            return None, True
        ends = np.flatnonzero((depth == 0) & (c < 0))
        return (int(s[ends[-1]]) if len(ends) else None), False

    @staticmethod
    def _array_end(rest: bytes) -> int:
        s, _c, depth = _structure(rest)
        closed = np.flatnonzero(depth < 0)
        if not len(closed):
            raise ChunkError("truncated JSON (the traceEvents array is not closed)")
        return int(s[closed[0]])
