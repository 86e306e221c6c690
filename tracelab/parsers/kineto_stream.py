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

import gzip
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np

BLOCK_SIZE = 4 << 20
MAX_HEADER = 256 << 20  # a traceEvents key further into the file than this is not a Kineto trace
_KEY = b'"traceEvents"'
_WS = b" \t\r\n"

T = TypeVar("T")

_LUT = np.zeros(256, dtype=np.int8)
_LUT[ord("{")] = _LUT[ord("[")] = 1
_LUT[ord("}")] = _LUT[ord("]")] = -1


class ChunkError(Exception):
    """The bytes are not a usable Chrome trace; the message is one line, without the file name."""


class PieceRejected(Exception):
    """Raised by a decoder when a candidate piece is not valid JSON (the cut was wrong or the data is bad)."""


def is_gzip(head: bytes) -> bool:
    return head[:2] == b"\x1f\x8b"


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


def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _find_array_start(head: bytes, final: bool) -> int | None:
    """Index just after the '[' that opens the top-level traceEvents array (or a bare top-level
    array); None if more data is needed."""
    i = _skip_ws(head, 3 if head[:3] == b"\xef\xbb\xbf" else 0)
    if i >= len(head):
        if final:
            raise ChunkError("empty file (no JSON)")
        return None
    first = head[i]
    if first == ord("["):
        return i + 1
    if first != ord("{"):
        raise ChunkError("not a Kineto trace (expected a JSON object with a traceEvents array)")
    pos = head.find(_KEY, i)
    while pos >= 0:
        _s, _c, depth = _structure(memoryview(head)[i:pos])
        d = int(depth[-1]) if len(depth) else 0
        # a key of the top-level object: depth 1 and outside strings (quote parity before it even)
        a = np.frombuffer(memoryview(head)[i:pos], dtype=np.uint8)
        in_string = _inside_string(a)
        if d == 1 and not in_string:
            j = _skip_ws(head, pos + len(_KEY))
            if j >= len(head):
                return None if not final else _raise_truncated()
            if head[j] == ord(":"):
                j = _skip_ws(head, j + 1)
                if j >= len(head):
                    return None if not final else _raise_truncated()
                if head[j] == ord("["):
                    return j + 1
                raise ChunkError("traceEvents is not an array")
        pos = head.find(_KEY, pos + 1)
    if final:
        raise ChunkError("no traceEvents array (not a Kineto / Chrome trace)")
    return None


def _candidate_cut(buf: bytearray, lo: int, tries: int = 64) -> int:
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


def _raise_truncated() -> None:
    raise ChunkError("truncated JSON (file ends inside the trace)")


def _inside_string(a: np.ndarray) -> bool:
    return bool(len(_unescaped_quotes(a)) & 1)


class _Reader:
    """Reads a file in blocks on a background thread (gzip inflation and file reads release the GIL,
    so they overlap with decoding on another core)."""

    def __init__(self, path: Path, block: int) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=2)
        self._stop = False
        self.position = 0
        self._thread = threading.Thread(target=self._run, args=(path, block), daemon=True)
        self._thread.start()

    def _run(self, path: Path, block: int) -> None:
        try:
            with open(path, "rb") as raw:
                magic = raw.read(2)
                raw.seek(0)
                f = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(magic) else raw
                while not self._stop:
                    data = f.read(block)
                    self._q.put((data, raw.tell()))
                    if not data:
                        return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, which re-raises it
            self._q.put(exc)

    def read(self) -> bytes:
        item = self._q.get()
        if isinstance(item, BaseException):
            msg = str(item).splitlines()[0] if str(item) else type(item).__name__
            if isinstance(item, EOFError):
                raise ChunkError("truncated gzip stream")
            if isinstance(item, (gzip.BadGzipFile, zlib.error)):
                raise ChunkError(f"corrupt gzip data ({msg})")
            if isinstance(item, OSError):
                raise ChunkError(f"cannot read ({msg})")
            raise item
        data, self.position = item
        return data

    def close(self) -> None:
        self._stop = True
        while self._thread.is_alive():
            try:
                self._q.get_nowait()
            except queue.Empty:
                self._thread.join(0.01)


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

    def __iter__(self) -> Iterator[T]:
        reader = _Reader(self.path, self.block_size)
        try:
            yield from self._chunks(reader)
        finally:
            reader.close()

    def _more(self, reader: _Reader) -> bytes:
        data = reader.read()
        self.bytes_read += len(data)
        if self.progress is not None:
            self.progress(reader.position, self.size)
        return data

    def _chunks(self, reader: _Reader) -> Iterator[T]:
        buf = bytearray()
        eof = False
        searched = 0
        while True:
            data = self._more(reader)
            eof = not data
            buf += data
            first = buf[:64].lstrip(b"\xef\xbb\xbf" + _WS)[:1]
            if not eof and first == b"{" and buf.find(_KEY, max(0, searched - len(_KEY))) < 0:
                searched = len(buf)  # no key yet: read on without rescanning what was searched
                if searched > MAX_HEADER:
                    raise ChunkError(
                        f"no traceEvents array in the first {MAX_HEADER >> 20} MB (not a Kineto trace)"
                    )
                continue
            start = _find_array_start(buf, final=eof)
            if start is not None:
                break
        prefix = bytes(buf[:start])
        bare = prefix.lstrip(b"\xef\xbb\xbf" + _WS) == b"["
        # buf[sep] is a byte before the next element that may be overwritten with '[' (the array's own
        # '[' or the ',' after the previous element); elements are decoded in place, without copies
        sep = start - 1
        fast = True
        while True:
            if not eof and len(buf) - sep < self.block_size:
                if sep > 0:
                    del buf[:sep]
                    sep = 0
                data = self._more(reader)
                eof = not data
                buf += data
                continue
            if fast and (not eof or len(buf) - sep > (1 << 20)):
                cut = _candidate_cut(buf, sep + 1)
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
                    buf += data
                    if not closes:
                        break
                continue
            cut = sep + 1 + rel
            j = _skip_ws(buf, cut + 1)
            while j >= len(buf) and not eof:  # the ',' after this element is still unread
                data = self._more(reader)
                eof = not data
                buf += data
                j = _skip_ws(buf, cut + 1)
            if j < len(buf) and buf[j] == ord("]"):  # that was the last event: finish at the end of file
                fast = False
                while not eof:
                    data = self._more(reader)
                    eof = not data
                    buf += data
                continue
            if j >= len(buf) or buf[j] != ord(","):
                raise ChunkError("corrupt JSON in traceEvents (expected ',' between events)")
            yield self._decode_exact(buf, sep, cut + 1)
            sep = j

    def _decode_range(self, buf: bytearray, lo: int, hi: int) -> T:
        """decode(buf[lo:hi+1]) with buf[lo] set to '[' and buf[hi] to ']' for the call."""
        keep_lo, keep_hi = buf[lo], buf[hi]
        buf[lo], buf[hi] = 0x5B, 0x5D
        try:
            with memoryview(buf) as mv, mv[lo : hi + 1] as piece:
                return self.decode(piece)
        finally:
            buf[lo], buf[hi] = keep_lo, keep_hi

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
