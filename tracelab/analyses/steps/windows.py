"""The window of each step: the one place it is chosen (issue 24). A step's window is its GPU window
(`gpu_start_ns` / `gpu_end_ns` of the step table's rows: the GPU work its host range launched), its host
range when it launched no GPU work (or when given bare steps without a GPU window)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def step_windows(steps: Sequence[Any]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{rank: (starts, ends)} of the steps, sorted by start: the one place a step's window is chosen
    (its GPU window `gpu_start_ns`/`gpu_end_ns` when it has one, else its host range)."""
    per: dict[int, list[tuple[int, int, int, int]]] = {}
    for s in steps:  # one entry per step
        g0, g1 = getattr(s, "gpu_start_ns", None), getattr(s, "gpu_end_ns", None)
        gpu = (int(g0), int(g1)) if g0 is not None and g1 is not None else (0, 0)
        per.setdefault(int(s.rank), []).append((*gpu, int(s.start_ns), int(s.end_ns)))
    return {r: chosen_windows(*np.array(v, dtype=np.int64).T) for r, v in per.items()}


def chosen_windows(g0: np.ndarray, g1: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of steps with GPU windows [g0, g1) and host ranges [s, e): the GPU window where it is
    not empty (g1 > g0), else the host range; sorted by (start, end)."""
    gpu = g1 > g0
    a, b = np.where(gpu, g0, s), np.where(gpu, g1, e)
    order = np.lexsort((b, a))
    return a[order], b[order]


def steps_spans(steps: Sequence[Any]) -> dict[int, tuple[int, int, int, int]]:
    """{rank: (gpu_lo, gpu_hi, host_lo, host_hi)} of a run of steps (all of a rank's steps, or the chosen
    ones of `--steps A:B`): the one place the time a set of steps covers is chosen (issue 24).
    [gpu_lo, gpu_hi) runs from the first step's window start to the latest window end (`step_windows`:
    the GPU window, else the host range) and bounds the GPU work (kernels, copies, memsets, SM blocks);
    [host_lo, host_hi) is the same range widened to the steps' host ranges, which bounds the host events
    (on asynchronous code the host enqueues a step before its GPU work starts: its launch calls lie before
    gpu_lo, and they stay, so that a step's GPU window can still be found from them)."""
    wins = step_windows(steps)
    host: dict[int, list[int]] = {}
    for s in steps:  # one entry per step
        h = host.setdefault(int(s.rank), [int(s.start_ns), int(s.end_ns)])
        h[0], h[1] = min(h[0], int(s.start_ns)), max(h[1], int(s.end_ns))
    out = {}
    for r, (a, b) in wins.items():
        g0, g1 = int(a.min()), int(b.max())
        out[r] = (g0, g1, min(g0, host[r][0]), max(g1, host[r][1]))
    return out
