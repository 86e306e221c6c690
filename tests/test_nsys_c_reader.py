"""The C integer-column reader (`tracelab/parsers/_sqlite_columns.c`) against the reference path
(group_concat + numpy) of `nsys_db.fetch_int_columns`: the same arrays or the same error for real and
hostile exports, the same time budget, nothing written beside the input."""

from __future__ import annotations

import dataclasses
import lzma
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
import sanitized
from hostile_util import nsys_copy, sql
from timeline_compare import assert_same_timeline

from tracelab.errors import TracelabError
from tracelab.parsers import nsys_db, nsys_read
from tracelab.parsers.detect import load_trace

needs_reader = pytest.mark.skipif(nsys_db._fast is None, reason="C reader not built")
BOTH_PATHS = [pytest.param(True, id="c-reader", marks=needs_reader), pytest.param(False, id="reference")]
DATA = Path(__file__).parent / "data"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
FIXTURES = ["nsys_mixed_small", "host_blocked_nsys", "train_plain_nsys"]


def _unpack(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    return out


def _load(path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, small_chunks: bool = False):
    """The timeline (or the error line) with or without the C reader; small_chunks reads every table
    in many rowid ranges on the query pool."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(nsys_db, "_fast", None)
        if small_chunks:
            m.setattr(nsys_db, "CHUNK_ROWS", 7)
            m.setattr(nsys_read, "PARALLEL_MIN_ROWS", 0)
        try:
            return load_trace(path)
        except TracelabError as e:
            return f"{type(e).__name__}: {e}"


_same = assert_same_timeline  # the whole Timeline, or the same error line


def _columns(path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, table: str, exprs: list[str], where=""):
    """fetch_int_columns' arrays (or the error) with or without the C reader, 3 rows per range."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(nsys_db, "_fast", None)
        m.setattr(nsys_db, "CHUNK_ROWS", 3)
        db = nsys_db.open_export(path)
        try:
            names = [f"c{i}" for i in range(len(exprs))]
            return nsys_db.fetch_int_columns(db, table, names, exprs, where)
        except TracelabError as e:
            return f"{type(e).__name__}: {e}"
        except sqlite3.Error as e:
            return f"{type(e).__name__}: {e}"
        finally:
            db.close()


def _same_columns(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype == np.int64
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        assert a[k].flags.writeable and b[k].flags.writeable


@needs_reader
@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("small_chunks", [False, True], ids=["one-range", "many-ranges"])
def test_fixtures_same_with_and_without_reader(name, small_chunks, tmp_path, monkeypatch):
    path = _unpack(name, tmp_path)
    _same(_load(path, monkeypatch, True, small_chunks), _load(path, monkeypatch, False, small_chunks))


@needs_reader
def test_reader_is_used(tmp_path, monkeypatch):
    """The fixtures are read by the C reader (no range declined), on the pool's threads too."""
    path = nsys_copy(tmp_path / "x.sqlite")
    calls: list[bool] = []
    real = nsys_db._fast.read
    monkeypatch.setattr(nsys_db._fast, "read", lambda *a: calls.append((r := real(*a)) is not None) or r)
    _load(path, monkeypatch, True, small_chunks=True)
    assert len(calls) > 100 and all(calls)


# values a hostile or post-processed export may hold where nsys writes integers
ODD_VALUES = [
    "'12'",
    "' 7'",
    "'7 '",
    "'1,2'",
    "''",
    "'abc'",
    "'99999999999999999999'",
    "3.0",
    "-0.0",
    "3.5",
    "1e300",
    "x'37'",
    "x''",
    "9223372036854775807",
    "-9223372036854775808",
    "NULL",
]


@needs_reader
@pytest.mark.parametrize(
    ("column", "value"),
    [
        (c, v)
        for c in ("start", "end", "deviceId", "greenContextId", "demangledName")
        for v in ODD_VALUES
        if not (v == "NULL" and c != "greenContextId")  # the others are NOT NULL in the schema
    ],
)
def test_odd_values_same_with_and_without_reader(value, column, tmp_path, monkeypatch):
    """A non-INTEGER value makes the C reader decline its range: the reference path then gives what
    it always gave (a value, or 'unexpected non-integer values in table ...')."""
    path = nsys_copy(tmp_path / "x.sqlite")
    sql(path, f'UPDATE {KERNEL} SET "{column}" = {value} WHERE rowid = (SELECT min(rowid) + 4 FROM {KERNEL})')
    exprs = ['"start"', nsys_db.col_or(_db_cols(path), KERNEL, column), "1 + 2", f'"{column}" * 2']
    _same_columns(_columns(path, monkeypatch, True, KERNEL, exprs), _columns(path, monkeypatch, False, KERNEL, exprs))
    _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


def _db_cols(path: Path) -> nsys_db.NsysDb:
    db = nsys_db.open_export(path)
    db.close()
    return db


@needs_reader
def test_text_in_start_is_refused_both_ways(tmp_path, monkeypatch):
    path = nsys_copy(tmp_path / "x.sqlite")
    sql(path, f"UPDATE {KERNEL} SET \"start\" = 'abc' WHERE rowid = (SELECT min(rowid) FROM {KERNEL})")
    for fast in (True, False):
        got = _columns(path, monkeypatch, fast, KERNEL, ['"start"'])
        assert got == f"TraceFormatError: {path}: unexpected non-integer values in table {KERNEL}"


@pytest.mark.parametrize("fast", BOTH_PATHS)
def test_where_and_sparse_rowids(fast, tmp_path, monkeypatch):
    """Rowids far apart (ranges cut through the b-tree) and a WHERE give the same rows both ways."""
    path = tmp_path / "x.sqlite"
    rows = [(-(2**63), 5, None), (-7, 1, 3), (0, 9, None), (2**40, 2, 8), (2**63 - 1, 4, 1)]
    rows += [(10 + i, i, i % 3 or None) for i in range(40)]
    conn = sqlite3.connect(path)
    conn.execute(f'CREATE TABLE {KERNEL} ("start" INTEGER, "end" INTEGER, "g" INTEGER)')
    conn.executemany(f'INSERT INTO {KERNEL} (rowid, "start", "g") VALUES (?, ?, ?)', rows)
    conn.commit()
    conn.close()
    monkeypatch.setattr(nsys_db, "_MAX_RANGES", 1)
    exprs = ['"start"', 'coalesce("end", "start")', 'coalesce("g", 5)', "rowid"]
    got = _columns(path, monkeypatch, fast, KERNEL, exprs, '"start" % 2 = 0')
    ref = _columns(path, monkeypatch, False, KERNEL, exprs, '"start" % 2 = 0')
    _same_columns(got, ref)
    assert list(got["c3"]) == sorted(got["c3"])  # rowid order
    assert len(got["c0"]) == sum(1 for r in rows if r[1] % 2 == 0)


@pytest.mark.parametrize("fast", BOTH_PATHS)
def test_table_without_rowid(fast, tmp_path, monkeypatch):
    path = tmp_path / "x.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f'CREATE TABLE {KERNEL} ("start" INTEGER PRIMARY KEY, "end" INTEGER) WITHOUT ROWID')
    conn.executemany(f"INSERT INTO {KERNEL} VALUES (?, ?)", [(i, i * 2 if i % 4 else None) for i in range(50)])
    conn.commit()
    conn.close()
    exprs = ['"start"', 'coalesce("end", -3)']
    _same_columns(_columns(path, monkeypatch, fast, KERNEL, exprs), _columns(path, monkeypatch, False, KERNEL, exprs))


@pytest.mark.parametrize("fast", BOTH_PATHS)
def test_time_budget_same_error(fast, tmp_path, monkeypatch):
    """Past the deadline, a read is interrupted by the progress handler and reported as over budget,
    whichever path read it."""
    path = tmp_path / "x.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f'CREATE TABLE {KERNEL} ("start" INTEGER, "end" INTEGER)')
    conn.executemany(f"INSERT INTO {KERNEL} VALUES (?, ?)", [(i, i + 1) for i in range(100_000)])
    conn.commit()
    conn.close()
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(nsys_db, "_fast", None)
        db = nsys_db.open_export(path)
        late = dataclasses.replace(db, deadline=time.monotonic() - 1).reopen()  # its connections' deadline
        try:
            with pytest.raises(sqlite3.OperationalError, match="interrupted") as exc:
                nsys_db.fetch_int_columns(late, KERNEL, ["s", "e"], ['"start"', '"end"'])
            assert "time budget" in str(nsys_db.sqlite_error(exc.value, path))
        finally:
            late.close()
            db.close()


@needs_reader
def test_reader_declines_past_deadline_and_on_errors(tmp_path):
    """The C reader itself: None past its deadline, for a statement that does not prepare, for a
    result of another width; the rows otherwise."""
    path = tmp_path / "x.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, None if i % 2 else -i) for i in range(100_000)])
    conn.commit()
    conn.close()
    fast = nsys_db._fast
    h = fast.connect(path.resolve().as_uri() + "?mode=ro&immutable=1")
    nulls = np.array([-1, 42], dtype=np.int64).tobytes()
    q = "SELECT a, b FROM t NOT INDEXED WHERE rowid >= ? AND rowid <= ?"
    n, bufs = fast.read(h, q, 1, 10**6, nulls, time.monotonic() + 60, 16)
    assert n == 100_000
    a, b = (np.frombuffer(x, dtype=np.int64) for x in bufs)
    assert (a == np.arange(n)).all() and (b[1::2] == 42).all() and (b[::2] == -a[::2]).all()
    assert fast.read(h, q, 1, 10**6, nulls, time.monotonic() - 1, 16) is None
    assert fast.read(h, "SELECT nope FROM t WHERE ? = ?", 0, 0, nulls, time.monotonic() + 60, 16) is None
    assert fast.read(h, q, 1, 10**6, nulls[:8], time.monotonic() + 60, 16) is None
    assert fast.read(h, q, 1, 10**6, b"", time.monotonic() + 60, 16) is None
    assert fast.read(h, "SELECT a, 1.5 FROM t WHERE rowid >= ? AND rowid <= ?", 1, 9, nulls, 1e18, 1) is None
    fast.close(h)
    assert fast.read(h, q, 1, 10, nulls, time.monotonic() + 60, 16) is None  # closed: declines
    fast.close(h)  # twice is harmless
    assert fast.connect((tmp_path / "missing.sqlite").resolve().as_uri() + "?mode=ro") is None
    assert not (tmp_path / "missing.sqlite").exists()


@pytest.mark.parametrize("fast", BOTH_PATHS)
def test_corrupt_pages_same_error(fast, tmp_path, monkeypatch):
    """Garbage over the kernel table's pages: the same one-line error both ways."""
    path = nsys_copy(tmp_path / "x.sqlite")
    conn = sqlite3.connect(path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNEL,)).fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page + 8 : root * page] = b"\xa5" * (page - 8)
    path.write_bytes(bytes(data))
    got = _load(path, monkeypatch, fast)
    assert got == _load(path, monkeypatch, False)
    assert isinstance(got, str) and str(path) in got


@pytest.mark.parametrize("fast", BOTH_PATHS)
def test_nothing_written_beside_the_input(fast, tmp_path, monkeypatch):
    path = nsys_copy(tmp_path / "x.sqlite")
    before = sorted(p.name for p in tmp_path.iterdir())
    _load(path, monkeypatch, fast, small_chunks=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_rowid_bounds_is_the_min_max_query(tmp_path):
    """rowid_bounds (two b-tree lookups) answers what `SELECT min(rowid), max(rowid)` (a full scan)
    answers, errors included."""
    conn = sqlite3.connect(tmp_path / "x.sqlite")
    conn.executescript(
        """
        CREATE TABLE empty (x);
        CREATE TABLE dense (x); INSERT INTO dense VALUES (1), (2), (3);
        CREATE TABLE sparse (x);
        INSERT INTO sparse (rowid, x) VALUES (-9223372036854775808, 1), (7, 2), (9223372036854775807, 3);
        CREATE TABLE named ("rowid" INTEGER, x); INSERT INTO named VALUES (5, 1), (-3, 2), (NULL, 3), ('a', 4);
        CREATE TABLE norowid (a INTEGER PRIMARY KEY, b) WITHOUT ROWID; INSERT INTO norowid VALUES (4, 1);
        """
    )
    for t in ("empty", "dense", "sparse", "named", "norowid"):
        try:
            want = conn.execute(f"SELECT min(rowid), max(rowid) FROM {t}").fetchone()
        except sqlite3.OperationalError as exc:
            with pytest.raises(sqlite3.OperationalError, match=str(exc)):
                nsys_db.rowid_bounds(conn, t)
            continue
        assert nsys_db.rowid_bounds(conn, t) == want, t
    conn.close()


READER_C = Path(__file__).resolve().parents[1] / "tracelab" / "parsers" / "_sqlite_columns.c"
_SANITIZED_CHILD = sanitized.sample_table_child("_sqlite_columns", "fast") + """
conn.close()
h = fast.connect("file:" + path + "?mode=ro&immutable=1")
nulls = (b"\\xff" * 8) * 3
q = "SELECT a, b, c FROM t NOT INDEXED WHERE rowid >= ? AND rowid <= ?"
total = 0
for hint in (1, 16, 1000, 1 << 30):
    n, bufs = fast.read(h, q, 1, 39_999, nulls, time.monotonic() + 60, hint)  # grows from the hint
    assert n == 39_999 and all(len(b) == 8 * n for b in bufs), n
    total += n
    assert fast.read(h, q, 1, 50_000, nulls, time.monotonic() + 60, hint) is None  # the text after growing
assert fast.read(h, q, 1, 50_000, nulls, time.monotonic() - 1, 1) is None
assert fast.read(h, q, 1, 10, nulls[:16], time.monotonic() + 60, 1) is None
assert fast.read(h, q, 1, 10, b"", time.monotonic() + 60, 1) is None
assert fast.read(h, "SELECT", 1, 10, nulls, time.monotonic() + 60, 1) is None
assert fast.read(h, "SELECT a, b, c FROM t WHERE rowid > ?", 1, 10, nulls, time.monotonic() + 60, 1) is None
assert fast.read(h, q, 1, 0, nulls, time.monotonic() + 60, 1) == (0, [bytearray()] * 3)
fast.close(h)
assert fast.read(h, q, 1, 10, nulls, time.monotonic() + 60, 1) is None
fast.close(h)
del h
assert fast.connect("file:" + path + "-missing?mode=ro") is None
print("read", total)
"""


@needs_reader
def test_sanitized_reader(tmp_path: Path) -> None:
    """_sqlite_columns.c built with AddressSanitizer + UBSan (halting on the first report): buffers
    grown from every hint, declines after growing, past the deadline, bad arguments, a closed handle."""
    env = sanitized.build(READER_C, tmp_path / "_sqlite_columns.so", "-lsqlite3")
    res = sanitized.run_clean(_SANITIZED_CHILD, [str(tmp_path / "_sqlite_columns.so"), str(tmp_path / "t.sqlite")], env)
    assert "read 159996" in res.stdout, res.stdout
