"""What a critical path is (`critical_path` finds it): the categories its time falls in, its segments, one
step's path and the whole result."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

CATEGORIES = ("compute", "comm", "wait", "host", "sync", "idle")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
_HOSTGAP = len(CATEGORIES)  # host time between calls, resolved into host / idle by what the thread recorded


class Segment(msgspec.Struct, frozen=True):
    category: str
    rank: int
    start_ns: int
    end_ns: int
    name: str = ""  # the (longest) event the time belongs to ("" for links between events)

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class StepPath(msgspec.Struct, frozen=True, eq=False):
    """One step's path. Its segments are columns (category code into CATEGORIES, rank, start, end, name
    id into `strings`, -1 none); `segments` makes Segment objects when asked."""

    rank: int
    step: int
    start_ns: int
    end_ns: int
    across_ranks: bool
    cat: np.ndarray
    seg_rank: np.ndarray
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_name: np.ndarray
    strings: tuple[str, ...]
    top: tuple[tuple[str, str, int], ...] = ()  # (category, event name, ns on the path), longest first

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns

    def by_category(self) -> dict[str, int]:
        t = np.bincount(self.cat, weights=self.seg_end - self.seg_start, minlength=len(CATEGORIES))
        return {c: int(t[i]) for i, c in enumerate(CATEGORIES)}

    def segment_rows(self, idx: np.ndarray | slice = slice(None)) -> list[tuple[str, int, int, int, str]]:
        """(category, rank, start, end, name) of the segments at `idx`."""
        s = self.strings
        cols = (self.cat, self.seg_rank, self.seg_start, self.seg_end, self.seg_name)
        return [(CATEGORIES[c], r, a, b, s[n] if 0 <= n < len(s) else "")
                for c, r, a, b, n in zip(*(x[idx].tolist() for x in cols))]

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(Segment(*x) for x in self.segment_rows())


class CriticalPath(msgspec.Struct, frozen=True):
    steps: tuple[StepPath, ...]  # per rank and step
    across: tuple[StepPath, ...] = ()  # per step index, across ranks (multi-rank runs with collectives)
    notes: tuple[str, ...] = ()

    def bound_by(self, paths: Sequence[StepPath] | None = None) -> dict[str, float]:
        """Each category's share of the paths' total length (the cross-rank paths when there are, else
        the per-rank ones)."""
        paths = paths if paths is not None else (self.across or self.steps)
        tot = dict.fromkeys(CATEGORIES, 0)
        for p in paths:
            for k, v in p.by_category().items():
                tot[k] += v
        whole = sum(tot.values())
        return {k: (v / whole if whole else 0.0) for k, v in tot.items()}
