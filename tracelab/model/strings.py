"""Names (kernels, API calls, NVTX text, ops) are interned: events hold int32 ids into one table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class StringInterner:
    """Builds a string table. `intern_array` factorizes in pandas, so each distinct name costs one
    dict lookup, not each event."""

    def __init__(self, initial: Iterable[str] = ()) -> None:
        self._ids: dict[str, int] = {}
        self._strings: list[str] = []
        for s in initial:
            self.intern(s)

    def intern(self, s: str) -> int:
        sid = self._ids.get(s)
        if sid is None:
            sid = len(self._strings)
            self._ids[s] = sid
            self._strings.append(s)
        return sid

    def intern_array(self, values: Sequence[object] | np.ndarray | Any) -> np.ndarray:
        """Ids for each value; None / NaN map to -1."""
        import pandas as pd

        codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
        table = np.fromiter((self.intern(str(u)) for u in uniques), dtype=np.int32, count=len(uniques))
        out = np.full(len(codes), -1, dtype=np.int32)
        ok = codes >= 0
        out[ok] = table[codes[ok]]
        return out

    @property
    def strings(self) -> tuple[str, ...]:
        return tuple(self._strings)

    def __len__(self) -> int:
        return len(self._strings)


def remap_into(table: Sequence[str], index: dict[str, int], strings: list[str]) -> np.ndarray:
    """The ids of `table`'s strings in a growing string table (`strings`, `index` its string -> id), the
    new ones appended in `table`'s order; one more slot, the last, holds -1, so `remap[ids]` keeps an
    id of -1 ("no string") as -1."""
    remap = np.empty(len(table) + 1, dtype=np.int32)
    for i, s in enumerate(table):
        sid = index.get(s)
        if sid is None:
            sid = index[s] = len(strings)
            strings.append(s)
        remap[i] = sid
    remap[-1] = -1
    return remap
