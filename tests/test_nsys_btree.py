"""The b-tree page reader (`tracelab/parsers/_sqlite_btree.c`, planned by `nsys_btree.py`) against SQLite:
for every range it accepts, exactly the rows and values SQLite's query gives; a decline (None) for what
it cannot read exactly; the same Timelines as the SQLite readers on the recorded fixtures."""

from __future__ import annotations

import lzma
import random
import sqlite3
import time
from pathlib import Path

import pytest
import sanitized
from timeline_compare import assert_same_timeline

from tracelab.parsers import nsys_btree, nsys_db, nsys_read
from tracelab.parsers.detect import load_trace

needs_pages = pytest.mark.skipif(nsys_btree._pages is None or nsys_db._fast is None, reason="C readers not built")
pytestmark = needs_pages
DATA = Path(__file__).parent / "data"
FIXTURES = ["nsys_mixed_small", "host_blocked_nsys", "train_plain_nsys"]
INTS = [0, 1, -1, 7, 127, 128, -129, 255, 32767, -32768, 1 << 23, -(1 << 23), 1 << 31, -(1 << 40), 1 << 47,
        (1 << 63) - 1, -(1 << 63)]
EXPRS = [
    '"a"',
    'coalesce("a", 9)',
    'coalesce("b", "a")',
    "CASE WHEN typeof(\"b\") = 'integer' THEN \"b\" ELSE -1 END",
    'coalesce("a", 0) + coalesce("c", 0)',
]


def _unpack(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    return out


def _make(path: Path, rows: list[tuple], extra_sql: str = "") -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER, b, c INTEGER, r REAL, s TEXT)")
    conn.executemany("INSERT INTO t (rowid, a, b, c, r, s) VALUES (?, ?, ?, ?, ?, ?)", rows)
    if extra_sql:
        conn.executescript(extra_sql)
    conn.commit()
    conn.close()


def _sqlite(path: Path, exprs: list[str], lo: int, hi: int) -> list[tuple] | str:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        cols = ", ".join(f"coalesce({e}, -1)" for e in exprs)
        return conn.execute(f"SELECT {cols} FROM t NOT INDEXED WHERE rowid >= ? AND rowid <= ?", (lo, hi)).fetchall()
    except sqlite3.Error as exc:
        return f"error: {exc}"
    finally:
        conn.close()


def _pages(path: Path, exprs: list[str], lo: int, hi: int, table: str = "t"):
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        plan = nsys_btree.page_plan(conn, str(path), table, exprs, "")
    finally:
        conn.close()
    if plan is None:
        return "no plan"
    got = nsys_btree.read_pages(plan, lo, hi, time.monotonic() + 60, 16)
    if got is None:
        return None
    n, cols = got
    assert all(len(c) == n for c in cols)
    return [tuple(int(c[i]) for c in cols) for i in range(n)]


def _rows(n: int, seed: int = 1, sparse: bool = False) -> list[tuple]:
    rnd = random.Random(seed)
    out, rowid = [], 0
    for _ in range(n):
        rowid += rnd.choice([1, 1, 1, 2, 1000, 1 << 40]) if sparse else 1
        b = rnd.choice([None, *INTS])
        out.append((rowid, rnd.choice(INTS), b, rnd.choice([None, *INTS[:12]]), 1.5, None))
    return out


@pytest.mark.parametrize("sparse", [False, True])
def test_ranges_equal_sqlite(sparse: bool, tmp_path: Path) -> None:
    """Every value width, NULLs, a 3-level tree, dense and sparse rowids, many range bounds."""
    path = tmp_path / "t.sqlite"
    rows = _rows(60_000, sparse=sparse)
    _make(path, rows)
    ids = [r[0] for r in rows]
    bounds = [(ids[0], ids[-1]), (-(1 << 63), (1 << 63) - 1), (ids[100], ids[100]), (ids[500] + 1, ids[40_000]),
              *((ids[i], ids[i + 1]) for i in range(1000, 1100)),
              (ids[-1] + 1, ids[-1] + 10), (5, 4), (ids[7], ids[59_000])]
    for lo, hi in bounds:
        for exprs in (EXPRS[:4], ['"a"'], ['"c"', '"a"'], EXPRS[4:], EXPRS[4:] + EXPRS[:1]):
            want = _sqlite(path, exprs, lo, hi)
            if any(isinstance(v, float) for row in want for v in row):  # a + c overflowed: SQLite gives REAL
                assert _pages(path, exprs, lo, hi) is None
            else:
                assert _pages(path, exprs, lo, hi) == want, (lo, hi, exprs)


def test_declines_what_it_cannot_read_exactly(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    rows = [(i, i, i, i, 1.5, None) for i in range(1, 2001)]
    rows[10] = (11, 1, "12", 1, 1.5, None)  # text in a plain column (SQLite: text, the reference decides)
    rows[20] = (21, 1, 1, 1, 1.5, "x" * 20_000)  # a record with overflow pages
    rows[30] = (31, 3.5, "text", 1, 1.5, None)  # REAL in a plain column
    rows[40] = (41, (1 << 63) - 1, 1, 1, 1.5, None)  # a + c overflows int64: SQLite gives REAL
    _make(path, rows)
    assert _pages(path, ['"b"'], 1, 11) is None
    for lo, hi in [(21, 21), (31, 31)]:
        assert _pages(path, ['"a"'], lo, hi) is None
    assert _pages(path, ['coalesce("a", 0) + coalesce("c", 0)'], 41, 41) is None
    assert _pages(path, ['"a"'], 41, 41) == _sqlite(path, ['"a"'], 41, 41)
    assert _pages(path, ['"b"'], 21, 21) is None  # the row still has overflow pages
    int_else = ["CASE WHEN typeof(\"b\") = 'integer' THEN \"b\" ELSE -1 END"]
    assert _pages(path, int_else, 25, 35) == _sqlite(path, int_else, 25, 35)  # the text b reads -1
    assert _pages(path, ['"a"'], 12, 20) == _sqlite(path, ['"a"'], 12, 20)
    # no plan: REAL affinity, the rowid alias, unknown forms, unknown columns, generated columns
    for exprs in (['"r"'], ['"nope"'], ['"a" + 1'], ["coalesce(\"a\", 'x')"], ['"rowid"']):
        assert _pages(path, exprs, 1, 10) == "no plan", exprs
    conn = sqlite3.connect(path)
    conn.executescript(
        """CREATE TABLE k (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO k VALUES (1, 2);
        CREATE TABLE w (id INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID; INSERT INTO w VALUES (1, 2);
        CREATE TABLE g (v INTEGER, x INTEGER GENERATED ALWAYS AS (v + 1) VIRTUAL, y INTEGER);
        INSERT INTO g (v, y) VALUES (1, 2);"""
    )
    conn.close()
    assert _pages(path, ['"id"'], 1, 1, "k") == "no plan"
    assert _pages(path, ['"v"'], 1, 1, "k") == [(2,)]
    assert _pages(path, ['"v"'], 1, 1, "w") == "no plan"
    assert _pages(path, ['"y"'], 1, 1, "g") == "no plan"


def test_short_records_decline(tmp_path: Path) -> None:
    """Rows written before ALTER TABLE ADD COLUMN lack the field: SQLite gives the DEFAULT, the reader declines."""
    path = tmp_path / "t.sqlite"
    _make(path, [(i, i, i, i, 1.5, None) for i in range(1, 101)], "ALTER TABLE t ADD COLUMN d INTEGER DEFAULT 5;"
          "INSERT INTO t (rowid, a, d) VALUES (200, 1, 6);")
    assert _pages(path, ['"d"'], 1, 100) is None
    assert _pages(path, ['"d"'], 200, 200) == [(6,)] == _sqlite(path, ['"d"'], 200, 200)


def test_wal_file_declines(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    _make(path, [(i, i, i, i, 1.5, None) for i in range(1, 101)], "PRAGMA journal_mode=WAL;")
    assert _pages(path, ['"a"'], 1, 100) is None


def test_corrupt_pages_decline_or_agree(tmp_path: Path) -> None:
    """Random bytes over random pages: each range the reader accepts is what SQLite reads (without error)."""
    base = tmp_path / "base.sqlite"
    _make(base, _rows(20_000, seed=3))
    data = base.read_bytes()
    page = 4096
    rnd = random.Random(7)
    accepted = 0
    for trial in range(150):
        bad = bytearray(data)
        for _ in range(rnd.choice([1, 1, 4])):
            pg = rnd.randrange(1, len(data) // page)
            at = pg * page + rnd.randrange(page)
            for k in range(rnd.choice([1, 2, 8])):
                if at + k < len(bad):
                    bad[at + k] = rnd.randrange(256)
        path = tmp_path / f"c{trial % 3}.sqlite"
        path.write_bytes(bytes(bad))
        got = _pages(path, EXPRS[:4], 1, 20_000)
        if got is None or got == "no plan":
            continue
        accepted += 1
        assert got == _sqlite(path, EXPRS[:4], 1, 20_000), trial
    assert accepted > 10


@pytest.mark.parametrize("name", FIXTURES)
def test_fixtures_same_timeline_and_pages_used(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded exports give the same Timeline with the page reader, the SQLite C reader alone and the
    reference path, in many small ranges on the query pool; the page reader accepts every range it is given."""
    path = _unpack(name, tmp_path)
    monkeypatch.setattr(nsys_db, "CHUNK_ROWS", 7)
    monkeypatch.setattr(nsys_read, "PARALLEL_MIN_ROWS", 0)
    calls: list[bool] = []
    real = nsys_btree._pages

    class Counting:
        @staticmethod
        def read(*a):
            r = real.read(*a)
            calls.append(r is not None)
            return r

    monkeypatch.setattr(nsys_btree, "_pages", Counting)
    pages = load_trace(path)
    assert len(calls) > 20 and all(calls)
    monkeypatch.setattr(nsys_btree, "_pages", None)
    assert_same_timeline(pages, load_trace(path))
    monkeypatch.setattr(nsys_db, "_fast", None)
    assert_same_timeline(pages, load_trace(path))


READER_C = Path(__file__).resolve().parents[1] / "tracelab" / "parsers" / "_sqlite_btree.c"
_SANITIZED_CHILD = sanitized.sample_table_child("_sqlite_btree", "pages") + """
import random
root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
conn.close()
spec = b"".join(int(v).to_bytes(8, sys.byteorder, signed=True) for v in (0, 0, 0, -1, 0, 1, 1, -1, 3, 0, 2, -1))
total = 0
for hint in (1, 16, 1000, 1 << 30):
    n, bufs = pages.read(path, root, 1, 39_999, spec, time.monotonic() + 60, hint)
    assert n == 39_999 and all(memoryview(b).nbytes == 8 * n for b in bufs), n
    views = [memoryview(b) for b in bufs]
    del bufs  # each view keeps its column alive: the values stay readable (ASan would catch a free)
    assert [int.from_bytes(v[8 * k : 8 * k + 8], sys.byteorder, signed=True) for v in views for k in (0, n - 1)]
    views[0][:8] = views[0][8:16]  # writable, like the bytearray it replaced
    del views
    total += n
    assert pages.read(path, root, 1, 50_000, spec, time.monotonic() + 60, hint) is None  # the text b
assert pages.read(path, root, 1, 50_000, spec, time.monotonic() - 1, 1) is None
assert pages.read(path, root, 1, 10, spec[:16], time.monotonic() + 60, 1) is None
assert pages.read(path, root, 1, 10, b"", time.monotonic() + 60, 1) is None
assert pages.read(path, 10**6, 1, 10, spec, time.monotonic() + 60, 1) is None
assert pages.read(path + "-missing", root, 1, 10, spec, time.monotonic() + 60, 1) is None
empty = pages.read(path, root, 1, 0, spec, time.monotonic() + 60, 1)
assert empty[0] == 0 and [bytes(memoryview(b)) for b in empty[1]] == [b""] * 3
data = open(path, "rb").read()
rnd = random.Random(5)
for trial in range(300):
    bad = bytearray(data)
    for _ in range(rnd.choice([1, 3, 20])):
        bad[rnd.randrange(100, len(bad))] = rnd.randrange(256)
    open(path + ".bad", "wb").write(bytes(bad))
    pages.read(path + ".bad", root, 1, 39_999, spec, time.monotonic() + 60, 64)
print("read", total)
"""


def test_sanitized_reader(tmp_path: Path) -> None:
    """_sqlite_btree.c built with AddressSanitizer + UBSan (halting on the first report): buffers grown
    from every hint, declines, bad arguments, and hundreds of corrupted files."""
    env = sanitized.build(READER_C, tmp_path / "_sqlite_btree.so", "-Wall", "-Wextra")
    res = sanitized.run_clean(_SANITIZED_CHILD, [str(tmp_path / "_sqlite_btree.so"), str(tmp_path / "t.sqlite")], env)
    assert "read 159996" in res.stdout, res.stdout
