"""The window of each step: the one place it is chosen (issue 24). Today a step is its host range; when
steps carry a GPU window (`gpu_start_ns` / `gpu_end_ns`), that window is taken instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def step_windows(steps: Sequence[Any]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{rank: (starts, ends)} of the steps, sorted by start: the one place a step's window is chosen
    (its GPU window `gpu_start_ns`/`gpu_end_ns` when it has one, else its host range)."""
    per: dict[int, list[tuple[int, int]]] = {}
    for s in steps:  # one entry per step
        g0, g1 = getattr(s, "gpu_start_ns", None), getattr(s, "gpu_end_ns", None)
        w = (int(g0), int(g1)) if g0 is not None and g1 is not None and g1 > g0 else (int(s.start_ns), int(s.end_ns))
        per.setdefault(int(s.rank), []).append(w)
    out = {}
    for r, ws in per.items():
        ws.sort()
        out[r] = (np.array([a for a, _ in ws], dtype=np.int64), np.array([b for _, b in ws], dtype=np.int64))
    return out
