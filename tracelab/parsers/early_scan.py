"""Cut and scan the first pieces of a Kineto trace while the command line is still importing numpy.

`tracelab analyze TRACE` spends its first ~60 ms importing numpy and the parser. `start(path)` reads
the trace meanwhile and also cuts its traceEvents array into pieces and runs the C scanner over them,
on a thread of its own: nothing here needs numpy (the scanner's columns are plain buffers; cuts are
byte searches). It does only the common case, as the parser would do it: a top-level object whose
traceEvents array the C scanner's `array_start` finds in the first MiB, then pieces of at least a
block cut at the last `},{` and accepted by the scanner. At the first thing it does not handle (a
declined piece, the end of the file, a read error) or when the parser arrives
(`take`), it stops where it is. The parser (`kineto.load_kineto` through `EventChunks`) takes the
scanned pieces in file order, then goes on from the same place in the file as if it had cut and
scanned them itself: the Timeline is the one the parser gives alone (tests/test_early_scan.py).

At most AHEAD pieces wait for the parser (their columns: ~40 MB for 4 MB pieces). A scan that no
parser takes (the file was not a Kineto trace, or the command failed first) is stopped by `discard()`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .block_reader import BLOCK_SIZE, EARLY_AHEAD, BlockReader, ChunkError, EarlyStarts, early_candidate
from .piece_cuts import MAX_EVENT_BYTES, _cut, _grow, _skip_ws, candidate_cut, with_brackets

try:
    from ._kineto_scan import array_start, scan
except ImportError:  # pragma: no cover - built without the C scanner: nothing to scan early
    array_start = scan = None

AHEAD = 16  # scanned pieces at most waiting for the parser
HEADER_BYTES = 1 << 20  # the array's start is looked for in the first MiB (more is left to the parser)


@dataclass
class Handover:
    """Where the early scan stopped. `buf` holds the bytes read and not yet scanned; `start` is None
    when the array's start was not found (buf then holds the file from its first byte), else `sep`
    is the byte before the next element (kineto_stream's sep) and `prefix` the file up to the '['."""

    buf: bytearray
    eof: bool
    start: int | None = None
    sep: int = 0
    prefix: bytes = b""


@dataclass
class Piece:
    """One scanned piece: the scanner's (n, strings, columns), its length and the file position reached."""

    scanned: tuple
    length: int
    position: int


class EarlyScan:
    def __init__(self, path: Path, reader: BlockReader, block: int = BLOCK_SIZE) -> None:
        self.path = path
        self.reader = reader
        self.block = block
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._room = threading.Semaphore(AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracelab-early-scan", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._results.put(self._scan(Handover(bytearray(), False)))
        except BaseException as exc:  # noqa: BLE001 - raised again by take(): the parser must not go on
            self._results.put(exc)

    def _scan(self, state: Handover) -> Handover:
        reader, block = self.reader, self.block
        buf, eof, start = bytearray(), False, -1
        while start < 0 and not eof and len(buf) < HEADER_BYTES:  # the array's start, within the header
            try:
                more = reader.read()
            except ChunkError:  # the parser reads it again and reports it
                break
            buf, eof = _grow(buf, more), not more
            lead = _skip_ws(buf, 0)
            if lead:  # as the parser drops leading whitespace (a BOM is left to it)
                buf = _cut(buf, 0, lead)
            start = array_start(buf)
        state.buf, state.eof = buf, eof
        if start < 0:
            return state
        sep = start - 1
        state.start, state.sep, state.prefix = start, sep, bytes(buf[:start])
        more = False  # read on before cutting (no cut in what is read)
        while not self._stop.is_set():
            lead = _skip_ws(buf, sep + 1)
            if lead > sep + 1:
                buf = _cut(buf, sep + 1, lead)
            if not eof and (more or len(buf) - sep < block):
                try:
                    buf, got = reader.read_after(buf, sep)
                except ChunkError:  # the parser reads it again and reports it
                    break
                sep, eof, more = 0, not got, False
                continue
            if eof or len(buf) - sep > MAX_EVENT_BYTES + block:
                break
            cut = candidate_cut(buf, sep + 1)
            if cut <= sep:
                more = True
                continue
            self._room.acquire()
            if self._stop.is_set():
                break
            scanned = with_brackets(buf, sep, cut + 1, scan)
            if scanned is None:  # declined: the parser's own path decides
                break
            self._results.put(Piece(scanned, cut + 2 - sep, reader.position))
            sep = cut + 1
        state.buf, state.sep, state.eof = buf, sep, eof
        return state

    def take(self) -> Iterator[Piece | Handover]:
        """Stop scanning, then yield the scanned pieces in file order and last the Handover (an error
        of the scanning thread other than the file's own is raised here)."""
        self._stop.set()
        self.reader.limit_ahead(2)  # the parser's read-ahead from now on
        while True:
            item = self._results.get()
            if isinstance(item, BaseException):
                self._thread.join()
                raise item
            if isinstance(item, Handover):
                self._thread.join()
                yield item
                return
            self._room.release()
            yield item

    def close(self) -> None:
        """Stop the scan (if no parser took it) and the reader."""
        self._stop.set()
        for _ in range(AHEAD):
            self._room.release()
        self._thread.join()
        self.reader.close()


_early = EarlyStarts()


def start(path: Path, block: int = BLOCK_SIZE) -> bool:
    """Start reading and scanning `path` now, if it is a regular file that may be a Kineto trace (gzip,
    or plain JSON starting with '{') and the C scanner is built; whether it started."""
    if scan is None or not early_candidate(path, json_only=True):
        return False
    return _early.begin(path, lambda: EarlyScan(path, BlockReader(path, block, ahead=EARLY_AHEAD), block))


def take(path: Path, block: int = BLOCK_SIZE) -> EarlyScan | None:
    """The early scan of `path` (same block size), or None; the caller owns it from now on."""
    early = _early.take(path)
    if early is not None and early.block != block:
        early.close()
        return None
    return early


def discard() -> None:
    """Stop the early scans that no parser took."""
    _early.close_all()
