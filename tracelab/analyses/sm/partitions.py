"""SM partitions of a device: its green contexts and the SMs outside them (see `tracelab.analyses.sm.summary`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import rows_of_device
from tracelab.analyses.sm.occupancy import device_sm_count
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import sorted_unique

if TYPE_CHECKING:
    import pandas as pd

NONE_PARTITION = -1  # green_context value of work outside every green context

SM_LANE_COLUMNS: dict[str, str] = {
    "sm_first": "int32",  # first SM id of the interval (inclusive)
    "sm_last": "int32",  # last SM id (inclusive); == sm_first for measured rows
    "start": "int64",
    "end": "int64",
    "green_context": "int64",  # -1 = outside every green context
    "name": "int32",  # kernel name id (Timeline.strings)
    "measured": "bool",  # True: probe data; False: estimated
    "kernel": "int64",  # row of the kernel in Timeline.events; -1 for measured rows
}

LaneSource = Literal["measured", "estimated", "none"]


@dataclass(frozen=True)
class Partition:
    green_context: int  # -1 = outside every green context
    sm_count: int
    sm_ids: tuple[int, ...]  # the SM ids lanes use for it (estimated layout, or measured ids)
    configured: bool  # sm_count came from the trace's context information
    overlaps: bool = False  # partition -1 spanning the whole device (green contexts hold every SM)


@dataclass(frozen=True)
class _Device:
    rank: int
    device: int
    name: str
    sm_count: int
    kcols: Mapping[str, np.ndarray]  # the device's kernel events: _KERNEL_COLUMNS and "row" (in Timeline.events)
    blocks: pd.DataFrame | None  # measured blocks of the device, or None
    span: tuple[int, int]  # GPU activity span (0, 0 when none)

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """The kernel columns as a DataFrame indexed by event row (built when asked: the SM-time summary
        works on the columns, so a plain `analyze` never loads pandas for it)."""
        import pandas as pd

        return pd.DataFrame({c: self.kcols[c] for c in _KERNEL_COLUMNS}, index=self.kcols["row"], copy=False)

    @property
    def n_kernels(self) -> int:
        return len(self.kcols["row"])


# the kernel columns the SM analyses read (the lanes, the estimate, the partitions, the probe match)
_KERNEL_COLUMNS = [
    "start", "end", "name", "context", "green_context", "grid_x", "grid_y", "grid_z",
    "block_x", "block_y", "block_z", "registers", "shared_mem",
]  # fmt: skip


def _device(tl: Timeline, rank: int, device: int) -> _Device:
    """The device's kernels, probe blocks and span, from its GPU rows (grouped once per timeline)."""
    gpu = rows_of_device(tl, rank, device)
    krows = gpu[column(tl, "kind")[gpu] == int(EventKind.KERNEL)]
    kernels = {c: column(tl, c)[krows] for c in _KERNEL_COLUMNS}
    kernels["row"] = krows
    blocks = None
    if tl.sm_blocks is not None and len(tl.sm_blocks):
        b = tl.sm_blocks
        sel = (b["rank"].to_numpy() == rank) & (b["device"].to_numpy() == device)
        if sel.any():
            blocks = b[sel]
    if gpu.size:
        span = (int(column(tl, "start")[gpu].min()), int(column(tl, "end")[gpu].max()))
    elif blocks is not None:
        span = (int(blocks["start"].min()), int(blocks["end"].max()))
    else:
        span = (0, 0)
    info = tl.device_info(rank, device)
    sm_count = device_sm_count(info)
    if sm_count <= 0 and blocks is not None:
        sm_count = int(blocks["sm"].max()) + 1
    return _Device(rank, device, info.name if info else "", sm_count, kernels, blocks, span)


def kernel_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """A kernel DataFrame (a subset of `_Device.kernels`) as the columns `_estimate` reads."""
    out = {c: frame[c].to_numpy() for c in _KERNEL_COLUMNS}
    out["row"] = frame.index.to_numpy()
    return out


def select_kernels(kcols: Mapping[str, np.ndarray], which: np.ndarray) -> dict[str, np.ndarray]:
    """The kernel columns at a mask or positions."""
    return {c: v[which] for c, v in kcols.items()}


def _partitions(tl: Timeline, dev: _Device) -> list[Partition]:
    """Green-context partitions of the device (sorted by id), then partition -1 when it has work
    or SMs of its own."""
    configured: dict[int, int] = {}
    for c in tl.contexts:
        if c.rank == dev.rank and c.device == dev.device and c.is_green and c.green_context >= 0:
            configured[c.green_context] = max(configured.get(c.green_context, 0), c.sm_count)
    ids = set(configured)
    ids.update(int(g) for g in distinct(dev.kcols["green_context"]) if g >= 0)
    measured_sms: dict[int, np.ndarray] = {}
    if dev.blocks is not None:
        b = dev.blocks
        for g, sms in b.groupby("green_context")["sm"]:
            measured_sms[int(g)] = sorted_unique(sms.to_numpy())
        ids.update(g for g in measured_sms if g >= 0)
    sm_total = dev.sm_count
    sizes: dict[int, tuple[int, bool]] = {}
    for g in sorted(ids):
        if configured.get(g, 0) > 0:
            sizes[g] = (configured[g], True)
        elif g in measured_sms:
            sizes[g] = (len(measured_sms[g]), False)
    unknown = [g for g in sorted(ids) if g not in sizes]
    left = max(sm_total - sum(s for s, _ in sizes.values()), 0)
    for g in unknown:  # no size anywhere: share what no other green context holds
        sizes[g] = (max(left // max(len(unknown), 1), 1), False)
    remainder = max(sm_total - sum(s for s, _ in sizes.values()), 0)

    has_none_work = bool((dev.kcols["green_context"] < 0).any()) or NONE_PARTITION in measured_sms
    # the SM ids: those the probes saw, topped up with unused ids (estimated: contiguous from 0)
    used = {int(x) for g in sizes for x in measured_sms.get(g, ())}
    limit = sm_total if dev.blocks is not None else sm_total + sum(s for s, _ in sizes.values())
    free = [x for x in range(limit) if x not in used]
    parts: list[Partition] = []
    for g in sorted(sizes):
        n, conf = sizes[g]
        seen = sorted(int(x) for x in measured_sms.get(g, ()))
        extra, free = free[: max(n - len(seen), 0)], free[max(n - len(seen), 0) :]
        parts.append(Partition(g, n, tuple(sorted(seen + extra)), conf))
    if not ids:
        parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True))
    elif remainder > 0:
        parts.append(Partition(NONE_PARTITION, remainder, tuple(free[:remainder]), True))
    elif has_none_work:
        parts.append(Partition(NONE_PARTITION, sm_total, tuple(range(sm_total)), True, overlaps=True))
    return parts
