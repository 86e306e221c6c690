"""The store's SQLite schema, and the check that a file is a tracelab store before we touch it.

One file holds every run. Events are stored chunked and columnar (schema version 2): each row of
`events` is one chunk of up to 4096 consecutive events of ONE lane in (start, seq) order:

    events(run_id, lane, chunk, start_min, start_max, end_max, n, kinds, data)

`data` holds the chunk's columns ("seq" = the event's row in `Timeline.events`, then every event
column but `lane`, `end` as the duration), each frame-of-reference encoded in the fewest bytes that
hold the chunk's range (chunks.py has the byte layout). `kinds` is a bit set of the chunk's event
kinds. The index (run_id, lane, start_min, chunk, end_max, kinds) serves window queries as one range
scan per lane: a chunk may overlap [t0, t1) only if t0 - lanes.chunk_span <= start_min < t1 and
end_max >= t0 (chunk_span = the lane's largest end_max - start_min). Window queries by device go
through `lanes` first (index lanes_device: run_id, device, lane): the lane implies the device.
`Store.load` decodes every chunk of a run and scatters it by seq; there is no second copy.

Stores of another schema version are refused with a clear BadInput. Schema version 3 = version 2 plus
the measured per-block SM records of a run as ONE columnar blob (`sm_block_columns`, the chunk layout of
chunks.py) instead of a row per block in `sm_blocks`. A store is marked version 3 by the first import
that writes blocks that way (older tracelab then say "upgrade tracelab" instead of silently showing no
blocks); until then it stays version 2. Both are read: a run's metadata says where its blocks are.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
from pathlib import Path

import msgspec

from ..errors import BadInput, StoreError
from ..hot_journal import RecoveryFailed, hot_journal, recovered_copy
from ..model.sm_blocks import SM_BLOCK_COLUMNS
from ..model.timeline import EVENT_COLUMNS, LANE_COLUMNS

STORE_SCHEMA_VERSION = 3  # the newest this tracelab writes (see above)
READABLE_VERSIONS = (2, 3)
CREATED_VERSION = 2  # a new store: version 3 once it holds SM blocks as columns
APPLICATION_ID = 0x54524C42  # "TRLB": marks the file as a tracelab store (PRAGMA application_id)


EVENT_FIELDS: tuple[str, ...] = tuple(c for c in EVENT_COLUMNS if c != "lane")
CHUNK_COLUMNS = ("seq", *EVENT_FIELDS)  # what each event chunk holds, in order (the lane is the row's)


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _int_cols(cols) -> str:
    return ", ".join(f"{quote(c)} INTEGER NOT NULL" for c in cols)


# Precomputed views of a run (added within schema version 2: a store without the table has no views,
# and the table is created by the first write that needs it): opaque blobs by (run, key) that a reader
# may use instead of loading the run's events, e.g. the dashboard's first timeline view. `run_created`
# is the run's `runs.created`: a view left behind by a tracelab that did not know this table (it deletes
# a run without its views) never passes for the views of a new run under the same id.
VIEWS_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS run_views (run_id TEXT NOT NULL, key TEXT NOT NULL,
        run_created TEXT NOT NULL, data BLOB NOT NULL)""",
    """CREATE UNIQUE INDEX IF NOT EXISTS run_views_key ON run_views (run_id, key)""",
)

# schema version 3: a run's SM blocks as one columnar blob (created with the first such run)
SM_BLOCK_COLUMNS_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS sm_block_columns (run_id TEXT PRIMARY KEY, n INTEGER NOT NULL,
        data BLOB NOT NULL)""",
)

DDL: tuple[str, ...] = (
    """CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        source TEXT NOT NULL,
        format TEXT NOT NULL,
        backend TEXT NOT NULL DEFAULT '',
        workload TEXT NOT NULL DEFAULT '',
        variant TEXT NOT NULL DEFAULT '',
        gpu TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL,
        fingerprint TEXT NOT NULL UNIQUE,
        events INTEGER NOT NULL,
        start_ns INTEGER,
        end_ns INTEGER,
        metadata TEXT NOT NULL,
        devices TEXT NOT NULL,
        contexts TEXT NOT NULL
    )""",
    """CREATE INDEX runs_name ON runs (name)""",
    """CREATE TABLE strings (run_id TEXT NOT NULL, id INTEGER NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (run_id, id)) WITHOUT ROWID""",
    f"""CREATE TABLE lanes (run_id TEXT NOT NULL, {_int_cols(LANE_COLUMNS)},
        events INTEGER NOT NULL, first_start INTEGER, last_end INTEGER, max_dur INTEGER NOT NULL,
        chunk_span INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, lane)) WITHOUT ROWID""",
    """CREATE INDEX lanes_device ON lanes (run_id, device, lane)""",
    # a rowid table (the blobs spill to overflow pages) with a covering index for window queries
    """CREATE TABLE events (run_id TEXT NOT NULL, lane INTEGER NOT NULL, chunk INTEGER NOT NULL,
        start_min INTEGER NOT NULL, start_max INTEGER NOT NULL, end_max INTEGER NOT NULL,
        n INTEGER NOT NULL, kinds INTEGER NOT NULL, data BLOB NOT NULL)""",
    """CREATE UNIQUE INDEX events_window ON events (run_id, lane, start_min, chunk, end_max, kinds)""",
    """CREATE TABLE sm_blocks (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    *VIEWS_DDL,
)


class Opened(msgspec.Struct, frozen=True):
    """One open connection to the store and how it was opened."""

    conn: sqlite3.Connection
    created: bool  # this call made the file (a new, empty store)
    read_only: bool  # no writes possible: read-only media, a read-only file, or asked for


def busy_timeout_s() -> float:
    """How long a writer waits for another writer's lock before "the store is locked" (default 30 s;
    TRACELAB_STORE_TIMEOUT_S overrides, the tests use 1 s)."""
    try:
        return max(0.0, float(os.environ.get("TRACELAB_STORE_TIMEOUT_S", "30")))
    except ValueError:
        return 30.0


def writable(path: Path) -> bool:
    """Whether this process may write the store file and create its WAL side files beside it (False
    on read-only media: access() reports EROFS even to root)."""
    parent = path.parent if str(path.parent) else Path(".")
    return os.access(parent, os.W_OK | os.X_OK) and (not path.exists() or os.access(path, os.W_OK))


def connect(path: Path, *, create: bool, read_only: bool = False) -> Opened:
    """Open (and, with create, initialise) the store at path. A file that is not a tracelab store
    (another SQLite database, a corrupt file, a directory) is BadInput and is left untouched.

    Reading never needs to write: when the store or its directory is not writable (read-only media,
    a file of another user) the file is opened read-only, through its existing WAL side files when a
    writer left some, else as immutable (so no -wal / -shm is created). With read_only on writable
    media the connection is an ordinary one with `PRAGMA query_only` (it removes the side files on
    close, and sees a concurrent import's commits). A new store whose initialisation fails (a full
    disk) is removed again."""
    if path.is_dir():
        raise BadInput("is a directory, not a tracelab store file", path)
    exists = path.exists()
    if not exists and (not create or read_only):
        raise BadInput("no tracelab store here (import a trace first, or pass --db)", path)
    if not exists:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store's directory: {e.strerror or e}", path) from None
    if exists and not writable(path):
        return Opened(_connect_read_only(path), created=False, read_only=True)
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_s())
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the store: {e}", path) from None
    try:
        created = _check_or_init(conn, path, create=create and not read_only)
        if read_only:
            conn.execute("PRAGMA query_only=1")
    except BaseException:
        conn.close()
        if not exists:
            remove_store_files(path)
        raise
    return Opened(conn, created=created, read_only=read_only)


_RECOVERED: dict[tuple[str, int, int, int], Path] = {}  # (store, journal size/mtime/inode) -> its copy
MAX_RECOVERED_COPY = 64 << 30


def _recovered_store(path: Path) -> Path | None:
    """A store on read-only media with a hot journal (an import killed mid-commit): the private copy,
    rolled back, that every connection of this process reads (made once, removed at exit); None when
    there is no hot journal. Opening the file itself `immutable=1` would read the killed import's
    uncommitted pages as data (a half-written run listed, other runs "malformed")."""
    journal = hot_journal(path)
    if journal is None:
        return None
    st = journal.stat()
    key = (str(path.absolute()), st.st_size, st.st_mtime_ns, st.st_ino)
    copy = _RECOVERED.get(key)
    if copy is not None and copy.exists():
        return copy
    try:
        copy, tmp = recovered_copy(path, MAX_RECOVERED_COPY)
    except RecoveryFailed as exc:
        raise StoreError(f"an import was interrupted ({journal.name} holds its uncommitted pages) and the store is "
                         f"read-only here, so SQLite cannot roll it back; {exc}", path) from None
    atexit.register(shutil.rmtree, tmp, True)
    _RECOVERED[key] = copy
    return copy


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection that creates nothing beside the file (a store with a hot journal is
    read from a private rolled-back copy: `_recovered_store`)."""
    copy = _recovered_store(path)
    if copy is not None:
        try:
            conn = sqlite3.connect(copy.as_uri() + "?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            _check_or_init(conn, path, create=False)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the store read-only: {e}", path) from None
        return conn
    uri = path.absolute().as_uri()
    side = Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
    attempts = (f"{uri}?mode=ro", f"{uri}?immutable=1") if side else (f"{uri}?immutable=1",)
    last: Exception | None = None
    for target in attempts:
        try:
            conn = sqlite3.connect(target, uri=True, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            last = e
            continue
        try:
            _check_or_init(conn, path, create=False)
            return conn
        except StoreError as e:  # e.g. mode=ro could not map a -shm it may not write: try immutable
            conn.close()
            last = e
        except BaseException:
            conn.close()
            raise
    raise StoreError(f"cannot open the store read-only: {getattr(last, 'reason', last)}", path)


def remove_store_files(path: Path) -> None:
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            p.unlink()
        except OSError:  # absent, or not ours to remove
            pass


def _check_or_init(conn: sqlite3.Connection, path: Path, *, create: bool) -> bool:
    """Check that conn is a tracelab store of our schema; initialise an empty file when create.
    Returns whether it was initialised here."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.OperationalError as e:
        if is_environment_error(e):  # read-only media, locked, I/O: the file may well be a store
            raise StoreError(f"cannot read the store: {describe_sqlite_error(e)}", path) from None
        raise BadInput(f"not a tracelab store (not a readable SQLite database: {e})", path) from None
    except sqlite3.DatabaseError as e:
        raise BadInput(f"not a tracelab store (not a readable SQLite database: {e})", path) from None
    if not tables and app_id == 0:
        if not create:
            raise BadInput("no tracelab store here (the file is an empty database)", path)
        return _init(conn, path)
    if app_id != APPLICATION_ID or "store_meta" not in tables:
        raise BadInput("not a tracelab store (a SQLite database with other tables; pass another --db)", path)
    row = conn.execute("SELECT value FROM store_meta WHERE key='schema_version'").fetchone()
    try:
        version = int(row[0]) if row else -1
    except ValueError:
        version = -1
    if version < 1:
        raise BadInput("corrupt tracelab store (no schema version)", path)
    if version not in READABLE_VERSIONS:
        todo = ("upgrade tracelab" if version > STORE_SCHEMA_VERSION
                else "re-import your traces into a new store (move this file away or pass another --db)")
        raise BadInput(f"store schema version {version}; this tracelab reads versions "
                       f"{READABLE_VERSIONS[0]}-{READABLE_VERSIONS[-1]}: {todo}", path)
    _pragmas(conn)
    return False


def _pragmas(conn: sqlite3.Connection) -> None:
    # WAL: the dashboard reads while an import writes; NORMAL: commits do not fsync (a crash can lose
    # the last import, never corrupt the file); the size limit keeps the WAL from staying huge
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA journal_size_limit=67108864")
    except sqlite3.OperationalError:  # a read-only file: reading still works, writes say why they fail
        pass


def _init(conn: sqlite3.Connection, path: Path) -> bool:
    try:
        _pragmas(conn)
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:  # another process won the race
            conn.execute("ROLLBACK")
            return _check_or_init(conn, path, create=False)
        for stmt in DDL:
            conn.execute(stmt)
        for col, dtype in SM_BLOCK_COLUMNS.items():
            conn.execute(f"ALTER TABLE sm_blocks ADD COLUMN {quote(col)} {sql_type(dtype)}")
        conn.execute("INSERT INTO store_meta VALUES ('schema_version', ?), ('created_by', 'tracelab')", (str(CREATED_VERSION),))
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("COMMIT")
    except sqlite3.Error as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(f"cannot initialise the store: {describe_sqlite_error(e)}", path) from None
    return True


# SQLite failures that come from where the store lives, not from a bug: each is exit 2, one line
_ENVIRONMENT_ERRORS: tuple[tuple[str, str], ...] = (
    ("readonly", "the store is read-only (read-only file, directory or file system)"),
    ("read-only", "the store is read-only (read-only file, directory or file system)"),
    ("disk is full", "the disk is full"),
    ("disk i/o error", "disk I/O error (full or failing disk?)"),
    ("database is locked", "the store is locked by another process (an import in progress?)"),
    ("database table is locked", "the store is locked by another process (an import in progress?)"),
    ("unable to open database file", "cannot open the store file or its WAL side files"),
    ("out of memory", "SQLite ran out of memory"),
)


def is_environment_error(exc: BaseException) -> bool:
    """A SQLite error caused by the store's media or another process (not a bug in tracelab)."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and any(k in text for k, _ in _ENVIRONMENT_ERRORS)


def describe_sqlite_error(exc: BaseException) -> str:
    """A plain-words reason for a store-side SQLite error, with SQLite's own words after it."""
    text = str(exc)
    for key, words in _ENVIRONMENT_ERRORS:
        if key in text.lower():
            return f"{words} (SQLite: {text})"
    return f"SQLite: {text}"


def sql_type(dtype: str) -> str:
    return "REAL" if dtype.startswith("float") else "TEXT" if dtype == "object" else "INTEGER"
