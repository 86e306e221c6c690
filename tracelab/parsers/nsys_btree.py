"""When the b-tree page reader (`_sqlite_btree.c`) may read a query of `fetch_int_columns`, and how.

The page reader decodes a table's records itself, so it is only asked for what it reads exactly as
SQLite returns it: columns named in the forms this parser writes (col_or's `"c"` and `coalesce("c", d)`,
`coalesce("c", "d")`, the kernel name's `CASE WHEN typeof("c") = 'integer' THEN "c" ELSE -1 END` and the
shared memory's `coalesce("c", 0) + coalesce("d", 0)`), of a rowid table without generated columns,
none of them the rowid alias or of REAL affinity (SQLite hands those back as REAL), and no WHERE. Anything
else gets no plan, and SQLite reads it (the C column reader, then the reference path); the page reader
itself declines any range it cannot read exactly (module docstring of _sqlite_btree.c), and SQLite
then reads that range.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass

import numpy as np

from ..memory import installed

try:  # optional, built by setup.py like the C column reader
    from . import _sqlite_btree as _pages
except ImportError:  # pragma: no cover - depends on the build
    _pages = None
if os.environ.get("TRACELAB_NSYS_C_READER") == "0":
    _pages = None

OP_PLAIN, OP_INT_ELSE, OP_COALESCE, OP_SUM = 0, 1, 2, 3
_ID = r'"((?:[^"]|"")+)"'
_FORMS = (
    (re.compile(rf"^{_ID}$"), OP_PLAIN),
    (re.compile(rf"^coalesce\({_ID}, (-?[0-9]+)\)$"), OP_PLAIN),
    (re.compile(rf"^coalesce\({_ID}, {_ID}\)$"), OP_COALESCE),
    (re.compile(rf"^CASE WHEN typeof\({_ID}\) = 'integer' THEN {_ID} ELSE -1 END$"), OP_INT_ELSE),
    (re.compile(rf"^coalesce\({_ID}, 0\) \+ coalesce\({_ID}, 0\)$"), OP_SUM),
)


@dataclass(frozen=True)
class PagePlan:
    """What `_sqlite_btree.read` needs for one query: the file, the table's root page and the ops."""

    path: str
    root: int
    spec: bytes


def _affinity_real(decl: str) -> bool:
    """Whether SQLite gives a column of this declared type REAL affinity (datatype3.html, 3.1)."""
    t = decl.upper()
    if "INT" in t or any(k in t for k in ("CHAR", "CLOB", "TEXT")) or "BLOB" in t or not t:
        return False
    return any(k in t for k in ("REAL", "FLOA", "DOUB"))


def _op(expr: str, fields: dict[str, int]) -> tuple[int, int, int, int] | None:
    """(op, field a, field b, null value) of one expression, or None when it is not a known form."""
    for pattern, op in _FORMS:
        m = pattern.match(expr)
        if m is None:
            continue
        groups = m.groups()
        if op in (OP_COALESCE, OP_SUM, OP_INT_ELSE):
            a, b = (fields.get(g.replace('""', '"').lower()) for g in groups)
            if a is None or b is None or (op == OP_INT_ELSE and a != b):
                return None
            return op, a, b, -1
        a = fields.get(groups[0].replace('""', '"').lower())
        if a is None:
            return None
        return op, a, a, int(groups[1]) if len(groups) > 1 else -1
    return None


def page_plan(conn: sqlite3.Connection, source: str | None, table: str, exprs: list[str], where: str) -> PagePlan | None:
    """The page reader's plan for `SELECT exprs FROM table` (every row of a rowid range), or None."""
    if _pages is None or source is None or where or not exprs:
        return None
    row = conn.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    if row is None or not isinstance(row[0], int) or row[0] < 1 or not isinstance(row[1], str):
        return None
    if "WITHOUT" in row[1].upper():  # maybe a WITHOUT ROWID table: an index b-tree the reader does not walk
        return None
    info = conn.execute(f'PRAGMA table_xinfo("{table.replace(chr(34), chr(34) * 2)}")').fetchall()
    fields: dict[str, int] = {}
    usable: set[str] = set()
    for i, (_, name, decl, _, _, pk, hidden) in enumerate(info):
        if hidden:  # a generated column: not stored where its position says
            return None
        key = str(name).lower()
        if key in fields:
            usable.discard(key)
            continue
        fields[key] = i
        if not pk and not _affinity_real(str(decl or "")):
            usable.add(key)
    fields = {k: v for k, v in fields.items() if k in usable}
    ops = [_op(e, fields) for e in exprs]
    if any(op is None for op in ops):
        return None
    return PagePlan(source, int(row[0]), np.array(ops, dtype=np.int64).tobytes())


def read_pages(plan: PagePlan, lo: int, hi: int, deadline: float, hint: int) -> tuple[int, list[np.ndarray]] | None:
    """Rows lo..hi (rowids) of the planned query as int64 arrays, or None (declined: read it through SQLite)."""
    if _pages is None:
        return None
    # in blocks of the reused-pages cache when this thread uses it (tracelab.memory)
    got = _pages.read(plan.path, plan.root, lo, hi, plan.spec, deadline, hint, installed())
    if got is None:
        return None
    return got[0], [np.frombuffer(buf, dtype=np.int64) for buf in got[1]]
