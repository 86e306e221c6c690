"""Training steps (iterations) of a Timeline, per rank.

Steps come from markers when the trace has them: host ranges named `ProfilerStep#N` (torch.profiler
schedule), or else NVTX / record_function ranges named like a step (`step 3`, `train_step`,
`iteration 12`; top-level ones only). Each step carries `source="marked"`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..model import EventKind, Timeline

StepSource = Literal["marked", "inferred"]

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
STEP_LIKE = re.compile(
    r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class Step:
    rank: int
    index: int  # 0-based, per rank, in time order
    start_ns: int
    end_ns: int
    source: StepSource


@dataclass(frozen=True)
class Steps:
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    def of_rank(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of a rank's steps, int64, sorted by start."""
        mine = [s for s in self.steps if s.rank == rank]
        starts = np.array([s.start_ns for s in mine], dtype=np.int64)
        ends = np.array([s.end_ns for s in mine], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        return starts[order], ends[order]

    def __len__(self) -> int:
        return len(self.steps)


def _ranks(timeline: Timeline) -> list[int]:
    ranks = np.unique(timeline.events["rank"].to_numpy())
    return [int(r) for r in ranks]


def _ids(strings: tuple[str, ...], pattern: re.Pattern[str]) -> np.ndarray:
    return np.fromiter((i for i, s in enumerate(strings) if pattern.search(s)), dtype=np.int64)


def marked_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-level marked steps of a rank: (start, end) sorted by start; empty when none."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    host_range = np.isin(kind, [int(EventKind.CPU_OP), int(EventKind.NVTX_RANGE)]) & (
        ev["rank"].to_numpy() == rank
    )
    names = ev["name"].to_numpy()
    for pattern in (PROFILER_STEP, STEP_LIKE):
        ids = _ids(timeline.strings, pattern)
        if ids.size == 0:
            continue
        pos = np.flatnonzero(host_range & np.isin(names, ids))
        if pos.size == 0:
            continue
        s = ev["start"].to_numpy()[pos]
        e = ev["end"].to_numpy()[pos]
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        # keep top-level ranges only (drop those inside an earlier one)
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        top = (e > prev_max) & (e > s)
        return s[top].astype(np.int64), e[top].astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty


def find_steps(timeline: Timeline) -> Steps:
    """Steps of every rank: marked ones where the trace has markers."""
    steps: list[Step] = []
    notes: list[str] = []
    for rank in _ranks(timeline):
        s, e = marked_steps(timeline, rank)
        if s.size:
            steps.extend(
                Step(rank=rank, index=i, start_ns=int(a), end_ns=int(b), source="marked")
                for i, (a, b) in enumerate(zip(s.tolist(), e.tolist(), strict=True))
            )
        else:
            notes.append(f"rank {rank}: no training steps marked (ProfilerStep#N or a step-like NVTX range)")
    return Steps(steps=tuple(steps), notes=tuple(notes))
