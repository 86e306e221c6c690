"""Per-group interval math in one pass: each group's times shifted into its own band of the number line.

With every time of group g moved to `g * width + (t - lo)` (lo the smallest time of all groups, width their
whole range + 1), no interval of one group meets or touches one of another, so a union, a difference or a
covered length computed once over all the shifted intervals is, band by band, what each group's own gives
(`intervals.merge`, `subtract`, `covered_length`: the lengths are differences inside one band, exact in
integers). Many groups (ranks) then cost a few numpy calls, not a few per group. Bands stay below 2^60 (the
complements of `intervals` stand for ±infinity at ±2^61); beyond that, `Bands.of` says None and the caller
loops over its groups.
"""

from __future__ import annotations

import msgspec
import numpy as np

_LIMIT = 1 << 60


class Bands(msgspec.Struct, frozen=True):
    """The band of every group: `shift(t, band)` moves times of the groups `band` (0, 1, ...) into theirs."""

    lo: int
    width: int

    @staticmethod
    def of(n_groups: int, *times: np.ndarray) -> Bands | None:
        """Bands for n_groups groups holding every time of `times`; None when they would pass 2^60."""
        present = [t for t in times if t.size]
        if not present:
            return Bands(0, 1)
        lo = min(int(t.min()) for t in present)
        hi = max(int(t.max()) for t in present)
        width = hi - lo + 1
        if max(n_groups, 1) * width >= _LIMIT:
            return None
        return Bands(lo, width)

    def shift(self, t: np.ndarray, band: np.ndarray) -> np.ndarray:
        return t.astype(np.int64) + (band.astype(np.int64) * self.width - self.lo)


def group_index(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each value, its position in the sorted distinct `keys` and whether it is one of them."""
    if keys.size == 0:
        return np.zeros(values.size, dtype=np.int64), np.zeros(values.size, dtype=bool)
    i = np.minimum(np.searchsorted(keys, values), keys.size - 1)
    return i.astype(np.int64), keys[i] == values


def band_sums(bands: Bands, starts: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per band (0 .. n_groups-1), the sum of `values` of the intervals whose shifted `starts` (sorted, as
    a union or an intersection gives them) lie in it: exact integer sums by one cumulative sum."""
    cum = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(values, out=cum[1:])
    cut = np.searchsorted(starts, np.arange(n_groups + 1, dtype=np.int64) * bands.width, side="left")
    return cum[cut[1:]] - cum[cut[:-1]]
