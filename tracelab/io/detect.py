"""`load_trace(path)`: one entry point for every trace tracelab reads, dispatched by content.

- a file starting with the SQLite header            -> nsys SQLite export (`nsys.load_nsys_sqlite`)
- a `.nsys-rep` / `.qdrep` report                    -> exported with nsys into a temporary folder, then loaded
- gzip, or JSON ('{' / '[')                          -> Kineto Chrome trace (`kineto.load_kineto`)
- a directory with meta.json                         -> a recorded run directory (`load_run_dir`)
- a directory of per-rank traces                     -> one multi-rank run (`merge_timelines`)

The parser modules are imported only when needed, so a missing optional part never breaks the others.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from tracelab.errors import BadInput, TraceFormatError
from tracelab.model import RunMeta, Timeline, merge_timelines

Progress = Callable[[int, int], None]  # progress(done_bytes, total_bytes) over the input files

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
_NSYS_REP = (".nsys-rep", ".qdrep")
_KNOWN_BINARY = {
    b"\x89PNG": "a PNG image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a ZIP archive",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"\x7fELF": "an executable (ELF)",
    b"BZh": "a bzip2 archive",
    b"\xfd7zXZ": "an xz archive",
}
ZSTD_MAGIC = b"(\xb5/\xfd"
_TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", ".sqlite", ".sqlite.gz")
_SNIFF_LIMIT = 256 << 20  # leading whitespace beyond this is not a trace
_RANK_IN_NAME = re.compile(r"(?:rank|worker|node|proc|gpu)[-_.]?(\d+)", re.IGNORECASE)


def load_trace(path: str | Path, progress: Progress | None = None) -> Timeline:
    """Read any supported trace file or directory into a Timeline (see the module docstring).

    Raises BadInput / TraceFormatError with one line naming the file for anything unusable, and
    MissingDependency when the format needs a component that is not installed (e.g. nsys for .nsys-rep)."""
    path = Path(path)
    if check_input_path(path) == "dir":
        if (path / "meta.json").is_file():
            return load_run_dir(path)
        return load_trace_dir(path, progress)
    return _load_file(path, sniff(path), progress)


def load_run_dir(path: str | Path) -> Timeline:
    """Load a run directory (meta.json + raw trace + optional probe file) as one Timeline."""
    from tracelab.io.rundir.load import read_meta, run_dir_timeline, trace_path

    d = Path(path)
    meta = read_meta(d)
    chosen = trace_path(d, meta)
    return run_dir_timeline(d, meta, chosen, load_trace(chosen))


def _load_file(path: Path, kind: str, progress: Progress | None = None) -> Timeline:
    if kind in ("sqlite", "sqlite-gz"):
        from tracelab.io.nsys.load import load_nsys_sqlite

        return load_nsys_sqlite(path)
    if kind == "nsys-rep":
        return _load_nsys_rep(path)
    from tracelab.io.kineto import load as kineto

    return kineto.load_kineto(path, progress=progress)


def check_input_path(path: Path) -> str:
    """'file' or 'dir'; raises BadInput (one line) for a missing path and for anything that is not a
    regular file or directory (a FIFO, a device such as /dev/zero, a socket), without opening it, so
    nothing blocks or reads forever."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadInput("no such file or directory", path) from None
    except OSError as exc:
        raise BadInput(f"cannot read ({exc.strerror or exc})", path) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    what = (
        "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise BadInput(f"is {what}, not a trace file (tracelab reads regular files and directories)", path)


def sniff(path: Path) -> str:
    """'sqlite', 'sqlite-gz' (a gzip'd nsys export), 'nsys-rep' or 'json' (plain, gzip or zstd);
    raises TraceFormatError for anything else. Leading whitespace (and a UTF-8 BOM) of any length is
    skipped in blocks, at C speed."""
    check_input_path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if not head:
                raise TraceFormatError("empty file", path)
            if head.startswith(SQLITE_MAGIC):
                return "sqlite"
            if path.name.lower().endswith(_NSYS_REP):
                return "nsys-rep"
            if head.startswith(GZIP_MAGIC):
                return "sqlite-gz" if _gzip_head(path).startswith(SQLITE_MAGIC) else "json"
            if head.startswith(ZSTD_MAGIC) or _skippable_zstd(head):
                return "json"
            stripped = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
            stripped = stripped.lstrip(b" \t\r\n")
            seen = len(head)
            while not stripped and seen < _SNIFF_LIMIT:
                block = f.read(1 << 20)
                if not block:
                    break
                seen += len(block)
                stripped = block.lstrip(b" \t\r\n")
    except OSError as exc:
        raise BadInput(f"cannot read ({exc.strerror or exc})", path) from None
    if stripped[:1] in (b"{", b"["):
        return "json"
    if not stripped:
        raise TraceFormatError(
            "empty file (only whitespace)" if seen < _SNIFF_LIMIT else "not a trace (only whitespace)", path
        )
    for magic, what in _KNOWN_BINARY.items():
        if head.startswith(magic):
            raise TraceFormatError(f"not a trace: the file is {what}", path)
    raise TraceFormatError(
        "not a trace: expected Kineto JSON (.json/.json.gz/.json.zst), nsys SQLite (.sqlite/.sqlite.gz) "
        "or .nsys-rep",
        path,
    )


def _skippable_zstd(head: bytes) -> bool:
    """A zstd skippable frame (magic 0x184D2A50-5F): zstd readers pass over it to the data frame."""
    return len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18"


def _gzip_head(path: Path, n: int = 16) -> bytes:
    """The first n bytes inside a gzip file (b'' when it cannot be inflated). The start of the first member
    is inflated by zlib directly (the `gzip` module is not imported on `analyze`'s path); a first member
    that gives fewer than n bytes from its first 64 KiB, or that zlib refuses, is read with `gzip`."""
    import zlib

    try:
        with open(path, "rb") as f:
            head = zlib.decompressobj(31).decompress(f.read(1 << 16), n)
        if len(head) == n:
            return head
    except (OSError, zlib.error):
        pass
    import gzip

    try:
        with gzip.open(path, "rb") as g:
            return g.read(n)
    except (OSError, EOFError, zlib.error):
        return b""


def load_trace_dir(path: Path, progress: Progress | None = None) -> Timeline:
    """A directory of per-rank traces (Kineto JSON or nsys SQLite) -> one multi-rank Timeline.

    Rank of each file: its distributedInfo rank, else a number in its name (rank3, worker3, ...),
    else its position in name order; when two files claim the same rank the next source is used.
    (`tracelab.distributed` parses the same files in parallel and merges them with `merge_rank_parts`.)"""
    files = rank_files_in(path)
    total = sum(p.stat().st_size for p in files)
    done = 0
    parts: list[Timeline] = []
    for p in files:
        sub = None
        if progress is not None:
            base = done
            sub = lambda d, t, base=base: progress(base + d, total)
        parts.append(load_rank_file(p, progress=sub))
        done += p.stat().st_size
        if progress is not None:
            progress(done, total)
    return merge_rank_parts(str(path), files, parts)


def rank_files_in(path: Path) -> list[Path]:
    """The per-rank trace files of a directory, in name order (BadInput when there are none, or when
    nsys exports and Kineto traces are mixed)."""
    named = sorted(
        p for p in path.iterdir() if not p.name.startswith(".") and p.name.lower().endswith(_TRACE_SUFFIXES)
    )
    for p in named:  # named like a rank's trace but no file to read: never a silently smaller run
        if p.is_symlink() and not p.exists():
            raise BadInput(f"{p.name} is a dangling symlink (to {os.readlink(p)}): no rank trace to read", path)
        if p.exists() and not p.is_file():
            check_input_path(p)  # a FIFO, a device, a socket: one line naming it
            raise BadInput(f"{p.name} is a directory named like a trace file: not a rank trace", path)
    files = [p for p in named if p.is_file()]
    if not files:
        raise BadInput("directory holds no traces (*.json, *.json.gz, *.sqlite) and no meta.json", path)
    check_rank_kinds(files, path)
    return files


def check_rank_kinds(files: list[Path], where: str | Path) -> None:
    """BadInput when the rank files mix nsys exports and Kineto traces."""
    kinds = {p: sniff(p) for p in files}
    nsys_files = [p.name for p in files if kinds[p] in ("sqlite", "sqlite-gz")]
    kineto_files = [p.name for p in files if kinds[p] not in ("sqlite", "sqlite-gz")]
    if nsys_files and kineto_files:
        # an nsys export holds every process it profiled; a Kineto trace beside it is not "the next
        # rank" and merging would relabel it: the user says which is which by importing them apart
        raise BadInput(
            f"directory mixes nsys exports ({nsys_files[0]}) and Kineto traces ({kineto_files[0]}): "
            "import them separately",
            where,
        )


def load_rank_file(path: Path, progress: Progress | None = None) -> Timeline:
    """One rank's trace file (Kineto JSON or nsys SQLite), not yet relabelled to its rank."""
    return _load_file(path, sniff(path), progress=progress)


def merge_rank_parts(source: str, files: list[Path], parts: list[Timeline]) -> Timeline:
    """Per-rank timelines of `files` (same order) -> one multi-rank Timeline with ranks chosen as
    `load_trace_dir` documents."""
    ranks, rank_notes = _choose_ranks(files, parts)
    from tracelab.io.kineto.load import relabel_rank

    parts = [tl if tl.meta.ranks == (r,) else relabel_rank(tl, r) for tl, r in zip(parts, ranks)]
    formats = sorted({tl.meta.format for tl in parts})
    notes = (*rank_notes, *(f"{f.name}: {n}" for f, tl in zip(files, parts) for n in tl.meta.notes))
    stats: dict[str, int] = {}
    for tl in parts:
        for k, v in tl.meta.stats.items():
            if isinstance(v, int):
                stats[k] = stats.get(k, 0) + v
    meta = RunMeta(
        source=source,
        format=formats[0] if len(formats) == 1 else "+".join(formats),
        ranks=tuple(sorted(ranks)),
        schema_version=",".join(sorted({tl.meta.schema_version for tl in parts if tl.meta.schema_version})),
        gpu=", ".join(sorted({g for tl in parts for g in tl.meta.gpu.split(", ") if g})),
        notes=notes,
        stats=stats,
        extra={
            "files": {f.name: r for f, r in zip(files, ranks)},
            "rank_extra": {str(r): dict(tl.meta.extra) for tl, r in zip(parts, ranks)},
        },
    )
    return merge_timelines(parts, meta)


def _choose_ranks(files: list[Path], parts: list[Timeline]) -> tuple[list[int], list[str]]:
    """The rank of each file, and a note when files claim the same rank (by distributedInfo or by
    their names) so that another source had to decide: which rank a file's work lands on is then a
    guess, and the note names the files."""
    notes: list[str] = []
    from_info = [
        tl.meta.ranks[0] if tl.meta.extra.get("rank_source") == "distributedInfo" else None for tl in parts
    ]
    if all(r is not None for r in from_info) and len(set(from_info)) == len(from_info):
        return [int(r) for r in from_info], notes  # type: ignore[arg-type]
    notes += _clash_note(files, from_info, "distributedInfo.rank")
    from_name = []
    for f in files:
        m = _RANK_IN_NAME.findall(f.name)
        from_name.append(int(m[-1]) if m else None)
    if all(r is not None for r in from_name) and len(set(from_name)) == len(from_name):
        if notes:
            notes.append("ranks were taken from the numbers in the file names instead")
        return [int(r) for r in from_name], notes  # type: ignore[arg-type]
    notes += _clash_note(files, from_name, "the rank number in their names")
    if notes:
        notes.append("ranks were assigned in file-name order instead: " + ", ".join(
            f"{f.name}={i}" for i, f in enumerate(files[:8])) + (", ..." if len(files) > 8 else ""))
    return list(range(len(files))), notes


def _clash_note(files: list[Path], claims: list[int | None], source: str) -> list[str]:
    """A note for ranks that several files claim by `source` (none when no two files do)."""
    seen: dict[int, list[str]] = {}
    for f, r in zip(files, claims):
        if r is not None:
            seen.setdefault(int(r), []).append(f.name)
    clashes = {r: names for r, names in seen.items() if len(names) > 1}
    if not clashes:
        return []
    r, names = min(clashes.items())
    more = f" (and {len(clashes) - 1} more ranks claimed twice)" if len(clashes) > 1 else ""
    return [f"{len(names)} files claim rank {r} by {source} ({', '.join(names[:4])}){more}"]


# what a directory's fingerprint reads: trace files, a run's meta.json and its SM probe; nothing else
# (a 40 GB checkpoint beside two rank traces took 93 s to hash)
_HASHED_SUFFIXES = (*_TRACE_SUFFIXES, *_NSYS_REP, ".npz")


def _hashed(p: Path) -> bool:
    name = p.name.lower()
    return name == "meta.json" or name.endswith(_HASHED_SUFFIXES)


def trace_fingerprint(path: str | Path) -> str:
    """sha256 of the file's bytes; for a directory, sha256 of the sorted hashes of its trace files (and a
    run's meta.json / .npz probe; recursively, hidden files excluded; other files, such as checkpoints
    or logs beside the traces, are not read), so renaming or reordering does not change it."""
    import hashlib  # here: `analyze` of a file never fingerprints it (OpenSSL's load is ~5 ms)

    path = Path(path)
    if check_input_path(path) == "dir":
        hashes = sorted(
            _file_hash(p)
            for p in path.rglob("*")
            if _hashed(p) and p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        return hashlib.sha256("\n".join(hashes).encode()).hexdigest()
    return _file_hash(path)


def _file_hash(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    except OSError as exc:
        raise BadInput(f"cannot read ({exc.strerror or exc})", path) from None
    return h.hexdigest()


def _load_nsys_rep(path: Path) -> Timeline:
    import tempfile

    from tracelab.io.nsys import load as nsys

    with tempfile.TemporaryDirectory(prefix="tracelab-nsys-") as tmp:
        sqlite_path = nsys.export_nsys_rep(path, Path(tmp))
        tl = nsys.load_nsys_sqlite(sqlite_path)
    return tl.with_meta(source=str(path))
