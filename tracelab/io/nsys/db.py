"""Read-only access to an Nsight Systems SQLite export: open, check, discover tables and columns,
fetch whole columns into numpy arrays.

Only this module talks to sqlite3. Nothing is ever created next to or inside the user's file:
- a rollback-journal file (what nsys writes) is opened `mode=ro&immutable=1`, so SQLite takes no lock
  and makes no `-shm` / `-wal` / journal file;
- a WAL-mode file (header bytes 18/19 = 2), which SQLite cannot read without a `-shm` beside it, and a
  gzip'd export (`.sqlite.gz`) are first copied (inflated) into a private temporary directory, under
  MAX_PRIVATE_COPY bytes, and read there.
Only real tables are read: a view named like an nsys table is refused (it could run any query).
Every query runs under a time budget (a SQLite progress handler), so no file can make a read hang.
Identifiers are always quoted with `quote_ident`; text that is not valid UTF-8 is decoded with
replacement characters.

Integer columns are read by the stdlib sqlite3 module, vectorized: SQLite joins each column of a rowid
range into one string (group_concat) and numpy parses it, with no Python object per value.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np

from tracelab.errors import TraceFormatError
from tracelab.hot_journal import RecoveryFailed, hot_journal, recovered_copy
from tracelab.io.nsys import files
from tracelab.io.nsys.files import GZIP_MAGIC, _check_header, _private_copy, _read_head

T = TypeVar("T")
BUDGET_ENV = "TRACELAB_SQLITE_BUDGET_S"
_PROGRESS_OPS = 20_000  # SQLite VM steps between budget checks


def quote_ident(name: str) -> str:
    """An SQL identifier (table or column name from the file) quoted so it can never be read as SQL."""
    return '"' + str(name).replace('"', '""') + '"'


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def read_budget_s(size: int) -> float:
    """Seconds all queries on one export may take: 60 s plus 1 s per MB (TRACELAB_SQLITE_BUDGET_S
    overrides). Real exports read at tens of MB per second, so only a hostile file reaches it."""
    env = os.environ.get(BUDGET_ENV)
    if env:
        try:
            return max(0.0, float(env))
        except ValueError:
            pass
    return 60.0 + size / 1e6

# Tables the parser reads (any subset may be present).
ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "NVTX_EVENTS",
)


class NsysDb(msgspec.Struct, frozen=True):
    """An open export: the connection and, per table, its column names. `path` is the user's file
    (named in messages); `source` is the file SQLite reads (the same file, or a private copy)."""

    path: Path
    conn: sqlite3.Connection
    tables: Mapping[str, tuple[str, ...]]
    source: Path | None = None
    uri: str = ""
    deadline: float = 0.0
    private_dir: str | None = None
    pool: QueryPool | None = None  # runs chunk queries in parallel
    notes: tuple[str, ...] = ()  # what opening it found doubtful

    def reopen(self) -> NsysDb:
        """Another connection to the same file, with the same deadline and query pool (for parallel
        readers; it does not own the private copy)."""
        return msgspec.structs.replace(self, conn=_connect(self.uri, self.path, self.deadline), private_dir=None)

    def rows_estimate(self, table: str) -> int:
        """About how many rows a table holds, without counting them: the width of its rowid range
        (nsys writes dense rowids), capped by a count when the rowids are sparse or absent."""
        if table not in self.tables:
            return 0
        t = quote_ident(table)
        try:
            lo, hi = rowid_bounds(self.conn, t)
        except sqlite3.OperationalError as exc:  # a table without rowid
            if "interrupted" in str(exc):
                raise
            return self.count(table)
        if lo is None:
            return 0
        width = hi - lo + 1
        return width if width <= 4 * CHUNK_ROWS * _MAX_RANGES else self.count(table)

    def has(self, table: str, *columns: str) -> bool:
        cols = self.tables.get(table)
        return cols is not None and all(c in cols for c in columns)

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return int(self.conn.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()[0])

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.conn.close()
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)


_READ_OTHER = (
    "StringIds",
    "ThreadNames",
    "PROCESSES",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "CUDA_GRAPH_NODE_EVENTS",
    "CUDA_GRAPH_EVENTS",
    "OSRT_API",
)


def _is_read(name: object) -> bool:
    """Whether the parser reads a table of this name (a view by that name is refused)."""
    if not isinstance(name, str):
        return False
    return name in ACTIVITY_TABLES or name in _READ_OTHER or name.startswith(("ENUM_", "TARGET_INFO_"))


def _connect(uri: str, path: Path, deadline: float) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"cannot open as SQLite: {exc}", path) from None
    conn.text_factory = _decode_text
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, _PROGRESS_OPS)
    try:
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise TraceFormatError(f"cannot open as SQLite: {exc}", path) from None
    return conn


class QueryPool:
    """Runs the chunk queries of one export on `workers` threads, each with its own read-only
    connection (same file, same deadline). sqlite3 releases the GIL while SQLite works and numpy
    while it parses, so a big table is read on every core; queries of several tables interleave,
    so no core waits for the biggest table."""

    def __init__(self, db: NsysDb, workers: int) -> None:
        self._db = db
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nsys-sql")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self._db.uri, self._db.path, self._db.deadline)
            with self._lock:
                self._conns.append(conn)
            self._local.conn = conn
        return conn

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Runs fn(connection) on a pool thread."""
        return self._pool.submit(lambda: fn(self._conn()))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


def open_export(path: str | Path) -> NsysDb:
    """Open read-only (see the module docstring) and list tables/columns. Raises TraceFormatError for
    anything that is not a readable SQLite database."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError("no such file", p)
    if p.is_dir():
        raise TraceFormatError("is a directory, not an Nsight Systems SQLite export", p)
    head = _read_head(p)
    source, private = p, None
    if head.startswith(GZIP_MAGIC):
        source, private = _private_copy(p, head)
        head = _read_head(source)
    _check_header(p, head, source.stat().st_size)
    wal_mode = len(head) > 19 and (head[18] == 2 or head[19] == 2)
    notes: tuple[str, ...] = ()
    if wal_mode and private is None:
        source, private = _private_copy(p, head)
    elif private is None and (journal := hot_journal(p)) is not None:
        # a killed (or still running) writer's uncommitted pages are in p: read a rolled-back copy
        try:
            source, private = recovered_copy(p, files.MAX_PRIVATE_COPY)
        except RecoveryFailed as exc:
            raise TraceFormatError(
                f"has a hot journal {journal.name} (uncommitted changes) and {exc}: refused", p
            ) from None
        notes = (
            (
                f"{journal.name} beside the export held uncommitted changes: read the last committed state "
                "(rolled back in a private copy; the export and its journal are untouched)"
            ),
        )
    uri = source.resolve().as_uri() + ("?mode=ro" if private else "?mode=ro&immutable=1")
    deadline = time.monotonic() + read_budget_s(source.stat().st_size)
    try:
        conn = _connect(uri, p, deadline)
    except BaseException:
        if private:
            shutil.rmtree(private, ignore_errors=True)
        raise
    db = NsysDb(path=p, conn=conn, tables={}, source=source, uri=uri, deadline=deadline, private_dir=private)
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        views = sorted(n for t, n in rows if t == "view" and _is_read(n))
        if views:
            raise TraceFormatError(
                f"{views[0]} is a view, not a table: nsys exports hold tables only, so the file is refused "
                "(a view can run any query)",
                p,
            )
        names = [n for t, n in rows if t == "table" and isinstance(n, str)]
        tables = {n: tuple(str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(n)})")) for n in names}
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        db.close()
        raise sqlite_error(exc, p) from None
    except BaseException:
        db.close()
        raise
    return msgspec.structs.replace(db, tables=tables, notes=notes)


def sqlite_error(exc: sqlite3.Error | UnicodeDecodeError, path: Path) -> TraceFormatError:
    """The one-line error for an SQLite failure while reading an export."""
    if isinstance(exc, UnicodeDecodeError):  # SQLite's own message quoted invalid UTF-8 from the file
        return TraceFormatError("corrupt SQLite file (malformed schema holding invalid UTF-8)", path)
    if isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc):
        return TraceFormatError(
            f"reading the export took longer than its time budget (${BUDGET_ENV}); refused as hostile or broken",
            path,
        )
    return TraceFormatError(f"corrupt or truncated SQLite file ({exc})", path)


def rowid_bounds(conn: sqlite3.Connection, t: str) -> tuple[int | None, int | None]:
    """(min(rowid), max(rowid)) of a table (`t` quoted), read from the two ends of its rowid b-tree.
    Two subqueries, because SQLite answers min() or max() from the b-tree only when it is alone in
    its query: `SELECT min(rowid), max(rowid)` scans every row (0.4 s per 2M rows). Raises
    sqlite3.OperationalError for a table without rowid, as that query does."""
    lo, hi = conn.execute(f"SELECT (SELECT min(rowid) FROM {t}), (SELECT max(rowid) FROM {t})").fetchone()
    return lo, hi


def col_or(db: NsysDb, table: str, column: str, default: str = "-1") -> str:
    """SQL expression for an integer column that may be absent or NULL."""
    if column in db.columns(table):
        return f"coalesce({quote_ident(column)}, {default})"
    return default


# rows per query: bounds the strings SQLite builds, and balances the threads: a range of the 19-column
# kernel table is ~0.17 s of CPU at 2^16 rows (0.7 s at 2^18, when 4 ranges held up 16 cores); the
# CPU of the whole read is the same at both (7.5 s serial for the 1M-kernel export)
CHUNK_ROWS = 1 << 16
_LITERAL = re.compile(r"^-?[0-9]+$")
_NULLABLE = re.compile(r'^coalesce\(("(?:[^"]|"")+"), (-?[0-9]+)\)$')  # what col_or writes


def _parse_ints(text: str | None, n: int, db: NsysDb, table: str) -> np.ndarray:
    arr = _ints_or_none(text or "", n) if n else np.zeros(0, dtype=np.int64)
    if arr is None:
        raise TraceFormatError(f"unexpected non-integer values in table {table}", db.path)
    return arr


def _ints_or_none(text: str, n: int) -> np.ndarray | None:
    """The n integers of a joined string, or None when it holds some other number of values."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.fromstring(text, dtype=np.int64, sep=",")
    except (ValueError, TypeError):
        return None
    return arr if len(arr) == n else None


def _column_aggregates(expr: str) -> tuple[str, int | None]:
    """The aggregate that reads one expression in a range query, and the default of a nullable column
    (col_or's coalesce over a column): such a column is read as `count(col), group_concat(col)`;
    group_concat passes over NULLs, so a range where it holds no value (nsys leaves whole columns NULL, e.g.
    greenContextId and graphNodeId without green contexts or graphs) builds no string at all and is the
    default on every row. The count says whether every row held a value (a text value holding commas
    cannot stand in for a NULL)."""
    m = _NULLABLE.match(expr)
    if m is None:
        return f", group_concat(coalesce({expr}, -1))", None
    return f", count({m.group(1)}), group_concat({m.group(1)})", int(m.group(2))


def fetch_int_columns(
    db: NsysDb, table: str, names: list[str], exprs: list[str], where: str = ""
) -> dict[str, np.ndarray]:
    """One int64 array per integer SQL expression over `table` (NULLs become -1).

    SQLite itself joins each column into one comma-separated string (group_concat) and numpy parses
    it: no Python object per value, which is several times faster than fetchall on big exports.
    All aggregates of one query visit the rows in the same order, so the columns stay aligned;
    NOT INDEXED keeps that order the rowid order whatever indexes a post-processed file carries;
    tables are read in rowid ranges of CHUNK_ROWS, so no string grows past SQLite's limits, and the
    ranges run on `db.pool`'s threads when it has one. An integer literal is not read row by row; a
    nullable column (see _column_aggregates) is its default where a range holds none of its values,
    and is read again with its default in place of NULL where a range holds some but not all."""
    consts = {name: int(e) for name, e in zip(names, exprs) if _LITERAL.match(e)}
    live = [(name, e) for name, e in zip(names, exprs) if name not in consts]
    reads = [_column_aggregates(e) for _, e in live]
    cond = f"({where})" if where else "1"
    t = quote_ident(table)
    try:
        lo, hi = rowid_bounds(db.conn, t)
        ranges = _rowid_ranges(db, t, lo, hi)
        shape = f"SELECT count(*){{}} FROM {t} NOT INDEXED WHERE rowid >= ? AND rowid <= ? AND {cond}"
    except sqlite3.OperationalError as exc:  # a table without rowid: one pass
        if "interrupted" in str(exc):
            raise
        ranges = [(0, 0)]
        shape = f"SELECT count(*){{}} FROM {t} NOT INDEXED WHERE {cond} AND ? = ?"
    sql = shape.format("".join(aggs for aggs, _ in reads))

    def chunk(conn: sqlite3.Connection, a: int, b: int) -> tuple[int, list[np.ndarray]]:
        row = conn.execute(sql, (a, b)).fetchone()
        n, j = int(row[0]), 1
        cols: list[np.ndarray | None] = []
        for _, default in reads:
            if default is None:
                cols.append(_parse_ints(row[j], n, db, table))
                j += 1
                continue
            held, text = int(row[j]), row[j + 1]
            j += 2
            if not held:  # no value in the range: the default on every row
                cols.append(np.full(n, default, dtype=np.int64))
            else:  # a value on every row: as read; else read again below, with the default for NULL
                cols.append(_ints_or_none(text, n) if held == n else None)
        mixed = [i for i, c in enumerate(cols) if c is None]
        if mixed:
            again = conn.execute(shape.format("".join(f", group_concat({live[i][1]})" for i in mixed)), (a, b))
            row = again.fetchone()
            if int(row[0]) != n:  # pragma: no cover - the file is immutable while it is read
                raise TraceFormatError(f"table {table} changed while it was read", db.path)
            for k, i in enumerate(mixed):
                cols[i] = _parse_ints(row[k + 1], n, db, table)
        return n, cols

    if db.pool is not None and len(ranges) > 1:
        futures = [db.pool.submit(functools.partial(chunk, a=a, b=b)) for a, b in ranges]
        results = [f.result() for f in futures]
    else:
        results = [chunk(db.conn, a, b) for a, b in ranges]
    n = sum(r[0] for r in results)
    out: dict[str, np.ndarray] = {}
    for name, value in consts.items():
        out[name] = np.full(n, value, dtype=np.int64)
    for i, (name, _) in enumerate(live):
        parts = [r[1][i] for r in results]
        if len(parts) == 1:
            out[name] = parts[0]
        else:
            out[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        for r in results:  # drop each chunk once joined
            r[1][i] = None
    return {name: out[name] for name in names}


_SEP = "\x1e"  # record separator: joins text values inside SQLite


def fetch_texts(db: NsysDb, table: str, column: str, where: str = "") -> list[str]:
    """The non-NULL values of a text column, in rowid order (the order fetch_int_columns uses).
    Joined inside SQLite with a separator and split once in Python; if a value itself contains the
    separator, falls back to a plain fetch."""
    t, c = quote_ident(table), quote_ident(column)
    cond = f"({where}) AND {c} IS NOT NULL" if where else f"{c} IS NOT NULL"
    out: list[str] = []
    try:
        lo, hi = rowid_bounds(db.conn, t)
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise
        lo = None
    if lo is None:
        return [str(r[0]) for r in db.rows(f"SELECT {c} FROM {t} NOT INDEXED WHERE {cond}")]
    sql = (
        f"SELECT count(*), group_concat(CAST({c} AS TEXT), char(30)) FROM {t} NOT INDEXED "
        f"WHERE rowid >= ? AND rowid <= ? AND {cond}"
    )
    for a, b in _rowid_ranges(db, t, lo, hi):
        n, joined = db.conn.execute(sql, (a, b)).fetchone()
        if not n:
            continue
        values = joined.split(_SEP)
        if len(values) != n:  # a value holds the separator
            values = [
                str(r[0])
                for r in db.rows(
                    f"SELECT {c} FROM {t} NOT INDEXED WHERE rowid >= ? AND rowid <= ? AND {cond} ORDER BY rowid",
                    (a, b),
                )
            ]
        out.extend(values)
    return out


_MAX_RANGES = 1024


def _rowid_ranges(db: NsysDb, t: str, lo: int | None, hi: int | None) -> list[tuple[int, int]]:
    """Closed rowid ranges [a, b] of about CHUNK_ROWS rows each covering [lo, hi]. Dense rowids (what
    nsys writes) give fixed-width ranges; sparse ones (rowids far apart, e.g. -2^63 and 2^63-1) are cut
    at every CHUNK_ROWS-th rowid found through the rowid b-tree, so the number of queries follows the
    number of rows, never the width of the rowid range. Bounds stay inside int64."""
    if lo is None or hi is None:
        return []
    if (hi - lo) // CHUNK_ROWS < _MAX_RANGES:
        return [(a, min(a + CHUNK_ROWS - 1, hi)) for a in range(lo, hi + 1, CHUNK_ROWS)]
    bounds = [lo]
    while True:
        row = db.conn.execute(
            f"SELECT rowid FROM {t} WHERE rowid >= ? ORDER BY rowid LIMIT 1 OFFSET {CHUNK_ROWS}", (bounds[-1],)
        ).fetchone()
        if row is None:
            break
        bounds.append(int(row[0]))
    return [(a, b - 1) for a, b in itertools.pairwise(bounds)] + [(bounds[-1], hi)]
