"""Read a trace file in blocks on a background thread, inflating gzip (or zstd) on the way.

The reading thread hands blocks to the parser through a small queue. File reads and inflation release
the GIL, so they run on another core while the parser decodes the previous block. Gzip is inflated with
`zlib.decompressobj` directly: one call per block that releases the GIL, where `gzip.GzipFile` runs a
few Python steps per 128 kB of input. Each of those steps waits for the GIL while the main thread
imports or builds columns (the reading thread was the slowest part of reading a 54 MB trace).
Multi-member gzip files and zero padding after a member are read as `gzip` reads them.

This module imports nothing heavy (no numpy), so the command line can start the read of a gzip trace
before it imports the parser: `start_early(path)` begins inflating while numpy and the analyses load,
and the parser's `open_blocks(path, block)` takes that reader over (or starts its own).
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import zlib
from pathlib import Path

BLOCK_SIZE = 4 << 20  # bytes of (inflated) trace per block
RAW_READ = 1 << 20  # compressed bytes read at a time
EARLY_AHEAD = 8  # blocks a reader started early may inflate before the parser takes it (32 MB)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"(\xb5/\xfd"


class ChunkError(Exception):
    """The bytes are not a usable Chrome trace; the message is one line, without the file name."""


class _Truncated(Exception):
    pass


class _BadGzip(Exception):
    pass


def is_gzip(head: bytes) -> bool:
    return head[:2] == GZIP_MAGIC


def is_compressed(head: bytes) -> bool:
    """Whether a file starting with `head` is inflated as it is read (gzip or zstd)."""
    return is_gzip(head) or head[:4] == ZSTD_MAGIC


def _zstd_reader(raw):
    try:
        import zstandard
    except ImportError:
        raise ChunkError("zstd-compressed trace: install the `zstandard` package to read it") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


def _gunzip_blocks(raw, block: int):
    """Yield the inflated bytes of a gzip file in pieces of at most `block` bytes (never empty). Members
    follow one another; zero bytes between or after members are padding (as `gzip.GzipFile` reads)."""
    d = zlib.decompressobj(31)  # 31: gzip header and trailer; the trailer's CRC-32 and size are checked
    pending = b""
    while True:
        if not pending:
            pending = raw.read(RAW_READ)
            if not pending:
                raise _Truncated
        out = d.decompress(pending, block)
        pending = d.unconsumed_tail
        if out:
            yield out
        if not d.eof:
            continue
        rest = d.unused_data.lstrip(b"\x00")
        while len(rest) < 2:  # the next member's magic, padding, or the end of the file
            more = raw.read(RAW_READ)
            if not more:
                if rest:
                    raise _BadGzip(f"trailing bytes after the gzip data ({rest!r})")
                return
            rest = (rest + more).lstrip(b"\x00")
        if not is_gzip(rest):
            raise _BadGzip(f"trailing bytes after the gzip data ({rest[:8]!r})")
        d = zlib.decompressobj(31)
        pending = rest


class BlockReader:
    """Reads `path` in blocks of about `block` bytes on a background thread; `read()` returns the next
    block (b"" at the end of the file) and raises ChunkError (one line) for a corrupt or truncated
    stream or a read error. `position` is the byte offset reached in the (compressed) file."""

    def __init__(self, path: Path, block: int = BLOCK_SIZE, ahead: int = 2) -> None:
        self.path = path
        self.block = block
        self._q: queue.Queue = queue.Queue(maxsize=max(ahead, 1))
        self._stop = False
        self.position = 0
        self._thread = threading.Thread(target=self._run, name="tracelab-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as raw:
                magic = raw.read(4)
                raw.seek(0)
                if is_gzip(magic):
                    pieces = _gunzip_blocks(raw, self.block)
                else:
                    f = _zstd_reader(raw) if magic == ZSTD_MAGIC else raw
                    pieces = iter(lambda: f.read(self.block), b"")
                for data in pieces:
                    if self._stop:
                        return
                    self._q.put((data, raw.tell()))
                self._q.put((b"", raw.tell()))
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, which re-raises it
            self._q.put(exc)

    def read(self) -> bytes:
        item = self._q.get()
        if isinstance(item, BaseException):
            self._q.put(item)  # a second read raises the same error
            msg = str(item).splitlines()[0] if str(item) else type(item).__name__
            if isinstance(item, (_Truncated, EOFError)):
                raise ChunkError("truncated gzip stream")
            if isinstance(item, (_BadGzip, zlib.error)):
                raise ChunkError(f"corrupt gzip data ({msg})")
            if isinstance(item, OSError):
                raise ChunkError(f"cannot read ({msg})")
            if type(item).__name__ == "ZstdError":
                raise ChunkError(f"corrupt zstd data ({msg})")
            raise item
        data, self.position = item
        return data

    def limit_ahead(self, ahead: int) -> None:
        """Read at most `ahead` blocks ahead from now on (a queue's bound may be changed while in use:
        `put` reads it under the queue's lock)."""
        with self._q.mutex:
            self._q.maxsize = max(ahead, 1)

    def close(self) -> None:
        self._stop = True
        while self._thread.is_alive():
            try:
                self._q.get_nowait()
            except queue.Empty:
                self._thread.join(0.01)


_early: dict[tuple[str, int, int], BlockReader] = {}
_early_lock = threading.Lock()


def _key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), st.st_ino, st.st_mtime_ns


def start_early(path: Path) -> None:
    """Begin inflating a gzip trace now, before the parser is imported; at most EARLY_AHEAD blocks are
    read ahead until the parser takes the reader over. Anything other than a regular gzip file is left
    to the parser (a plain file is read as fast as it is decoded)."""
    try:  # non-blocking: opening a FIFO for reading would otherwise wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not is_gzip(os.read(fd, 2)):
            return
    except OSError:
        return
    finally:
        os.close(fd)
    key = _key(path)
    if key is None:
        return
    with _early_lock:
        if key not in _early:
            _early[key] = BlockReader(path, BLOCK_SIZE, ahead=EARLY_AHEAD)


def open_blocks(path: Path, block: int = BLOCK_SIZE) -> BlockReader:
    """A reader of `path`: the one `start_early` began for this file (same size of block), or a new one."""
    key = _key(path)
    with _early_lock:
        early = _early.pop(key, None) if key is not None else None
    if early is not None and early.block == block:
        early.limit_ahead(2)
        return early
    if early is not None:
        early.close()
    return BlockReader(path, block)


def discard_early() -> None:
    """Stop the readers `start_early` began that no parser took (the file was not a Kineto trace)."""
    with _early_lock:
        readers = list(_early.values())
        _early.clear()
    for r in readers:
        r.close()
