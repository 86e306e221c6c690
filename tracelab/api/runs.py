"""Reading traces and the store: parse, import (one workflow for the CLI, the upload page and rank
sets), resolve a run reference, and where the store lives."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from ..errors import BadInput
    from ..io.detect import Progress
    from ..model import Timeline
    from ..store import Store


def load(path: str | Path, progress: Progress | None = None) -> Timeline:
    """Parse a trace file or run directory into a Timeline (format detected from the content).
    Raises tracelab.errors.BadInput (one line naming the file) for input it cannot read."""
    from ..io.detect import load_trace

    return load_trace(path, progress)


class Imported(msgspec.Struct, frozen=True):
    run_id: str
    new: bool  # False: the same content was already in the store (its run id is returned)


def import_trace(
    path: str | Path,
    store: Store,
    name: str | None = None,
    *,
    replace: bool = False,
    source_path: str | None = None,
    parse_progress: Progress | None = None,
    store_progress: Progress | None = None,
) -> Imported:
    """Parse a trace (file or directory) and save it as a run of `store`: the one import workflow (the
    CLI's `import` and the dashboard's upload page both call this). Content already in the store (same
    fingerprint) is not parsed again: its run id comes back with new=False, unless `replace`.
    `source_path` is what the store records as the source (default: the absolute path)."""
    from ..errors import BadInput, DuplicateRun
    from ..io import trace_fingerprint

    p = Path(path)
    if not p.exists():
        raise BadInput("no such file or directory", p)
    fp = trace_fingerprint(p)
    existing = store.find_fingerprint(fp)
    if existing and not replace:
        return Imported(existing, False)
    timeline = load(p, parse_progress)
    try:
        rid = store_timeline(
            timeline,
            store,
            source_path=source_path or str(p.absolute()),
            fingerprint=fp,
            name=name,
            progress=store_progress,
            replace=replace,
        )
    except DuplicateRun as e:  # imported concurrently by another process
        return Imported(e.run_id, False)
    return Imported(rid, True)


def store_timeline(
    timeline: Timeline,
    store: Store,
    *,
    source_path: str | Path,
    fingerprint: str,
    name: str | None = None,
    progress: Progress | None = None,
    replace: bool = False,
) -> str:
    """Save a parsed Timeline as a run of `store` in one transaction, with what the dashboard's first
    view of it reads (`tracelab.render.timeline.overview`: the whole-run timeline of a big run);
    returns the run id. DuplicateRun when the store holds this fingerprint already (unless `replace`)."""
    from tracelab.analyses.parallel import in_background
    from tracelab.render.timeline.overview import overview_views

    return store.import_timeline(
        timeline,
        source_path=source_path,
        fingerprint=fingerprint,
        name=name,
        progress=progress,
        replace=replace,
        views=in_background(lambda: overview_views(timeline)),  # computed while the events are written
    )


def store_views(store: Store, run_id: str, timeline: Timeline | None = None) -> bool:
    """Compute and store the views `store_timeline` stores with a run, for a run imported before they
    existed (`timeline`: the run's, when loaded already). Returns whether the run has any."""
    from tracelab.render.timeline.overview import overview_views

    views = overview_views(timeline if timeline is not None else store.load(run_id))
    if views:
        store.put_views(run_id, views)
    return bool(views)


def resolve(ref: str | Path, store: Store | None = None) -> tuple[Timeline, str]:
    """A path (parsed directly) or a run id / id prefix / name in `store`: (timeline, title)."""
    from ..errors import BadInput, UnknownRun

    p = Path(ref)
    if p.exists():
        return load(p), str(p)
    if store is None:
        raise BadInput("no such file (and no store to look the name up in)", str(ref))
    try:
        rid = store.resolve(str(ref))
    except UnknownRun:
        raise BadInput("no such file, and no run with this id or name in the store (see `tracelab runs`)", str(ref)) from None
    return store.load(rid), f"run {rid} · {store.get_run(rid).name}"


def open_store(path: str | Path, *, create: bool = True, read_only: bool = False) -> Store:
    """The store at `path` (created when missing unless create=False; read_only opens it for reading)."""
    from ..store import Store

    return Store(path, create=create, read_only=read_only)


def default_db_path() -> Path:
    """The store used without --db: $TRACELAB_DB or the user data directory's."""
    from ..settings import default_db_path as default

    return default()


def runs_dir() -> Path:
    """Where recorded run directories go: $TRACELAB_RUNS or the user data directory's."""
    from ..settings import runs_dir as where

    return where()


def store_error(exc: BaseException, db: str | Path) -> BadInput | None:
    """A SQLite or OS error from where the store lives (read-only, disk full, I/O, locked) that escaped
    the Store's own translation, as the one line naming the store file; None for anything else (a bug)."""
    import sqlite3

    from ..errors import BadInput
    from ..store.schema import describe_sqlite_error, is_environment_error

    if isinstance(exc, sqlite3.OperationalError) and is_environment_error(exc):
        return BadInput(describe_sqlite_error(exc), db)
    if isinstance(exc, OSError) and exc.errno in (28, 30, 122):  # ENOSPC, EROFS, EDQUOT
        return BadInput(str(exc.strerror or exc), exc.filename)
    return None


def demo_run_paths() -> list[Path]:
    """The bundled example runs (recorded on a real GPU), unpacked into the cache."""
    from ..demo import demo_run_paths as paths

    return list(paths())
