"""Writing the store, inside the caller's transaction: a run's rows (the run, its strings, lanes, event
chunks and SM blocks), its views, and deleting a run."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import BadInput, DuplicateRun
from ..model.timeline import EVENT_COLUMNS, LANE_COLUMNS, Timeline
from . import codec
from .bulk import insert_columns
from .chunks import Chunks, encode, encode_columns
from .queries import has_table, run_by_fingerprint
from .schema import CHUNK_COLUMNS, SM_BLOCK_COLUMNS_DDL, STORE_SCHEMA_VERSION, VIEWS_DDL, quote, sql_type

_CHUNK_ROWS = 64  # chunks per executemany batch (and per progress step)


def write_run(
    conn: sqlite3.Connection, timeline: Timeline, source_path: str | Path, fingerprint: str, name: str | None,
    replace: bool, step: Callable[[int], None], spare: int = 0,
) -> str:
    """Every row of one run (inside the caller's transaction); returns its id. `replace`: a run of the same
    fingerprint is deleted first. `step(k)` as events are written; `spare`: cores the event encoder leaves
    to other work."""
    blocks = timeline.sm_blocks
    block_dtypes = {c: str(blocks[c].dtype) for c in blocks.columns} if blocks is not None else None
    # as one columnar blob when every column is an integer one (schema version 3), else as rows
    columnar = block_dtypes is not None and len(blocks) > 0 and all(
        np.dtype(t).kind in "iub" for t in block_dtypes.values()
    )
    metadata = codec.meta_to_json(timeline.meta, {
        "sm_blocks": None if columnar else block_dtypes, "sm_block_columns": block_dtypes if columnar else None,
        "event_columns": list(EVENT_COLUMNS), "chunk_columns": list(CHUNK_COLUMNS),
        "store_source_path": str(source_path),
    })
    existing = run_by_fingerprint(conn, fingerprint)
    if existing and replace:
        delete_rows(conn, existing)
    run_id = _new_run_id(conn, fingerprint)
    _insert_run_row(conn, run_id, timeline, source_path, fingerprint, name, metadata)
    conn.executemany(
        "INSERT INTO strings (run_id, id, value) VALUES (?, ?, ?)",
        ((run_id, i, s) for i, s in enumerate(timeline.strings)),
    )
    chunks = encode(timeline.events, CHUNK_COLUMNS, spare=spare)
    _insert_lanes(conn, run_id, timeline, chunks)
    _insert_events(conn, run_id, chunks, step)
    if columnar:
        _insert_block_columns(conn, run_id, blocks)
    elif blocks is not None:
        insert_blocks(conn, run_id, blocks)
    return run_id


def _new_run_id(conn: sqlite3.Connection, fingerprint: str) -> str:
    for rid in codec.run_id_candidates(fingerprint):
        if not conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
            return rid
    raise BadInput(f"cannot derive a free run id from fingerprint {fingerprint!r}")


def _insert_run_row(
    conn: sqlite3.Connection, run_id: str, timeline: Timeline, source_path: str | Path, fingerprint: str,
    name: str | None, metadata: str,
) -> None:
    """The run's row in `runs`; DuplicateRun when a concurrent import of the same content won the race."""
    ev, meta = timeline.events, timeline.meta
    n = len(ev)
    try:
        conn.execute(
            "INSERT INTO runs (id, name, source, format, backend, workload, variant, gpu, created,"
            " fingerprint, events, start_ns, end_ns, metadata, devices, contexts)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, name or codec.default_name(meta, str(source_path)), str(source_path or meta.source), meta.format,
             meta.backend, meta.workload, meta.variant, meta.gpu,
             datetime.now(timezone.utc).isoformat(timespec="milliseconds"), fingerprint, n,
             int(ev["start"].min()) if n else None, int(ev["end"].max()) if n else None, metadata,
             codec.infos_to_json(timeline.devices), codec.infos_to_json(timeline.contexts)),
        )
    except sqlite3.IntegrityError:  # a concurrent import of the same content won the race
        raise DuplicateRun(source_path, run_by_fingerprint(conn, fingerprint) or "?") from None


def _insert_lanes(conn: sqlite3.Connection, run_id: str, tl: Timeline, ch: Chunks) -> None:
    """Lane rows with their window bounds, from the per-chunk summaries (no pass over events)."""
    lanes = tl.lanes
    nl = len(lanes)
    lane = ch.lane.astype(np.int64)
    count = np.bincount(lane, weights=ch.n, minlength=nl).astype(np.int64)
    first = np.full(nl, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(nl, np.iinfo(np.int64).min, dtype=np.int64)
    maxdur = np.zeros(nl, dtype=np.int64)
    span = np.zeros(nl, dtype=np.int64)
    np.minimum.at(first, lane, ch.start_min)
    np.maximum.at(last, lane, ch.end_max)
    np.maximum.at(maxdur, lane, ch.max_dur)
    np.maximum.at(span, lane, ch.end_max - ch.start_min)
    names = [*LANE_COLUMNS, "events", "first_start", "last_end", "max_dur", "chunk_span"]
    arrays = [lanes[c].to_numpy() for c in LANE_COLUMNS] + [count, first, last, maxdur, span]
    insert_columns(conn, "lanes", run_id, names, arrays)


def _insert_events(conn: sqlite3.Connection, run_id: str, ch: Chunks, step: Callable[[int], None]) -> None:
    """One row per chunk, in index order (lane, start_min): B-tree appends."""
    sql = (
        "INSERT INTO events (run_id, lane, chunk, start_min, start_max, end_max, n, kinds, data)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    meta = [a.tolist() for a in (ch.lane, ch.start_min, ch.start_max, ch.end_max, ch.n, ch.kinds)]
    for lo in range(0, len(ch.blobs), _CHUNK_ROWS):
        hi = min(lo + _CHUNK_ROWS, len(ch.blobs))
        conn.executemany(sql, zip([run_id] * (hi - lo), meta[0][lo:hi], range(lo, hi), *(m[lo:hi] for m in meta[1:]),
                                  ch.blobs[lo:hi]))
        step(int(sum(meta[4][lo:hi])))


def insert_blocks(conn: sqlite3.Connection, run_id: str, blocks: pd.DataFrame) -> None:
    """The blocks as one row each (schema version 2, and blocks with a non-integer column)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(sm_blocks)")}
    for col in blocks.columns:
        if col not in have:  # schema changes are transactional in SQLite: rolled back with the run
            conn.execute(f"ALTER TABLE sm_blocks ADD COLUMN {quote(col)} {sql_type(str(blocks[col].dtype))}")
    names = ["seq", *blocks.columns]
    arrays = [np.arange(len(blocks))] + [blocks[c].to_numpy() for c in blocks.columns]
    insert_columns(conn, "sm_blocks", run_id, names, arrays)


def _insert_block_columns(conn: sqlite3.Connection, run_id: str, blocks: pd.DataFrame) -> None:
    """The blocks as one columnar blob (schema version 3: the store is marked so, in this
    transaction, for older tracelab to refuse it rather than show the run without them)."""
    for stmt in SM_BLOCK_COLUMNS_DDL:
        conn.execute(stmt)
    conn.execute(
        "UPDATE store_meta SET value = ? WHERE key = 'schema_version' AND CAST(value AS INTEGER) < ?",
        (str(STORE_SCHEMA_VERSION), STORE_SCHEMA_VERSION),
    )
    data = encode_columns([blocks[c].to_numpy() for c in blocks.columns])
    conn.execute("INSERT INTO sm_block_columns (run_id, n, data) VALUES (?, ?, ?)", (run_id, len(blocks), data))


def write_views(conn: sqlite3.Connection, rid: str, views: Mapping[str, bytes]) -> None:
    """Store (or replace) views of run `rid`; the table is created in a store written before views existed
    (schema changes are transactional)."""
    for stmt in VIEWS_DDL:
        conn.execute(stmt)
    created = conn.execute("SELECT created FROM runs WHERE id = ?", (rid,)).fetchone()[0]
    conn.executemany(
        "INSERT OR REPLACE INTO run_views (run_id, key, run_created, data) VALUES (?, ?, ?, ?)",
        ((rid, str(k), created, sqlite3.Binary(bytes(v))) for k, v in views.items()),
    )


def delete_rows(conn: sqlite3.Connection, rid: str) -> None:
    """Every row of run `rid`, in every table that holds one."""
    tables = ["events", "lanes", "strings", "sm_blocks", "runs"]
    tables += [t for t in ("run_views", "sm_block_columns") if has_table(conn, t)]
    for table in tables:
        key = "id" if table == "runs" else "run_id"
        conn.execute(f"DELETE FROM {quote(table)} WHERE {quote(key)} = ?", (rid,))
