"""Read a trace file in blocks on a background thread, inflating gzip / zstd on the way; and start that
reading before the parser's modules are imported.

Standard library only, so `read_ahead(path)` can run before numpy and the parsers are loaded: the CLI
starts it as soon as it knows the file, and the file is being inflated on a second core while the
interpreter imports (tens of milliseconds on a small trace). `EventChunks` then `claim`s the reader
started for its file, or starts its own.

gzip is inflated by zlib in steps of megabytes (`_Gunzip`): each step releases the GIL for its whole
length, where `gzip.GzipFile` takes the GIL back every 8 KB of input and so crawls while another thread
imports modules or runs Python. The bytes are the same: one gzip member after another, zero padding
between members skipped, as GzipFile reads them.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import BinaryIO

BLOCK_SIZE = 4 << 20  # bytes per block handed to the parser
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"(\xb5/\xfd"
_GZIP_INPUT = 1 << 20  # compressed bytes per zlib step
AHEAD_BLOCKS = 8  # blocks read ahead of the consumer (memory: AHEAD_BLOCKS × the block size)


class ChunkError(Exception):
    """The bytes are not a usable Chrome trace; the message is one line, without the file name."""


class BadGzip(Exception):
    """Not gzip data where a gzip member should start (GzipFile's BadGzipFile)."""


def is_gzip(head: bytes) -> bool:
    return head[:2] == GZIP_MAGIC


class _Gunzip:
    """`read(n)`: up to n inflated bytes of a gzip file (b'' at its end), in big zlib steps."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._d: zlib._Decompress | None = zlib.decompressobj(31)
        self._buf = b""  # compressed bytes not yet given to zlib
        self._end = False

    def _fill(self) -> bool:
        data = self._raw.read(_GZIP_INPUT)
        self._buf += data
        return bool(data)

    def _next_member(self) -> bool:
        """Skip the zero padding after a member; False at the end of the file, else a new decompressor
        (BadGzip when what follows is not a gzip member)."""
        while True:
            self._buf = self._buf.lstrip(b"\x00")
            if self._buf or not self._fill():
                break
        if not self._buf:
            return False
        if len(self._buf) < 2:
            self._fill()
        if self._buf[:2] != GZIP_MAGIC:
            raise BadGzip(f"Not a gzipped file ({self._buf[:2]!r})")
        self._d = zlib.decompressobj(31)
        return True

    def read(self, n: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < n and not self._end:
            if self._d is None and not self._next_member():
                self._end = True
                break
            d = self._d
            if not self._buf and not self._fill():
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            out = d.decompress(self._buf, n - got)
            if d.eof:
                self._buf, self._d = d.unused_data, None
            else:
                self._buf = d.unconsumed_tail
            if out:
                parts.append(out)
                got += len(out)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_reader(raw: BinaryIO) -> BinaryIO:
    try:
        import zstandard
    except ImportError:
        raise ChunkError("zstd-compressed trace: install the `zstandard` package to read it") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


class BlockReader:
    """Reads a file in blocks on a background thread (inflation and file reads release the GIL, so
    they overlap with decoding on another core). `read()` returns the next block, b'' at the end, or
    raises ChunkError (one line) for a corrupt or unreadable file."""

    def __init__(self, path: Path, block: int, ahead: int = AHEAD_BLOCKS) -> None:
        self.block = block
        self._q: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = False
        self.position = 0
        self._thread = threading.Thread(target=self._run, args=(path, block), daemon=True, name="tracelab-read")
        self._thread.start()

    def _run(self, path: Path, block: int) -> None:
        try:
            with open(path, "rb") as raw:
                magic = raw.read(4)
                raw.seek(0)
                f: BinaryIO | _Gunzip = raw
                if is_gzip(magic):
                    f = _Gunzip(raw)
                elif magic == ZSTD_MAGIC:
                    f = _zstd_reader(raw)
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
            if isinstance(item, (BadGzip, zlib.error)):
                raise ChunkError(f"corrupt gzip data ({msg})")
            if isinstance(item, OSError):
                raise ChunkError(f"cannot read ({msg})")
            if type(item).__name__ == "ZstdError":
                raise ChunkError(f"corrupt zstd data ({msg})")
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


# ---- read-ahead: a reader started before the parser asks for it ------------------------------------

_started: dict[tuple, BlockReader] = {}
_lock = threading.Lock()


def _identity(path: Path) -> tuple:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def looks_like_json_trace(head: bytes) -> bool:
    """gzip / zstd data, or text whose first non-blank byte opens a JSON object or array."""
    if is_gzip(head) or head.startswith(ZSTD_MAGIC):
        return True
    text = head.lstrip(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return text[:1] in (b"{", b"[")


def read_ahead(path: str | Path, block: int = BLOCK_SIZE) -> bool:
    """Start reading `path` in blocks of `block` bytes now, for a later `claim` (a Kineto / Chrome-trace
    file only: gzip, zstd or JSON text; anything else, a directory or an unreadable path is left
    alone). True when a reader was started."""
    path = Path(path)
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            head = f.read(64)
        key = _identity(path)
    except OSError:
        return False
    if not looks_like_json_trace(head):
        return False
    with _lock:
        if (key, block) in _started:
            return True
        _started[(key, block)] = BlockReader(path, block)
    return True


def claim(path: str | Path, block: int) -> BlockReader | None:
    """The reader `read_ahead` started for this very file (same path, inode, size and modification
    time) and block size, handed over once; None when there is none."""
    try:
        key = _identity(Path(path))
    except OSError:
        return None
    with _lock:
        return _started.pop((key, block), None)


def release_unclaimed() -> None:
    """Stop the readers nobody claimed (the parse took another route, or failed before reading)."""
    with _lock:
        readers = list(_started.values())
        _started.clear()
    for r in readers:
        r.close()


atexit.register(release_unclaimed)
