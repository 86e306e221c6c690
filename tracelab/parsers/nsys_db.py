"""Read-only access to an Nsight Systems SQLite export: open, check, discover tables and columns,
fetch whole columns into numpy arrays.

Only this module talks to sqlite3. The file is opened with `mode=ro` through a `file:` URI, so no
journal, index or table is ever created next to or inside the user's file.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TraceFormatError

SQLITE_MAGIC = b"SQLite format 3\x00"

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


@dataclass(frozen=True)
class NsysDb:
    """An open export: the connection and, per table, its column names."""

    path: Path
    conn: sqlite3.Connection
    tables: Mapping[str, tuple[str, ...]]

    def has(self, table: str, *columns: str) -> bool:
        cols = self.tables.get(table)
        return cols is not None and all(c in cols for c in columns)

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return int(self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.conn.close()


def _check_header(path: Path) -> None:
    if not path.exists():
        raise TraceFormatError("no such file", path)
    if path.is_dir():
        raise TraceFormatError("is a directory, not an Nsight Systems SQLite export", path)
    size = path.stat().st_size
    if size == 0:
        raise TraceFormatError("empty file, not an Nsight Systems SQLite export", path)
    with path.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise TraceFormatError("not an SQLite database (expected an Nsight Systems SQLite export)", path)
    if size < 512 or size % 512:
        raise TraceFormatError(f"truncated SQLite file ({size} bytes is not a whole number of pages)", path)


def open_export(path: str | Path) -> NsysDb:
    """Open read-only and list tables/columns. Raises TraceFormatError for anything that is not a
    readable SQLite database."""
    p = Path(path)
    _check_header(p)
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"cannot open as SQLite: {exc}", p) from None
    try:
        conn.execute("PRAGMA query_only = ON")
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        tables = {n: tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')) for n in names}
    except sqlite3.Error as exc:
        conn.close()
        raise TraceFormatError(f"corrupt or truncated SQLite file ({exc})", p) from None
    return NsysDb(path=p, conn=conn, tables=tables)


def col_or(db: NsysDb, table: str, column: str, default: str = "-1") -> str:
    """SQL expression for an integer column that may be absent or NULL."""
    if column in db.columns(table):
        return f'coalesce("{column}", {default})'
    return default


CHUNK_ROWS = 2_000_000  # rows per query: bounds the size of the strings SQLite builds


def _parse_ints(text: str | None, n: int, db: NsysDb, table: str) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.fromstring(text or "", dtype=np.int64, sep=",")
    except (ValueError, TypeError):
        arr = np.zeros(0, dtype=np.int64)
    if len(arr) != n:
        raise TraceFormatError(f"unexpected non-integer values in table {table}", db.path)
    return arr


def fetch_int_columns(
    db: NsysDb, table: str, names: list[str], exprs: list[str], where: str = ""
) -> dict[str, np.ndarray]:
    """One int64 array per integer SQL expression over `table` (NULLs become -1).

    SQLite itself joins each column into one comma-separated string (group_concat) and numpy parses
    it: no Python object per value, which is several times faster than fetchall on big exports.
    All aggregates of one query visit the rows in the same order, so the columns stay aligned;
    NOT INDEXED keeps that order the rowid order whatever indexes a post-processed file carries;
    tables are read in rowid ranges of CHUNK_ROWS so no string grows past SQLite's limits."""
    aggs = ", ".join(f"group_concat(coalesce({e}, -1))" for e in exprs)
    cond = f"({where})" if where else "1"
    try:
        lo, hi = db.conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
        ranges = [(a, a + CHUNK_ROWS) for a in range(lo, hi + 1, CHUNK_ROWS)] if lo is not None else []
        sql = f'SELECT count(*), {aggs} FROM "{table}" NOT INDEXED WHERE rowid >= ? AND rowid < ? AND {cond}'
    except sqlite3.OperationalError:  # a table without rowid: one pass
        ranges = [(0, 0)]
        sql = f'SELECT count(*), {aggs} FROM "{table}" NOT INDEXED WHERE {cond} AND ? = ?'
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for a, b in ranges:
        row = db.conn.execute(sql, (a, b)).fetchone()
        n = int(row[0])
        for i in range(len(names)):
            parts[i].append(_parse_ints(row[i + 1], n, db, table))
    return {
        name: (np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64))
        for name, chunks in zip(names, parts)
    }


_SEP = "\x1e"  # record separator: joins text values inside SQLite


def fetch_texts(db: NsysDb, table: str, column: str, where: str = "") -> list[str]:
    """The non-NULL values of a text column, in rowid order (the order fetch_int_columns uses).
    Joined inside SQLite with a separator and split once in Python; if a value itself contains the
    separator, falls back to a plain fetch."""
    cond = f'({where}) AND "{column}" IS NOT NULL' if where else f'"{column}" IS NOT NULL'
    out: list[str] = []
    try:
        lo, hi = db.conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    except sqlite3.OperationalError:
        lo = None
    if lo is None:
        return [str(r[0]) for r in db.rows(f'SELECT "{column}" FROM "{table}" NOT INDEXED WHERE {cond}')]
    sql = (
        f'SELECT count(*), group_concat(CAST("{column}" AS TEXT), char(30)) FROM "{table}" NOT INDEXED '
        f"WHERE rowid >= ? AND rowid < ? AND {cond}"
    )
    for a in range(lo, hi + 1, CHUNK_ROWS):
        n, joined = db.conn.execute(sql, (a, a + CHUNK_ROWS)).fetchone()
        if not n:
            continue
        values = joined.split(_SEP)
        if len(values) != n:  # a value holds the separator
            values = [
                str(r[0])
                for r in db.rows(
                    f'SELECT "{column}" FROM "{table}" NOT INDEXED WHERE rowid >= ? AND rowid < ? AND {cond} ORDER BY rowid',
                    (a, a + CHUNK_ROWS),
                )
            ]
        out.extend(values)
    return out
