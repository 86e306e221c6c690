"""The differential oracle for the C scanner (tracelab/_native/_kineto_scan.c) against msgspec.

`check(piece, got)` takes one piece of `traceEvents` and what `_kineto_scan.scan(piece)` returned for it.
A decline (None) is always allowed: the parser then decodes the piece with msgspec. An accepted piece
must be one the strict msgspec decoder (`kineto_structs.STRICT`) accepts, and must give the same events:

1. field by field, from the raw column buffers (floats compared bit for bit, so -0.0 and NaN count),
   against the decoded structs, with `null` read as the Python path reads it (-1 / no triple / no sync);
2. through the `Rows` interface the parser uses (`ColumnRows` vs `StructRows`): kinds, phases, floats,
   ints (string pids included), args ints at int64 and int32, grid / block triples, legacy streams,
   sync names and interned name / category ids.

Used by the libFuzzer harness (tests/fuzz/kineto_scan_fuzz.c, driven by tests/fuzz/run_kineto_scan_fuzz.py)
and by the regression tests (tests/test_kineto_scan.py). Raises AssertionError on a difference.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgspec
import numpy as np

from tracelab.io.kineto import load as kineto
from tracelab.io.kineto import rows as kineto_rows
from tracelab.io.kineto import structs as kineto_structs
from tracelab.io.kineto.kinds import _KIND_OF
from tracelab.model import EventKind

_WIDTH = {"ph": 1, "cat": 4, "name": 4, "sync": 4, "pid_s": 4, "tid_s": 4, "grid": 24, "block": 24}
_INT_ARGS = ("device", "stream", "correlation", "context", "bytes", "registers", "shared")
_C_INT_NAME = {"registers": "registers", "shared": "shared"}


def _bits(x: float) -> Any:
    return "nan" if math.isnan(x) else struct.pack("<d", x)


def _ref_int(v: Any) -> Any:
    return -1 if v is None else v


def reference(piece: bytes) -> list | None:
    """The strict msgspec decode of the piece, or None when msgspec does not take it strictly (a
    ValidationError sends the piece to the loose decoder, a DecodeError / UnicodeDecodeError /
    RecursionError is an error the parser reports)."""
    try:
        return kineto_structs.STRICT.decode(piece)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _ref_event(e: Any) -> tuple:
    a = e.args if e.args is not None else kineto_structs.EMPTY_ARGS
    return (
        kineto_rows._PH_CODE.get(e.ph, 0),
        e.cat,
        e.name,
        a.sync,
        _ref_int(e.pid),
        _ref_int(e.tid),
        _bits(e.ts),
        _bits(e.dur),
        *(_ref_int(getattr(a, f)) for f in _INT_ARGS),
        tuple(a.grid) if a.grid is not None else (-1, -1, -1),
        tuple(a.block) if a.block is not None else (-1, -1, -1),
    )


def _scanned_events(got: tuple) -> list[tuple]:
    n, table, raw = got
    assert isinstance(n, int) and n >= 0, n
    assert isinstance(table, list) and all(type(s) is str for s in table), "string table"
    assert len(set(table)) == len(table), "the string table repeats a string"
    assert table and table[0] == "", "the string table starts with ''"
    for k, v in raw.items():
        if k == "mem":  # one record (row + the [memory] args) per instant with args, rows ascending
            rec = np.frombuffer(v, dtype=np.int64).reshape(-1, 1 + len(kineto_rows.MEMORY_ARGS))
            assert memoryview(v).readonly and len(v) == rec.nbytes
            assert ((rec[:, 0] >= 0) & (rec[:, 0] < n)).all() and (np.diff(rec[:, 0]) > 0).all(), "[memory] rows"
            continue
        assert memoryview(v).readonly and memoryview(v).nbytes == len(v) == n * _WIDTH.get(k, 8), (k, len(v), n)
    c = {k: np.frombuffer(v, dtype=kineto_rows._DTYPES.get(k, np.int64)) for k, v in raw.items()}
    for k in ("cat", "name", "sync", "pid_s", "tid_s"):
        lo = 0 if k in ("cat", "name") else -1
        assert ((c[k] >= lo) & (c[k] < len(table))).all(), f"{k}: an id outside the table"
    grid, block = c["grid"].reshape(n, 3), c["block"].reshape(n, 3)

    def ident(i: int, f: str) -> Any:
        s = int(c[f + "_s"][i])
        return table[s] if s >= 0 else int(c[f][i])

    return [
        (
            int(c["ph"][i]),
            table[c["cat"][i]],
            table[c["name"][i]],
            table[c["sync"][i]] if c["sync"][i] >= 0 else None,
            ident(i, "pid"),
            ident(i, "tid"),
            _bits(float(c["ts"][i])),
            _bits(float(c["dur"][i])),
            *(int(c[_C_INT_NAME.get(f, f)][i]) for f in _INT_ARGS),
            tuple(int(x) for x in grid[i]),
            tuple(int(x) for x in block[i]),
        )
        for i in range(n)
    ]


def _same_array(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype.kind == "f":
        assert (a.view(np.int64) == b.view(np.int64))[~(np.isnan(a) & np.isnan(b))].all(), (what, a, b)
    else:
        assert np.array_equal(a, b), (what, a, b)


def _rows_same(got: tuple, evs: list) -> None:
    cr = kineto_rows.scanned_rows(got)  # the rows the parser makes of the scan
    sr = kineto_rows.StructRows(evs, kineto_structs.Event, kineto_structs.EMPTY_ARGS)
    (r1, v1), (r2, v2) = cr.memory(), sr.memory()
    _same_array(r1.astype(np.int64), r2.astype(np.int64), "[memory] rows")
    _same_array(v1, v2, "[memory] args")
    assert cr.n == sr.n
    (k1, u1), (k2, u2) = (
        cr.kinds(_KIND_OF, int(EventKind.OTHER)),
        sr.kinds(_KIND_OF, int(EventKind.OTHER)),
    )
    _same_array(k1, k2, "kinds")
    assert u1 == u2, "categories used"
    _same_array(cr.phases(), sr.phases(), "phases")
    for f in ("ts", "dur"):
        _same_array(cr.floats(f), sr.floats(f), f)
    for f in ("pid", "tid"):
        _same_array(cr.ints(f), sr.ints(f), f)
    every = np.arange(cr.n)
    ca, sa = cr.args(every), sr.args(every)
    for f in _INT_ARGS:
        _same_array(ca.ints(f), sa.ints(f), f)
        _same_array(ca.ints(f, "int32", idx=every), sa.ints(f, "int32", idx=every), f + " int32")
    for f in ("grid", "block"):
        _same_array(ca.triples(f, every), sa.triples(f, every), f)
    _same_array(ca.legacy_streams(), sa.legacy_streams(), "legacy streams")
    assert ca.sync_names(every) == sa.sync_names(every), "sync names"
    p1, p2 = kineto._Parsed(), kineto._Parsed()
    _same_array(cr.name_ids(p1), sr.name_ids(p2), "name ids")
    _same_array(cr.cat_ids(p1), sr.cat_ids(p2), "cat ids")
    assert p1.strings == p2.strings, "interned strings"


def check(piece: bytes, got: tuple | None) -> int:
    """0: the scanner declined; 1: it accepted and agrees with msgspec. AssertionError otherwise."""
    if got is None:
        return 0
    evs = reference(piece)
    assert evs is not None, "the scanner accepted a piece the strict msgspec decoder rejects"
    assert got[0] == len(evs), ("event count", got[0], len(evs))
    mine = _scanned_events(got)
    ref = [_ref_event(e) for e in evs]
    for i, (a, b) in enumerate(zip(mine, ref)):
        assert a == b, f"event {i}: scanner {a} != msgspec {b}"
    _rows_same(got, evs)
    return 1
