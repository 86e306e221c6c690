"""Reading the store: runs by id, prefix, name or fingerprint, their records, and a stored run back as the
identical Timeline (events scattered from their chunks, lanes, strings, SM blocks), its stored views."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import BadInput, UnknownRun
from ..model.timeline import EVENT_COLUMNS, LANE_COLUMNS, Timeline
from . import codec
from .bulk import fetch_matrix
from .chunks import complete, decode, decode_columns
from .records import RunRecord
from .schema import CHUNK_COLUMNS, quote

RUN_COLS = ", ".join(
    quote(c)
    for c in (
        "id", "name", "source", "format", "backend", "workload", "variant", "gpu", "created",
        "fingerprint", "events", "start_ns", "end_ns", "metadata", "devices",
    )
)  # fmt: skip


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone())


def run_by_fingerprint(conn: sqlite3.Connection, fingerprint: str) -> str | None:
    row = conn.execute("SELECT id FROM runs WHERE fingerprint = ?", (fingerprint,)).fetchone()
    return row[0] if row else None


def resolve_run(conn: sqlite3.Connection, run: str) -> str:
    """A run id from an id, a unique id prefix (4+ chars) or a unique name; UnknownRun otherwise."""
    run = str(run)
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run,)).fetchone():
        return run
    ids = [r[0] for r in conn.execute("SELECT id FROM runs WHERE name = ? ORDER BY created", (run,))]
    if not ids and len(run) >= 4 and all(ch in "0123456789abcdef" for ch in run):
        ids = [r[0] for r in conn.execute("SELECT id FROM runs WHERE id >= ? AND id < ?", (run, run + "g"))]
    if len(ids) == 1:
        return ids[0]
    if len(ids) > 1:
        raise BadInput(f"{run!r} matches {len(ids)} runs ({', '.join(ids)}); use a run id")
    raise UnknownRun(run)


def run_records(conn: sqlite3.Connection) -> list[RunRecord]:
    rows = conn.execute(f"SELECT {RUN_COLS} FROM runs ORDER BY created, id").fetchall()
    return [_record(r) for r in rows]


def run_record(conn: sqlite3.Connection, rid: str) -> RunRecord:
    row = conn.execute(f"SELECT {RUN_COLS} FROM runs WHERE id = ?", (rid,)).fetchone()
    if row is None:
        raise UnknownRun(rid)
    return _record(row)


def read_views(conn: sqlite3.Connection, rid: str, keys: Iterable[str]) -> dict[str, bytes]:
    """The run's stored views among `keys` (key -> bytes; absent keys are left out); {} in a store
    written before views existed."""
    keys = list(keys)
    if not keys or not has_table(conn, "run_views"):
        return {}
    marks = ", ".join("?" * len(keys))
    rows = conn.execute(
        "SELECT v.key, v.data FROM run_views v JOIN runs r ON r.id = v.run_id AND r.created = v.run_created"
        f" WHERE v.run_id = ? AND v.key IN ({marks})",
        (rid, *keys),
    ).fetchall()
    return {k: bytes(d) for k, d in rows}


def read_strings(conn: sqlite3.Connection, rid: str) -> tuple[str, ...]:
    return tuple(r[0] for r in conn.execute("SELECT value FROM strings WHERE run_id = ? ORDER BY id", (rid,)))


def read_lanes(conn: sqlite3.Connection, rid: str) -> pd.DataFrame:
    """The run's lane table (LANE_COLUMNS) plus events, first_start, last_end, max_dur per lane."""
    extra = {"events": "int64", "first_start": "int64", "last_end": "int64", "max_dur": "int64"}
    dtypes = {**LANE_COLUMNS, **extra}
    cols = ", ".join(quote(c) for c in dtypes)
    mat = fetch_matrix(conn, f"SELECT {cols} FROM lanes WHERE run_id = ? ORDER BY lane", (rid,), len(dtypes))
    return pd.DataFrame({c: mat[:, i].astype(t) for i, (c, t) in enumerate(dtypes.items())})


def chunk_columns(conn: sqlite3.Connection, rid: str) -> list[str]:
    """The columns the run's event chunks hold, in order (from its metadata)."""
    metadata = conn.execute("SELECT metadata FROM runs WHERE id = ?", (rid,)).fetchone()[0]
    return codec.loads(metadata).get("chunk_columns", list(CHUNK_COLUMNS))


def load_timeline(conn: sqlite3.Connection, rid: str, path: Path) -> Timeline:
    """The stored run `rid` as the identical Timeline it was imported from (BadInput naming the store
    `path` when a chunk is unreadable)."""
    row = conn.execute("SELECT events, metadata, devices, contexts FROM runs WHERE id = ?", (rid,)).fetchone()
    n, metadata, devices, contexts = row
    meta, extra = codec.meta_from_json(metadata)
    events = _load_events(conn, rid, n, extra.get("chunk_columns", list(CHUNK_COLUMNS)), path)
    return Timeline(
        events=events,
        strings=read_strings(conn, rid),
        lanes=read_lanes(conn, rid)[list(LANE_COLUMNS)],
        devices=codec.devices_from_json(devices),
        meta=meta,
        contexts=codec.contexts_from_json(contexts),
        sm_blocks=(
            _load_block_columns(conn, rid, extra["sm_block_columns"], path)
            if extra.get("sm_block_columns")
            else _load_blocks(conn, rid, extra.get("sm_blocks"))
        ),
    )


def _load_events(conn: sqlite3.Connection, rid: str, n: int, columns: list[str], path: Path) -> pd.DataFrame:
    """Decode every chunk of the run and scatter it to its rows (seq) of Timeline.events."""
    data = {c: np.empty(n, dtype=t) for c, t in EVENT_COLUMNS.items()}
    seen = np.zeros(n, dtype=bool)
    for lane, m, blob in conn.execute("SELECT lane, n, data FROM events WHERE run_id = ?", (rid,)):
        try:
            cols = decode(blob, m, columns)
            seq = cols["seq"]
            if len(seq) and (seq.min() < 0 or seq.max() >= n):
                raise ValueError("event rows out of range")
        except (zlib.error, ValueError) as e:
            raise BadInput(
                f"corrupt store: an event chunk of run {rid} (lane {lane}) is unreadable ({e})", path
            ) from None
        seen[seq] = True
        for c, v in complete(cols, m, lane).items():
            data[c][seq] = v
    if not seen.all():
        raise BadInput(f"corrupt store: run {rid} lacks {int(n - seen.sum())} of its {n} events", path)
    return pd.DataFrame(data, copy=False)


def _load_block_columns(conn: sqlite3.Connection, rid: str, dtypes: dict[str, str], path: Path) -> pd.DataFrame:
    row = conn.execute("SELECT n, data FROM sm_block_columns WHERE run_id = ?", (rid,)).fetchone()
    try:
        if row is None:
            raise ValueError("missing")
        cols = decode_columns(row[1], int(row[0]), list(dtypes.values()))
    except (zlib.error, ValueError) as e:
        raise BadInput(f"corrupt store: the SM blocks of run {rid} are unreadable ({e})", path) from None
    return pd.DataFrame(dict(zip(dtypes, cols)), copy=False)


def _load_blocks(conn: sqlite3.Connection, rid: str, dtypes: dict[str, str] | None) -> pd.DataFrame | None:
    if dtypes is None:
        return None
    cols = ", ".join(quote(c) for c in dtypes) or "seq"
    rows = conn.execute(f"SELECT {cols} FROM sm_blocks WHERE run_id = ? ORDER BY seq", (rid,)).fetchall()
    if not dtypes:
        return pd.DataFrame(index=pd.RangeIndex(len(rows)))
    frame = pd.DataFrame.from_records(rows, columns=list(dtypes), nrows=len(rows))
    return frame.astype(dtypes)


def _record(row) -> RunRecord:
    """A RunRecord from a row of RUN_COLS (its first 13 columns are the record's first 13 fields)."""
    meta, _ = codec.meta_from_json(row[13])
    return RunRecord(*row[:13], ranks=tuple(meta.ranks), devices=len(codec.loads(row[14])), notes=tuple(meta.notes))
