"""Read a trace file in blocks on a background thread, inflating gzip (or zstd) on the way.

The reading thread hands blocks to the parser through a small queue. File reads and inflation release
the GIL, so they run on another core while the parser decodes the previous block. Gzip is inflated by
`_inflate.Gunzip` (a C extension): straight into the block's buffer, with the GIL released for the
whole block. Python's `zlib` releases it while inflating too, but joins each result from a chain of
buffers into a new bytes object with the GIL held (a fresh 4 MiB, its page faults and a copy), and the
main thread, importing numpy or building columns, waited for it. Without the extension, `zlib` does the
work. Multi-member gzip files and zero padding after a member are read as `gzip` reads them.

Each block is a bytearray with HEADROOM free bytes in front of the data: `read_after(buf, start)` puts
the unfinished end of the previous block there and hands back one contiguous buffer without copying
the new block (the parser scans pieces in place).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK_SIZE = 4 << 20  # bytes of (inflated) trace per block
HEADROOM = 1 << 16  # free bytes in front of each block, for the end of the previous one (read_after)
RAW_READ = 1 << 20  # compressed bytes read at a time
EARLY_AHEAD = 8  # blocks a reader started early may inflate before the parser takes it (32 MB)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"(\xb5/\xfd"

try:
    from ._inflate import Gunzip, empty
except ImportError:  # built without the C extension: zlib inflates, blocks have no headroom
    Gunzip = empty = None


class ChunkError(Exception):
    """The bytes are not a usable Chrome trace; the message is one line, without the file name."""


class _Truncated(Exception):
    pass


class _BadGzip(Exception):
    pass


def is_gzip(head: bytes) -> bool:
    return head[:2] == GZIP_MAGIC


def is_zstd(head: bytes) -> bool:
    """A zstd frame, or a zstd skippable frame (magic 0x184D2A50-5F, little-endian), which zstd
    readers pass over to the data frame after it."""
    return head[:4] == ZSTD_MAGIC or (len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18")


def is_compressed(head: bytes) -> bool:
    """Whether a file starting with `head` is inflated as it is read (gzip or zstd)."""
    return is_gzip(head) or is_zstd(head)


def _zstd_reader(raw):
    try:
        import zstandard
    except ImportError:
        raise ChunkError("zstd-compressed trace: install the `zstandard` package to read it") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


def _next_member(raw, rest: bytes) -> bytes | None:
    """After a gzip member: the start of the next one (`rest`, the bytes read past the member, plus what
    more is needed to see its magic), or None at the end of the file. Zero bytes between or after
    members are padding (as `gzip.GzipFile` reads them)."""
    rest = rest.lstrip(b"\x00")
    while len(rest) < 2:  # the next member's magic, padding, or the end of the file
        more = raw.read(RAW_READ)
        if not more:
            if rest:
                raise _BadGzip(f"trailing bytes after the gzip data ({rest!r})")
            return None
        rest = (rest + more).lstrip(b"\x00")
    if not is_gzip(rest):
        raise _BadGzip(f"trailing bytes after the gzip data ({rest[:8]!r})")
    return rest


def _gunzip_blocks(raw, block: int):
    """(data, HEADROOM): the inflated bytes of a gzip file in blocks of `block` bytes (the last may be
    shorter, none is empty), each in a bytearray after HEADROOM free bytes; members follow one another.
    The trailer's CRC-32 and size are checked. Without the C extension: (bytes, 0) from zlib."""
    if Gunzip is None:
        yield from ((data, 0) for data in _zlib_blocks(raw, block))
        return
    g = Gunzip()
    pending = memoryview(b"")
    out, filled = empty(HEADROOM + block), HEADROOM
    while True:
        if not pending:
            pending = memoryview(raw.read(RAW_READ))
            if not pending:
                raise _Truncated
        try:
            used, made, ended = g.inflate_into(pending, out, filled)
        except ValueError as exc:
            raise _BadGzip(str(exc)) from None
        pending = pending[used:]
        filled += made
        if filled == len(out):
            yield out, HEADROOM
            out, filled = empty(HEADROOM + block), HEADROOM
        if not ended:
            continue
        rest = _next_member(raw, bytes(pending))
        if rest is None:
            if filled > HEADROOM:
                del out[filled:]
                yield out, HEADROOM
            return
        g.reset()
        pending = memoryview(rest)


def _zlib_blocks(raw, block: int):
    """The inflated bytes of a gzip file in pieces of at most `block` bytes (never empty), by zlib."""
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
        rest = _next_member(raw, d.unused_data)
        if rest is None:
            return
        d = zlib.decompressobj(31)
        pending = rest


def _plain_blocks(raw, block: int):
    """(data, HEADROOM): a file's bytes in blocks of `block` bytes (the last may be shorter, none is
    empty), each read into a bytearray after HEADROOM free bytes; (bytes, 0) without the C extension."""
    if empty is None:
        yield from ((data, 0) for data in iter(lambda: raw.read(block), b""))
        return
    while True:
        out = empty(HEADROOM + block)
        filled = HEADROOM
        with memoryview(out) as view:
            while filled < len(out):
                got = raw.readinto(view[filled:])
                if not got:
                    break
                filled += got
        if filled == HEADROOM:
            return
        short = filled < len(out)  # the end of the file
        if short:
            del out[filled:]
        yield out, HEADROOM
        if short:
            return


class BlockReader:
    """Reads `path` in blocks of about `block` bytes on a background thread; `read()` returns the next
    block (b"" at the end of the file), `read_after(buf, start)` the next block with buf[start:] before
    it; both raise ChunkError (one line) for a corrupt or truncated stream or a read error. `position`
    is the byte offset reached in the (compressed) file."""

    def __init__(self, path: Path, block: int = BLOCK_SIZE, ahead: int = 2) -> None:
        self.path = path
        self.block = block
        self._q: queue.Queue = queue.Queue(maxsize=max(ahead, 1))
        self._stop = False
        self.position = 0
        # NCCL kernels' collective metadata, found in the text as it is read (kineto_comm_args)
        from .kineto_comm_args import CommArgs

        self.comm_args = CommArgs()
        self._thread = threading.Thread(target=self._run, name="tracelab-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as raw:
                magic = raw.read(4)
                raw.seek(0)
                if is_gzip(magic):
                    blocks = _gunzip_blocks(raw, self.block)
                elif is_zstd(magic):
                    f = _zstd_reader(raw)
                    blocks = ((data, 0) for data in iter(lambda: f.read(self.block), b""))
                else:
                    blocks = _plain_blocks(raw, self.block)
                for data, head in blocks:
                    if self._stop:
                        return
                    self.comm_args.feed(data, head)
                    self._q.put((data, head, raw.tell()))
                self._q.put((b"", 0, raw.tell()))
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, which re-raises it
            self._q.put(exc)

    def _next(self) -> tuple[bytes | bytearray, int]:
        """(buffer, headroom) of the next block: its data is buffer[headroom:]."""
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
        data, head, self.position = item
        return data, head

    def read(self) -> bytes | bytearray:
        data, head = self._next()
        if head:
            del data[:head]  # the start moves: nothing is copied
        return data

    def read_after(self, buf: bytes | bytearray, start: int) -> tuple[bytearray, int]:
        """(the tail buf[start:] + the next block as one new bytearray, the length of that block: 0 at
        the end of the file). A tail that fits the block's headroom is written there: the block is not
        copied."""
        data, head = self._next()
        with memoryview(buf) as whole, whole[start:] as tail:
            k = len(tail)
            if head and k <= head:
                with memoryview(data) as view:
                    view[head - k : head] = tail
                if head > k:
                    del data[: head - k]
                return data, len(data) - k
            out = bytearray(tail)
        with memoryview(data) as view:
            out += view[head:]
        return out, len(data) - head

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


class EarlyStarts(dict):
    """What the command line began for a file before the parser loaded (a reader here, a scan in
    `early_scan`), by `file_key`: the parser takes one (`take`), `close_all` stops the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def begin(self, path: Path, make: Callable[[], Any]) -> bool:
        """make() for `path` unless one was begun for this file already; False if the file is gone."""
        key = file_key(path)
        if key is None:
            return False
        with self._lock:
            if key not in self:
                self[key] = make()
        return True

    def take(self, path: Path) -> Any:
        key = file_key(path)
        with self._lock:
            return self.pop(key, None) if key is not None else None

    def close_all(self) -> None:
        with self._lock:
            begun = list(self.values())
            self.clear()
        for b in begun:
            b.close()


_early = EarlyStarts()


def file_key(path: Path) -> tuple[str, int, int] | None:
    """What identifies the file at `path` now (its real path, inode and modification time)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), st.st_ino, st.st_mtime_ns


def early_candidate(path: Path, json_only: bool = False) -> bool:
    """Whether `path` is a regular gzip file (or, with `json_only`, a plain one whose first byte after
    whitespace is '{'): one worth reading before the parser is imported. FIFOs and devices are not
    opened for good (a non-blocking open, then fstat)."""
    try:  # non-blocking: opening a FIFO for reading would otherwise wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 64)
    except OSError:
        return False
    finally:
        os.close(fd)
    return is_gzip(head) or (json_only and head.lstrip(b" \t\r\n")[:1] == b"{")


def start_early(path: Path) -> None:
    """Begin inflating a gzip trace now, before the parser is imported; at most EARLY_AHEAD blocks are
    read ahead until the parser takes the reader over. Anything other than a regular gzip file is left
    to the parser (a plain file is read as fast as it is decoded)."""
    if early_candidate(path):
        _early.begin(path, lambda: BlockReader(path, BLOCK_SIZE, ahead=EARLY_AHEAD))


def open_blocks(path: Path, block: int = BLOCK_SIZE) -> BlockReader:
    """A reader of `path`: the one `start_early` began for this file (same size of block), or a new one."""
    early = _early.take(path)
    if early is not None and early.block == block:
        early.limit_ahead(2)
        return early
    if early is not None:
        early.close()
    return BlockReader(path, block)


def discard_early() -> None:
    """Stop the readers `start_early` began that no parser took (the file was not a Kineto trace)."""
    _early.close_all()
