"""The run store: Timelines in one SQLite file, by run id.

    store = Store(path)                     # creates the file if needed; BadInput if not a store
    run_id = store.import_timeline(tl, source_path=p, fingerprint=fp)   # one transaction
    tl = store.load(run_id)                 # identical Timeline
    df = store.window(run_id, t0, t1)       # events overlapping [t0, t1), by index range scans

Events are stored as per-lane columnar chunks (schema.py, chunks.py).

Re-importing the same content (same fingerprint) raises DuplicateRun carrying the existing run id;
`find_fingerprint` lets a caller check before parsing.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import sqlite_utils

from ..errors import BadInput, DuplicateRun, StoreError, StoreInterrupted, UnknownRun
from ..model.timeline import EVENT_COLUMNS, LANE_COLUMNS, Timeline
from . import codec
from .bulk import fetch_matrix, insert_columns
from .chunks import Chunks, complete, decode, decode_columns, encode, encode_columns
from .records import RunRecord
from .schema import (
    EVENT_FIELDS,
    SM_BLOCK_COLUMNS_DDL,
    STORE_SCHEMA_VERSION,
    VIEWS_DDL,
    connect,
    describe_sqlite_error,
    is_environment_error,
    quote,
    remove_store_files,
    sql_type,
)
from .window import window_events

_RUN_COLS = ", ".join(
    quote(c)
    for c in (
        "id", "name", "source", "format", "backend", "workload", "variant", "gpu", "created",
        "fingerprint", "events", "start_ns", "end_ns", "metadata", "devices",
    )
)  # fmt: skip
CHUNK_COLUMNS = ("seq", *EVENT_FIELDS)  # what each event chunk holds, in order (the lane is the row's)
_CHUNK_ROWS = 64  # chunks per executemany batch (and per progress step)


def _store_errors(method: Callable) -> Callable:
    """SQLite errors of the store's media or of another process (read-only, disk full, I/O, locked)
    become StoreError: one line naming the store file, exit 2."""

    @functools.wraps(method)
    def wrapper(self: Store, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as e:
            if not is_environment_error(e):
                raise
            raise StoreError(describe_sqlite_error(e), self.path) from None

    return wrapper


class Store:
    """create: make the file when missing (writers). read_only: never write (readers: `runs`,
    `analyze RUN`); a store on read-only media or in a read-only file is opened read-only anyway,
    creating nothing beside it, and writes then fail with one clear StoreError."""

    def __init__(
        self, path: str | Path | None = None, *, create: bool = True, read_only: bool = False
    ) -> None:
        if path is None:
            from ..settings import default_db_path

            path = default_db_path()
        self.path = Path(path)
        self._local = threading.local()
        self._create = create
        self._read_only = read_only
        opened = connect(self.path, create=create, read_only=read_only)  # a bad path fails here
        self._local.conn = opened.conn
        self.created = opened.created  # this Store made the file (see discard_if_unused)
        self.read_only = opened.read_only

    # ---- connection (one per thread: the dashboard serves from several) ----------------------
    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, create=False, read_only=self._read_only).conn
        return conn

    def discard_if_unused(self) -> bool:
        """Remove the store file (and its side files) if THIS Store created it and it holds no run:
        a failed first import into a new --db leaves nothing behind. Returns whether it was removed."""
        if not self.created:
            return False
        try:
            empty = not self.conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone()
        except sqlite3.Error:  # cannot tell: keep it (another process may have imported into it)
            empty = False
        self.close()
        if empty:
            remove_store_files(self.path)
        return empty

    @property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils view of this thread's connection (for ad-hoc queries)."""
        return sqlite_utils.Database(self.conn)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self) -> Store:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- runs ---------------------------------------------------------------------------------
    @_store_errors
    def runs(self) -> list[RunRecord]:
        rows = self.conn.execute(f"SELECT {_RUN_COLS} FROM runs ORDER BY created, id").fetchall()
        return [_record(r) for r in rows]

    @_store_errors
    def get_run(self, run_id: str) -> RunRecord:
        return _record(self._run_row(self.resolve(run_id)))

    @_store_errors
    def find_fingerprint(self, fingerprint: str) -> str | None:
        row = self.conn.execute("SELECT id FROM runs WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return row[0] if row else None

    @_store_errors
    def resolve(self, run: str) -> str:
        """A run id from an id, a unique id prefix (4+ chars) or a unique name; UnknownRun otherwise."""
        run = str(run)
        c = self.conn
        if c.execute("SELECT 1 FROM runs WHERE id = ?", (run,)).fetchone():
            return run
        ids = [r[0] for r in c.execute("SELECT id FROM runs WHERE name = ? ORDER BY created", (run,))]
        if not ids and len(run) >= 4 and all(ch in "0123456789abcdef" for ch in run):
            ids = [r[0] for r in c.execute("SELECT id FROM runs WHERE id >= ? AND id < ?", (run, run + "g"))]
        if len(ids) == 1:
            return ids[0]
        if len(ids) > 1:
            raise BadInput(f"{run!r} matches {len(ids)} runs ({', '.join(ids)}); use a run id")
        raise UnknownRun(run)

    @_store_errors
    def delete_run(self, run_id: str) -> None:
        rid = self.resolve(run_id)
        with self._transaction():
            self._delete_rows(rid)

    def _delete_rows(self, rid: str) -> None:
        tables = ["events", "lanes", "strings", "sm_blocks", "runs"]
        tables += [t for t in ("run_views", "sm_block_columns") if self._has_table(t)]
        for table in tables:
            key = "id" if table == "runs" else "run_id"
            self.conn.execute(f"DELETE FROM {quote(table)} WHERE {quote(key)} = ?", (rid,))

    # ---- import -------------------------------------------------------------------------------
    @_store_errors
    def import_timeline(
        self,
        timeline: Timeline,
        *,
        source_path: str | Path,
        fingerprint: str,
        name: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        replace: bool = False,
        views: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None = None,
    ) -> str:
        """Store a Timeline as a new run in ONE transaction; returns the run id. DuplicateRun if a run
        with this fingerprint exists. `progress(done, total)` is called as events are written (an
        exception raised there, or anywhere, rolls the whole import back). With replace, a run of the
        same content is replaced (same transaction; it keeps its id unless a name is given anew).
        `views` (key -> bytes) are stored with the run in the same transaction (see `views`); a callable
        is called for them once the events are written (a caller may compute them meanwhile).
        Ctrl-C that lands once COMMIT has completed raises StoreInterrupted(run_id): the run is stored."""
        existing = self.find_fingerprint(fingerprint)
        if existing and not replace:
            raise DuplicateRun(source_path, existing)
        n = len(timeline.events)
        done = 0

        def step(k: int) -> None:
            nonlocal done
            done += k
            if progress is not None:
                progress(done, n)

        tx = self._transaction()
        run_id = ""
        rollback_journal = self._leave_wal()
        try:
            with tx:
                # views still being computed (a callable) take a core meanwhile
                run_id = self._write_run(
                    timeline, source_path, fingerprint, name, replace, step, spare=1 if callable(views) else 0
                )
                wanted = views() if callable(views) else views
                if wanted:
                    self._write_views(run_id, wanted)
        except KeyboardInterrupt:
            # Python delivers Ctrl-C when the C call returns, so it can land just after COMMIT: the
            # run is then stored. Ask the database rather than guess, so the CLI tells the truth.
            if self.conn.in_transaction:  # interrupted before COMMIT ran: nothing is stored
                self.conn.execute("ROLLBACK")
            elif run_id and tx.committed is not False and self._has_run(run_id):
                raise StoreInterrupted(run_id) from None
            raise
        finally:
            if rollback_journal:
                self._back_to_wal()
        return run_id

    def _leave_wal(self) -> bool:
        """Write an import through a rollback journal when no other connection has the store open:
        in WAL mode a run's new pages are written twice (into the WAL, then copied into the file by the
        checkpoint), through the journal once. SQLite refuses the switch at once while another
        connection (a dashboard) is open, and the import then goes through the WAL, which lets that
        reader go on reading. Returns whether it switched."""
        try:
            return self.conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
        except sqlite3.OperationalError:
            return False

    def _back_to_wal(self) -> None:
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error:  # a reader opened it meanwhile: the next connection switches it back
            pass

    def _has_run(self, run_id: str) -> bool:
        try:
            return self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None
        except sqlite3.Error:
            return False

    def _write_run(
        self,
        timeline: Timeline,
        source_path: str | Path,
        fingerprint: str,
        name: str | None,
        replace: bool,
        step: Callable[[int], None],
        spare: int = 0,
    ) -> str:
        """Every row of one run (inside the caller's transaction); returns its id. `spare`: cores the
        event encoder leaves to other work."""
        ev = timeline.events
        n = len(ev)
        meta = timeline.meta
        blocks = timeline.sm_blocks
        block_dtypes = {c: str(blocks[c].dtype) for c in blocks.columns} if blocks is not None else None
        # as one columnar blob when every column is an integer one (schema version 3), else as rows
        columnar = block_dtypes is not None and len(blocks) > 0 and all(
            np.dtype(t).kind in "iub" for t in block_dtypes.values()
        )
        metadata = codec.meta_to_json(
            meta,
            {
                "sm_blocks": None if columnar else block_dtypes,
                "sm_block_columns": block_dtypes if columnar else None,
                "event_columns": list(EVENT_COLUMNS),
                "chunk_columns": list(CHUNK_COLUMNS),
                "store_source_path": str(source_path),
            },
        )
        start_ns = int(ev["start"].min()) if n else None
        end_ns = int(ev["end"].max()) if n else None
        existing = self.find_fingerprint(fingerprint)
        if existing and replace:
            self._delete_rows(existing)
        run_id = self._new_run_id(fingerprint)
        try:
            self.conn.execute(
                "INSERT INTO runs (id, name, source, format, backend, workload, variant, gpu, created,"
                " fingerprint, events, start_ns, end_ns, metadata, devices, contexts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    name or codec.default_name(meta, str(source_path)),
                    str(source_path or meta.source),
                    meta.format,
                    meta.backend,
                    meta.workload,
                    meta.variant,
                    meta.gpu,
                    datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                    fingerprint,
                    n,
                    start_ns,
                    end_ns,
                    metadata,
                    codec.infos_to_json(timeline.devices),
                    codec.infos_to_json(timeline.contexts),
                ),
            )
        except sqlite3.IntegrityError:  # a concurrent import of the same content won the race
            raise DuplicateRun(source_path, self.find_fingerprint(fingerprint) or "?") from None
        self.conn.executemany(
            "INSERT INTO strings (run_id, id, value) VALUES (?, ?, ?)",
            ((run_id, i, s) for i, s in enumerate(timeline.strings)),
        )
        chunks = encode(ev, CHUNK_COLUMNS, spare=spare)
        self._insert_lanes(run_id, timeline, chunks)
        self._insert_events(run_id, chunks, step)
        if columnar:
            self._insert_block_columns(run_id, blocks)
        elif blocks is not None:
            self._insert_blocks(run_id, blocks)
        return run_id

    def _new_run_id(self, fingerprint: str) -> str:
        for rid in codec.run_id_candidates(fingerprint):
            if not self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
                return rid
        raise BadInput(f"cannot derive a free run id from fingerprint {fingerprint!r}")

    def _insert_lanes(self, run_id: str, tl: Timeline, ch: Chunks) -> None:
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
        insert_columns(self.conn, "lanes", run_id, names, arrays)

    def _insert_events(self, run_id: str, ch: Chunks, step: Callable[[int], None]) -> None:
        """One row per chunk, in index order (lane, start_min): B-tree appends."""
        sql = (
            "INSERT INTO events (run_id, lane, chunk, start_min, start_max, end_max, n, kinds, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        meta = [a.tolist() for a in (ch.lane, ch.start_min, ch.start_max, ch.end_max, ch.n, ch.kinds)]
        for lo in range(0, len(ch.blobs), _CHUNK_ROWS):
            hi = min(lo + _CHUNK_ROWS, len(ch.blobs))
            rows = zip(
                [run_id] * (hi - lo),
                *(m[lo:hi] for m in meta[:1]),
                range(lo, hi),
                *(m[lo:hi] for m in meta[1:]),
                ch.blobs[lo:hi],
            )
            self.conn.executemany(sql, rows)
            step(int(sum(meta[4][lo:hi])))

    def _insert_blocks(self, run_id: str, blocks: pd.DataFrame) -> None:
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(sm_blocks)")}
        for col in blocks.columns:
            if col not in have:  # schema changes are transactional in SQLite: rolled back with the run
                self.conn.execute(
                    f"ALTER TABLE sm_blocks ADD COLUMN {quote(col)} {sql_type(str(blocks[col].dtype))}"
                )
        names = ["seq", *blocks.columns]
        arrays = [np.arange(len(blocks))] + [blocks[c].to_numpy() for c in blocks.columns]
        insert_columns(self.conn, "sm_blocks", run_id, names, arrays)

    # ---- precomputed views ------------------------------------------------------------------------
    @_store_errors
    def views(self, run_id: str, keys: Iterable[str]) -> dict[str, bytes]:
        """The run's stored views among `keys` (key -> bytes; absent keys are left out): opaque blobs a
        caller stored with the run (`import_timeline(views=...)`, `put_views`) to read instead of
        recomputing them from the events. A store written before views existed has none."""
        rid = self.resolve(run_id)
        keys = list(keys)
        if not keys or not self._has_table("run_views"):
            return {}
        marks = ", ".join("?" * len(keys))
        rows = self.conn.execute(
            "SELECT v.key, v.data FROM run_views v JOIN runs r ON r.id = v.run_id AND r.created = v.run_created"
            f" WHERE v.run_id = ? AND v.key IN ({marks})",
            (rid, *keys),
        ).fetchall()
        return {k: bytes(d) for k, d in rows}

    @_store_errors
    def put_views(self, run_id: str, views: Mapping[str, bytes]) -> None:
        """Store (or replace) views of an existing run, in one transaction (the table is created in a
        store that has none yet)."""
        rid = self.resolve(run_id)
        with self._transaction():
            self._write_views(rid, views)

    def _write_views(self, rid: str, views: Mapping[str, bytes]) -> None:
        for stmt in VIEWS_DDL:  # a store written before views existed (schema changes are transactional)
            self.conn.execute(stmt)
        created = self.conn.execute("SELECT created FROM runs WHERE id = ?", (rid,)).fetchone()[0]
        self.conn.executemany(
            "INSERT OR REPLACE INTO run_views (run_id, key, run_created, data) VALUES (?, ?, ?, ?)",
            ((rid, str(k), created, sqlite3.Binary(bytes(v))) for k, v in views.items()),
        )

    def _has_table(self, name: str) -> bool:
        return bool(self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone())

    def _insert_block_columns(self, run_id: str, blocks: pd.DataFrame) -> None:
        """The blocks as one columnar blob (schema version 3: the store is marked so, in this
        transaction, for older tracelab to refuse it rather than show the run without them)."""
        for stmt in SM_BLOCK_COLUMNS_DDL:
            self.conn.execute(stmt)
        self.conn.execute(
            "UPDATE store_meta SET value = ? WHERE key = 'schema_version' AND CAST(value AS INTEGER) < ?",
            (str(STORE_SCHEMA_VERSION), STORE_SCHEMA_VERSION),
        )
        data = encode_columns([blocks[c].to_numpy() for c in blocks.columns])
        self.conn.execute(
            "INSERT INTO sm_block_columns (run_id, n, data) VALUES (?, ?, ?)", (run_id, len(blocks), data)
        )

    # ---- load ---------------------------------------------------------------------------------
    @_store_errors
    def load(self, run_id_or_name: str) -> Timeline:
        """The stored run as the identical Timeline it was imported from."""
        rid = self.resolve(run_id_or_name)
        row = self.conn.execute(
            "SELECT events, metadata, devices, contexts FROM runs WHERE id = ?", (rid,)
        ).fetchone()
        n, metadata, devices, contexts = row
        meta, extra = codec.meta_from_json(metadata)
        events = self._load_events(rid, n, extra.get("chunk_columns", list(CHUNK_COLUMNS)))
        return Timeline(
            events=events,
            strings=self.strings(rid),
            lanes=self.lanes(rid)[list(LANE_COLUMNS)],
            devices=codec.devices_from_json(devices),
            meta=meta,
            contexts=codec.contexts_from_json(contexts),
            sm_blocks=(
                self._load_block_columns(rid, extra["sm_block_columns"])
                if extra.get("sm_block_columns")
                else self._load_blocks(rid, extra.get("sm_blocks"))
            ),
        )

    def _load_events(self, rid: str, n: int, columns: list[str]) -> pd.DataFrame:
        """Decode every chunk of the run and scatter it to its rows (seq) of Timeline.events."""
        data = {c: np.empty(n, dtype=t) for c, t in EVENT_COLUMNS.items()}
        seen = np.zeros(n, dtype=bool)
        for lane, m, blob in self.conn.execute("SELECT lane, n, data FROM events WHERE run_id = ?", (rid,)):
            try:
                cols = decode(blob, m, columns)
                seq = cols["seq"]
                if len(seq) and (seq.min() < 0 or seq.max() >= n):
                    raise ValueError("event rows out of range")
            except (zlib.error, ValueError) as e:
                raise BadInput(
                    f"corrupt store: an event chunk of run {rid} (lane {lane}) is unreadable ({e})", self.path
                ) from None
            seen[seq] = True
            for c, v in complete(cols, m, lane).items():
                data[c][seq] = v
        if not seen.all():
            raise BadInput(
                f"corrupt store: run {rid} lacks {int(n - seen.sum())} of its {n} events", self.path
            )
        return pd.DataFrame(data, copy=False)

    @_store_errors
    def strings(self, run_id: str) -> tuple[str, ...]:
        rid = self.resolve(run_id)
        return tuple(
            r[0] for r in self.conn.execute("SELECT value FROM strings WHERE run_id = ? ORDER BY id", (rid,))
        )

    @_store_errors
    def lanes(self, run_id: str) -> pd.DataFrame:
        """The run's lane table (LANE_COLUMNS) plus events, first_start, last_end, max_dur per lane."""
        rid = self.resolve(run_id)
        extra = {"events": "int64", "first_start": "int64", "last_end": "int64", "max_dur": "int64"}
        dtypes = {**LANE_COLUMNS, **extra}
        cols = ", ".join(quote(c) for c in dtypes)
        mat = fetch_matrix(
            self.conn, f"SELECT {cols} FROM lanes WHERE run_id = ? ORDER BY lane", (rid,), len(dtypes)
        )
        return pd.DataFrame({c: mat[:, i].astype(t) for i, (c, t) in enumerate(dtypes.items())})

    def _load_block_columns(self, rid: str, dtypes: dict[str, str]) -> pd.DataFrame:
        row = self.conn.execute("SELECT n, data FROM sm_block_columns WHERE run_id = ?", (rid,)).fetchone()
        try:
            if row is None:
                raise ValueError("missing")
            cols = decode_columns(row[1], int(row[0]), list(dtypes.values()))
        except (zlib.error, ValueError) as e:
            raise BadInput(f"corrupt store: the SM blocks of run {rid} are unreadable ({e})", self.path) from None
        return pd.DataFrame(dict(zip(dtypes, cols)), copy=False)

    def _load_blocks(self, rid: str, dtypes: dict[str, str] | None) -> pd.DataFrame | None:
        if dtypes is None:
            return None
        cols = ", ".join(quote(c) for c in dtypes) or "seq"
        rows = self.conn.execute(
            f"SELECT {cols} FROM sm_blocks WHERE run_id = ? ORDER BY seq", (rid,)
        ).fetchall()
        if not dtypes:
            return pd.DataFrame(index=pd.RangeIndex(len(rows)))
        frame = pd.DataFrame.from_records(rows, columns=list(dtypes), nrows=len(rows))
        return frame.astype(dtypes)

    # ---- window -------------------------------------------------------------------------------
    @_store_errors
    def window(
        self,
        run_id: str,
        t0: int,
        t1: int,
        lanes: Iterable[int] | None = None,
        kinds: Iterable[int] | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame:
        """Events overlapping [t0, t1) (an instant at t0 counts; an interval ending at t0 does not),
        sorted by start, indexed by their row in `load(run_id).events`; one index range scan
        per lane over the event chunks, decoded with numpy (see window.py)."""
        rid = self.resolve(run_id)
        span = dict(
            self.conn.execute("SELECT lane, chunk_span FROM lanes WHERE run_id = ?", (rid,)).fetchall()
        )
        metadata = self.conn.execute("SELECT metadata FROM runs WHERE id = ?", (rid,)).fetchone()[0]
        columns = codec.loads(metadata).get("chunk_columns", list(CHUNK_COLUMNS))
        return window_events(self.conn, rid, span, columns, int(t0), int(t1), lanes, kinds, limit, self.path)

    # ---- helpers ------------------------------------------------------------------------------
    def _run_row(self, rid: str):
        row = self.conn.execute(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise UnknownRun(rid)
        return row

    def _transaction(self):
        return _Transaction(self.conn, self.path)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt included).
    `committed`: False until COMMIT is issued, None while it runs (unknown), True once it returned."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.committed: bool | None = False

    def __enter__(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:  # read-only file, or another writer held it for 30 s
            raise StoreError(f"cannot write to the store: {describe_sqlite_error(e)}", self.path) from None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            _test_pause("before-commit")
            self.committed = None
            try:
                self.conn.execute("COMMIT")
            except BaseException:  # COMMIT failed, or Ctrl-C landed as it returned (then it is done)
                if self.conn.in_transaction:
                    self.committed = False
                    self.conn.execute("ROLLBACK")
                raise
            self.committed = True
            _test_pause("after-commit")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


# Test hook (the SIGINT-at-commit tests): with _TRACELAB_TEST_PAUSE_AT=before-commit|after-commit the
# import writes that word to _TRACELAB_TEST_PAUSE_FILE and sleeps there, so a test can send a real
# signal at that moment. Unset (always, outside those tests), it costs one dict lookup per import.
_PAUSE_AT = "_TRACELAB_TEST_PAUSE_AT"
_PAUSE_FILE = "_TRACELAB_TEST_PAUSE_FILE"


def _test_pause(stage: str) -> None:
    if os.environ.get(_PAUSE_AT) != stage:
        return
    marker = os.environ.get(_PAUSE_FILE)
    if marker:
        Path(marker).write_text(stage)
    time.sleep(30)


def _record(row) -> RunRecord:
    (
        rid,
        name,
        source,
        fmt,
        backend,
        workload,
        variant,
        gpu,
        created,
        fp,
        events,
        s,
        e,
        metadata,
        devices,
    ) = row
    meta, _ = codec.meta_from_json(metadata)
    return RunRecord(
        id=rid,
        name=name,
        source=source,
        format=fmt,
        backend=backend,
        workload=workload,
        variant=variant,
        gpu=gpu,
        created=created,
        fingerprint=fp,
        events=events,
        start_ns=s,
        end_ns=e,
        ranks=tuple(meta.ranks),
        devices=len(codec.loads(devices)),
        notes=tuple(meta.notes),
    )
