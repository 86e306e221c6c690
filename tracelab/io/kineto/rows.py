"""The events of one piece of `traceEvents`, as the Kineto parser reads them: two sources, one interface.

- `ColumnRows`: what the C scanner (`_kineto_scan.scan`) made of the piece: column buffers and a table
  of the piece's distinct strings; no Python object per event. It accepts only strictly valid input of
  the types the strict msgspec decoder takes, so its values are what that decoder would give.
- `StructRows`: the msgspec structs (strict or loose decode): the reference, used whenever the scanner
  declines a piece or is not built.

`piece_work.piece_work` asks both the same questions (categories, phases, one field over a subset of
rows), so a piece gives the same columns whichever source read it (tests/test_kineto_scan.py).
"""

from __future__ import annotations

from collections import Counter
from itertools import repeat
from operator import attrgetter
from typing import Any, Protocol

import numpy as np

from tracelab.io.kineto.columns import checked_int, col, stream_from_tid, strs, take, triples

try:  # the optional C fast path (setup.py builds it; without a compiler the parser uses msgspec alone)
    from tracelab._native._kineto_scan import scan as _scan
    from tracelab._native._kineto_scan import scan_rest as _scan_rest
except ImportError:  # pragma: no cover - depends on the build
    _scan = _scan_rest = None

PH_X, PH_INSTANT, PH_FLOW = 1, 2, 3
_PH_CODE = {"X": PH_X, "i": PH_INSTANT, "I": PH_INSTANT, "s": PH_FLOW, "f": PH_FLOW, "t": PH_FLOW}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_DTYPES = {
    "ph": np.int8, "cat": np.int32, "name": np.int32, "sync": np.int32, "pid_s": np.int32, "tid_s": np.int32,
    "ts": np.float64, "dur": np.float64,
}


_TEXT_COLUMNS = ("cat", "name", "sync", "pid_s", "tid_s")  # ids into the piece's string table (-1: none)


def scanner_available() -> bool:
    return _scan is not None


class Interner(Protocol):
    def intern(self, values: list) -> np.ndarray: ...
    def intern_table(self, ids: np.ndarray, table: list[str], used: np.ndarray | None = None) -> np.ndarray: ...


class Rows(Protocol):
    """One piece's events; `select(idx)` narrows to those rows (positions into the current rows)."""

    n: int

    def kinds(self, kind_of: dict[str, int], default: int) -> tuple[np.ndarray, set[str]]: ...
    def phases(self) -> np.ndarray: ...
    def select(self, idx: np.ndarray) -> Rows: ...
    def floats(self, field: str) -> np.ndarray: ...
    def ints(self, field: str) -> np.ndarray: ...
    def name_ids(self, interner: Interner) -> np.ndarray: ...
    def cat_ids(self, interner: Interner) -> np.ndarray: ...
    def gather_text(self) -> None: ...
    def name(self, i: int) -> str: ...
    def args(self, idx: np.ndarray) -> Args: ...
    def memory(self) -> tuple[np.ndarray, np.ndarray]: ...


MEMORY_NAME = "[memory]"
MEMORY_ARGS = ("mem_device_type", "mem_device_id", "mem_bytes", "mem_allocated", "mem_reserved", "mem_addr")
_NO_MEMORY = (np.zeros(0, dtype=np.int64), np.zeros((0, len(MEMORY_ARGS)), dtype=np.int64))


class Args(Protocol):
    """The `args` of a subset of rows."""

    def ints(self, field: str, dtype: str = "int64", idx: np.ndarray | None = None) -> np.ndarray: ...
    def triples(self, field: str, idx: np.ndarray) -> np.ndarray: ...
    def legacy_streams(self) -> np.ndarray: ...
    def sync_names(self, idx: np.ndarray) -> list: ...


# ---- msgspec structs ---------------------------------------------------------------------------------
class StructRows:
    def __init__(self, evs: list, event_type: type, empty_args: Any, loose: bool | None = None) -> None:
        self.evs = evs
        self.n = len(evs)
        self.loose = (type(evs[0]) is not event_type) if loose is None and evs else bool(loose)
        self.empty_args = empty_args
        self._cats: list | None = None
        self._names: list | None = None

    def _cat_list(self) -> list:
        if self._cats is None:
            cats = list(map(attrgetter("cat"), self.evs))
            self._cats = strs(cats) if self.loose else cats
        return self._cats

    def kinds(self, kind_of: dict[str, int], default: int) -> tuple[np.ndarray, set[str]]:
        cats = self._cat_list()
        kind = np.fromiter(map(kind_of.get, cats, repeat(default)), dtype=np.int8, count=self.n)
        return kind, set(cats)

    def phases(self) -> np.ndarray:
        phs = list(map(attrgetter("ph"), self.evs))
        if self.loose:
            phs = strs(phs)
        counts = Counter(phs)
        if counts["X"] == self.n:
            return np.full(self.n, PH_X, dtype=np.int8)
        return np.fromiter(map(_PH_CODE.get, phs, repeat(0)), dtype=np.int8, count=self.n)

    def select(self, idx: np.ndarray) -> StructRows:
        out = StructRows(take(self.evs, idx), type(None), self.empty_args, self.loose)
        if self._cats is not None:
            out._cats = take(self._cats, idx)
        if self._names is not None:
            out._names = take(self._names, idx)
        return out

    def floats(self, field: str) -> np.ndarray:
        return col(self.evs, field, "float64", checked=self.loose)

    def ints(self, field: str) -> np.ndarray:
        return col(self.evs, field, checked=self.loose)

    def _name_list(self) -> list:
        if self._names is None:
            names = list(map(attrgetter("name"), self.evs))
            self._names = strs(names) if self.loose else names
        return self._names

    def name_ids(self, interner: Interner) -> np.ndarray:
        return interner.intern(self._name_list())

    def cat_ids(self, interner: Interner) -> np.ndarray:
        return interner.intern(self._cat_list())

    def gather_text(self) -> None:
        """Read the names and categories now (a worker thread), so name_ids / cat_ids only intern."""
        self._name_list()
        self._cat_list()

    def name(self, i: int) -> str:
        return self._name_list()[i] if self._names is not None else strs([self.evs[i].name])[0]

    def memory(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the `[memory]` instants that have args, and their MEMORY_ARGS (one row each)."""
        inst = np.flatnonzero(self.phases() == PH_INSTANT)
        if not len(inst):
            return _NO_MEMORY
        names = np.array(take(self._name_list(), inst), dtype=object)
        has_args = np.fromiter((e.args is not None for e in take(self.evs, inst)), dtype=bool, count=len(inst))
        rows = inst[(names == MEMORY_NAME) & has_args]
        if not len(rows):
            return _NO_MEMORY
        args = list(map(attrgetter("args"), take(self.evs, rows)))
        vals = [col(args, f, checked=self.loose) for f in MEMORY_ARGS]
        return rows, np.stack(vals, axis=1)

    def args(self, idx: np.ndarray) -> StructArgs:
        sub = take(self.evs, idx)
        args = list(map(attrgetter("args"), sub))
        if None in args:
            args = [a if a is not None else self.empty_args for a in args]
        return StructArgs(self, idx, sub, args)


class StructArgs:
    def __init__(self, rows: StructRows, idx: np.ndarray, sub: list, args: list) -> None:
        self.rows, self.idx, self.sub, self.args, self.loose = rows, idx, sub, args, rows.loose

    def ints(self, field: str, dtype: str = "int64", idx: np.ndarray | None = None) -> np.ndarray:
        return col(self.args if idx is None else take(self.args, idx), field, dtype, checked=self.loose)

    def triples(self, field: str, idx: np.ndarray) -> np.ndarray:
        return triples(list(map(attrgetter(field), take(self.args, idx))), checked=self.loose)

    def legacy_streams(self) -> np.ndarray:
        return stream_from_tid(list(map(attrgetter("tid"), self.sub)))

    def sync_names(self, idx: np.ndarray) -> list:
        names = self.rows._name_list()
        return [getattr(self.args[i], "sync", None) or names[self.idx[i]] for i in idx.tolist()]


# ---- C scanner columns ------------------------------------------------------------------------------
def scan(piece: Any) -> ColumnRows | None:
    """The piece through the C scanner, or None (declined, or no scanner built)."""
    return scanned_rows(_scan(piece)) if _scan is not None else None


def scan_rest(piece: Any) -> ColumnRows | None:
    """`scan` of a piece that starts after the ',' that follows an element (no '['): the second half
    of a piece cut in two, scanned in place."""
    return scanned_rows(_scan_rest(piece)) if _scan_rest is not None else None


def scanned_rows(got: tuple | None) -> ColumnRows | None:
    """The rows of what the C scanner returned for a piece (None: it declined)."""
    if got is None:
        return None
    n, table, raw = got
    cols = {k: np.frombuffer(v, dtype=_DTYPES.get(k, np.int64)) for k, v in raw.items()}
    cols["grid"] = cols["grid"].reshape(n, 3)
    cols["block"] = cols["block"].reshape(n, 3)
    cols["mem"] = cols["mem"].reshape(-1, 1 + len(MEMORY_ARGS))  # (row, MEMORY_ARGS) per instant with args
    return ColumnRows(n, table, cols)


class ColumnRows:
    """The scanned columns of a piece, or of some of its rows: `sel` (positions into the piece, None for
    all) is applied to a column only when that column is read, so narrowing the rows copies nothing and
    the columns never read (grid, block, ... of the events dropped) are never gathered."""

    def __init__(
        self, n: int, table: list[str], cols: dict[str, np.ndarray], sel: np.ndarray | None = None
    ) -> None:
        self.n, self.table, self.cols, self.sel = n, table, cols, sel
        self._read: dict[str, np.ndarray] = {}
        self._used: dict[str, np.ndarray] = {}  # table entries used by the rows' names / categories

    def col(self, field: str) -> np.ndarray:
        """One column over the current rows (gathered once)."""
        v = self._read.get(field)
        if v is None:
            v = self.cols[field] if self.sel is None else self.cols[field][self.sel]
            self._read[field] = v
        return v

    def at(self, field: str, idx: np.ndarray) -> np.ndarray:
        """One column at positions idx of the current rows (a gather from the piece's column)."""
        return self.cols[field][idx if self.sel is None else self.sel[idx]]

    def kinds(self, kind_of: dict[str, int], default: int) -> tuple[np.ndarray, set[str]]:
        """Each row's kind (`kind_of` its category, else `default`) and the categories used. The lookup
        is made for the categories the rows use, not for every string of the piece's table (which holds
        the names and string pids / tids too)."""
        cat = self.col("cat")
        used = np.flatnonzero(np.bincount(cat, minlength=len(self.table)))
        cats = [self.table[i] for i in used.tolist()]
        lut = np.full(len(self.table), default, dtype=np.int8)
        lut[used] = [kind_of.get(s, default) for s in cats]
        return lut[cat], set(cats)

    def phases(self) -> np.ndarray:
        return self.col("ph")

    def select(self, idx: np.ndarray) -> ColumnRows:
        if len(idx) == self.n:
            return self
        return ColumnRows(len(idx), self.table, self.cols, idx if self.sel is None else self.sel[idx])

    def floats(self, field: str) -> np.ndarray:
        return self.col(field)

    def ints(self, field: str) -> np.ndarray:
        v = self.col(field)
        text_all = self.cols.get(field + "_s")  # pid / tid given as strings: read as kineto_columns.ints does
        if text_all is not None and text_all.max(initial=-1) >= 0:
            text = self.col(field + "_s")
            if (text >= 0).any():
                used = np.unique(text[text >= 0])
                lut = np.full(len(self.table), -1, dtype=np.int64)
                lut[used] = [checked_int(self.table[i]) for i in used.tolist()]
                v = np.where(text >= 0, lut[np.maximum(text, 0)], v)
        return v

    def name_ids(self, interner: Interner) -> np.ndarray:
        return interner.intern_table(self.col("name"), self.table, self._used.get("name"))

    def cat_ids(self, interner: Interner) -> np.ndarray:
        return interner.intern_table(self.col("cat"), self.table, self._used.get("cat"))

    def gather_text(self) -> None:
        """Gather the names and categories of the rows now (a worker thread), and which strings of the
        table they use, so name_ids / cat_ids only intern."""
        for field in ("name", "cat"):
            v = self.col(field)
            self._used[field] = np.flatnonzero(np.bincount(v, minlength=len(self.table))) if len(v) else v

    def name(self, i: int) -> str:
        return self.table[int(self.at("name", np.array([i]))[0])]

    def args(self, idx: np.ndarray) -> ColumnArgs:
        return ColumnArgs(self, idx)

    def memory(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the `[memory]` instants that have args, and their MEMORY_ARGS (the scanner keeps
        them for every instant with args; the name is checked here)."""
        assert self.sel is None
        rec = self.cols["mem"]
        if not len(rec) or MEMORY_NAME not in self.table:
            return _NO_MEMORY
        keep = self.cols["name"][rec[:, 0]] == self.table.index(MEMORY_NAME)
        return rec[keep, 0], rec[keep, 1:]


class ColumnArgs:
    def __init__(self, rows: ColumnRows, idx: np.ndarray) -> None:
        self.rows, self.idx = rows, idx

    def ints(self, field: str, dtype: str = "int64", idx: np.ndarray | None = None) -> np.ndarray:
        v = self.rows.at(field, self.idx if idx is None else self.idx[idx])
        if dtype == "int32":  # what col(..., "int32") gives: a value outside int32 is unknown
            v = np.where((v < _INT32[0]) | (v > _INT32[1]), -1, v).astype(np.int32)
        return v

    def triples(self, field: str, idx: np.ndarray) -> np.ndarray:
        v = self.rows.at(field, self.idx[idx])
        if len(v) and ((v < _INT32[0]) | (v > _INT32[1])).any():
            # kineto_columns.triples' slow path: each component |x| < 2^31, else unknown
            v = np.where(np.abs(v) < (1 << 31), v, -1)
        return v.astype(np.int32).reshape(-1, 3)

    def legacy_streams(self) -> np.ndarray:
        text = self.rows.at("tid_s", self.idx)  # the 2021 schema's tid "stream 7"
        table = self.rows.table
        return stream_from_tid([table[t] if t >= 0 else None for t in text.tolist()])

    def sync_names(self, idx: np.ndarray) -> list:
        table = self.rows.table
        sync = self.rows.at("sync", self.idx[idx]).tolist()
        name = self.rows.at("name", self.idx[idx]).tolist()
        return [(table[s] if s >= 0 else "") or table[m] for s, m in zip(sync, name)]
