"""The run store: Timelines in one SQLite file, by run id.

    store = Store(path)                     # creates the file if needed; BadInput if not a store
    run_id = store.import_timeline(tl, source_path=p, fingerprint=fp)   # one transaction
    tl = store.load(run_id)                 # identical Timeline
    df = store.window(run_id, t0, t1)       # events overlapping [t0, t1), by index range scans

Events are stored as per-lane columnar chunks (schema.py, chunks.py). What a write does is in writes.py,
what a read does in queries.py and window.py; this class holds the connection (one per thread) and the
transactions around them.

Re-importing the same content (same fingerprint) raises DuplicateRun carrying the existing run id;
`find_fingerprint` lets a caller check before parsing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pandas as pd
import sqlite_utils

from ..errors import DuplicateRun, StoreInterrupted
from ..model.timeline import Timeline
from . import queries, writes
from .records import RunRecord
from .schema import connect, remove_store_files
from .transaction import Transaction, store_errors
from .window import window_events


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

    def _transaction(self) -> Transaction:
        return Transaction(self.conn, self.path)

    # ---- runs ---------------------------------------------------------------------------------
    @store_errors
    def runs(self) -> list[RunRecord]:
        return queries.run_records(self.conn)

    @store_errors
    def get_run(self, run_id: str) -> RunRecord:
        return queries.run_record(self.conn, self.resolve(run_id))

    @store_errors
    def find_fingerprint(self, fingerprint: str) -> str | None:
        return queries.run_by_fingerprint(self.conn, fingerprint)

    @store_errors
    def resolve(self, run: str) -> str:
        """A run id from an id, a unique id prefix (4+ chars) or a unique name; UnknownRun otherwise."""
        return queries.resolve_run(self.conn, run)

    @store_errors
    def delete_run(self, run_id: str) -> None:
        rid = self.resolve(run_id)
        with self._transaction():
            writes.delete_rows(self.conn, rid)

    # ---- import -------------------------------------------------------------------------------
    @store_errors
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
                run_id = writes.write_run(
                    self.conn, timeline, source_path, fingerprint, name, replace, step,
                    spare=1 if callable(views) else 0,
                )
                wanted = views() if callable(views) else views
                if wanted:
                    writes.write_views(self.conn, run_id, wanted)
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

    # ---- precomputed views ------------------------------------------------------------------------
    @store_errors
    def views(self, run_id: str, keys: Iterable[str]) -> dict[str, bytes]:
        """The run's stored views among `keys` (key -> bytes; absent keys are left out): opaque blobs a
        caller stored with the run (`import_timeline(views=...)`, `put_views`) to read instead of
        recomputing them from the events. A store written before views existed has none."""
        return queries.read_views(self.conn, self.resolve(run_id), keys)

    @store_errors
    def put_views(self, run_id: str, views: Mapping[str, bytes]) -> None:
        """Store (or replace) views of an existing run, in one transaction (the table is created in a
        store that has none yet)."""
        rid = self.resolve(run_id)
        with self._transaction():
            writes.write_views(self.conn, rid, views)

    # ---- load ---------------------------------------------------------------------------------
    @store_errors
    def load(self, run_id_or_name: str) -> Timeline:
        """The stored run as the identical Timeline it was imported from."""
        return queries.load_timeline(self.conn, self.resolve(run_id_or_name), self.path)

    @store_errors
    def strings(self, run_id: str) -> tuple[str, ...]:
        return queries.read_strings(self.conn, self.resolve(run_id))

    @store_errors
    def lanes(self, run_id: str) -> pd.DataFrame:
        """The run's lane table (LANE_COLUMNS) plus events, first_start, last_end, max_dur per lane."""
        return queries.read_lanes(self.conn, self.resolve(run_id))

    # ---- window -------------------------------------------------------------------------------
    @store_errors
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
        columns = queries.chunk_columns(self.conn, rid)
        return window_events(self.conn, rid, span, columns, int(t0), int(t1), lanes, kinds, limit, self.path)
