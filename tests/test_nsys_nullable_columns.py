"""fetch_int_columns reads a nullable column (col_or's coalesce) as group_concat of the column: ranges with
no value take the default, ranges with a value on every row are read as is, and ranges holding some NULLs
are read again with the default in their place. Checked against the same expressions fetched row by row
with sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracelab.errors import TraceFormatError
from tracelab.io.nsys.db import col_or, fetch_int_columns, open_export

ROWS = [  # (start, green, node, stream)
    (10, None, None, 7),
    (20, None, None, 7),
    (30, None, 4, None),
    (40, 2, 5, 7),
    (50, 3, None, 8),
    (60, 3, 6, 8),
    (70, None, 7, None),
]


def _export(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute(
        'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, greenContextId INTEGER, '
        "graphNodeId INTEGER, streamId INTEGER, gridX INTEGER)"
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, NULL)",
        [(s, s + 5, g, n, st) for s, g, n, st in ROWS],
    )
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 16])
def test_nullable_columns_match_a_row_by_row_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    path = _export(tmp_path / "n.sqlite")
    monkeypatch.setattr("tracelab.io.nsys.db.CHUNK_ROWS", chunk)
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    db = open_export(path)
    try:
        names = ["start", "green", "node", "stream", "grid", "where"]
        exprs = [
            '"start"',
            col_or(db, table, "greenContextId"),
            col_or(db, table, "graphNodeId", "0"),
            col_or(db, table, "streamId", "-3"),
            col_or(db, table, "gridX", "9"),  # NULL on every row
            col_or(db, table, "noSuchColumn"),  # a literal
        ]
        got = fetch_int_columns(db, table, names, exprs, where='"start" >= 20')
    finally:
        db.close()
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT start, coalesce(greenContextId, -1), coalesce(graphNodeId, 0), coalesce(streamId, -3), "
        "coalesce(gridX, 9), -1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= 20 ORDER BY rowid"
    ).fetchall()
    con.close()
    want = np.array(rows, dtype=np.int64)
    assert len(want) == 6
    for i, name in enumerate(names):
        assert got[name].dtype == np.int64
        assert got[name].tolist() == want[:, i].tolist(), name


def test_text_with_commas_beside_a_null_is_refused(tmp_path: Path) -> None:
    """A text value '1,2' and a NULL in one range join to '1,2', two numbers for two rows: the count of
    values tells them apart, and the file is refused as it was with coalesce ('1,2,-1')."""
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, greenContextId)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?)", [(1, "1,2"), (2, None)])
    con.commit()
    con.close()
    db = open_export(path)
    try:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        with pytest.raises(TraceFormatError, match="non-integer"):
            fetch_int_columns(db, table, ["start", "green"], ['"start"', col_or(db, table, "greenContextId")])
    finally:
        db.close()
