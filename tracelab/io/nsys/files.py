"""The export's file before SQLite opens it: its header checked, and a private copy made when SQLite could
not read it in place (a WAL-mode file, a gzip'd export inflated under a limit against gzip bombs)."""

from __future__ import annotations

import gzip
import shutil
import tempfile
import zlib
from pathlib import Path

from tracelab.errors import TraceFormatError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
MAX_PRIVATE_COPY = 64 << 30  # a private (inflated) copy larger than this is refused


def _read_head(path: Path, n: int = 100) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise TraceFormatError(f"cannot read ({exc.strerror or exc})", path) from None


def _check_header(path: Path, head: bytes, size: int) -> None:
    if size == 0:
        raise TraceFormatError("empty file, not an Nsight Systems SQLite export", path)
    if not head.startswith(SQLITE_MAGIC):
        raise TraceFormatError("not an SQLite database (expected an Nsight Systems SQLite export)", path)
    if size < 512 or size % 512:
        raise TraceFormatError(f"truncated SQLite file ({size} bytes is not a whole number of pages)", path)


# a gzip'd export may inflate to INFLATE_RATIO times its size (real exports: 3-9x), and always to
# MIN_INFLATE_LIMIT: an 8.4 MB file of zeros wrote 8 GiB into the temp directory before this bound
INFLATE_RATIO = 64
MIN_INFLATE_LIMIT = 256 << 20


def inflate_limit(compressed_size: int) -> int:
    """The most bytes a gzip'd export of this size is inflated to (see INFLATE_RATIO)."""
    return min(MAX_PRIVATE_COPY, max(MIN_INFLATE_LIMIT, INFLATE_RATIO * compressed_size))


def _inflate(path: Path, out: Path) -> None:
    """gunzip path -> out, refusing more than `inflate_limit` bytes."""
    written = 0
    size = path.stat().st_size
    limit = inflate_limit(size)
    try:
        with gzip.open(path, "rb") as src, out.open("wb") as dst:
            while block := src.read(1 << 20):
                written += len(block)
                if written > limit:
                    raise TraceFormatError(
                        f"gzip'd export inflates to more than {limit >> 20:,} MiB ({INFLATE_RATIO}x its "
                        f"{size / 1e6:.1f} MB, or {MIN_INFLATE_LIMIT >> 20} MiB): refused as a likely gzip bomb; "
                        "gunzip it yourself to read it",
                        path,
                    )
                dst.write(block)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"corrupt gzip data ({str(exc).splitlines()[0] if str(exc) else exc})", path) from None


def _private_copy(path: Path, head: bytes) -> tuple[Path, str]:
    """A copy of the export in a new private directory (inflated if gzip'd, with its -wal file if it is
    in WAL mode) and that directory."""
    tmp = tempfile.mkdtemp(prefix="tracelab-sqlite-")
    try:
        out = Path(tmp) / "export.sqlite"
        if head.startswith(GZIP_MAGIC):
            _inflate(path, out)
        else:
            if path.stat().st_size > MAX_PRIVATE_COPY:
                raise TraceFormatError(f"WAL-mode export larger than {MAX_PRIVATE_COPY >> 30} GiB (refused)", path)
            shutil.copyfile(path, out)
            wal = path.with_name(path.name + "-wal")
            if wal.is_file():
                shutil.copyfile(wal, out.with_name(out.name + "-wal"))
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TraceFormatError(f"cannot make a private copy to read ({exc.strerror or exc})", path) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, tmp
