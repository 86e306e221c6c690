"""Issue 11, "SQL built from column names": every identifier that comes from the input file is quoted,
so a column name cannot inject SQL (a name holding a recursive query used to be executed)."""

from __future__ import annotations

import time

from hostile_util import nsys_copy, sql

from tracelab.io import load_trace
from tracelab.io.nsys.db import quote_ident

RECURSIVE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def test_quote_ident_doubles_quotes():
    assert quote_ident("a") == '"a"'
    assert quote_ident('pdl", (SELECT 1)) --') == '"pdl"", (SELECT 1)) --"'


def test_column_name_with_an_injected_query_is_only_a_name(tmp_path):
    """A kernel column named like a PDL flag (the parser reads such columns by name) that holds a quote
    and an endless recursive query: it is read as a column (all NULL: no PDL), the query never runs."""
    p = nsys_copy(tmp_path / "t.sqlite")
    column = 'pdl", (' + RECURSIVE + ")) --"
    sql(p, f"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN {quote_ident(column)} INTEGER;")
    t0 = time.monotonic()
    tl = load_trace(p)
    assert time.monotonic() - t0 < 15
    kernels = tl.events[tl.events["kind"] == 0]
    assert len(kernels) > 0
    baseline = load_trace(nsys_copy(tmp_path / "base.sqlite"))
    assert len(kernels) == int((baseline.events["kind"] == 0).sum())


def test_table_and_column_names_with_quotes_are_listed(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    sql(p, 'CREATE TABLE "we""ird" ("co""l" INTEGER); INSERT INTO "we""ird" VALUES (1);')
    from tracelab.io.nsys.db import open_export

    db = open_export(p)
    try:
        assert db.tables['we"ird'] == ('co"l',)
        assert db.count('we"ird') == 1
    finally:
        db.close()
