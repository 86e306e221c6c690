"""SM partitions of a device: its green contexts and the SMs outside them (see `tracelab.analyses.sm.summary`),
and the measured SM lanes: probe blocks (`Timeline.sm_blocks`) merged into busy intervals per SM."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import msgspec
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


class Partition(msgspec.Struct, frozen=True):
    green_context: int  # -1 = outside every green context
    sm_count: int
    sm_ids: tuple[int, ...]  # the SM ids lanes use for it (estimated layout, or measured ids)
    configured: bool  # sm_count came from the trace's context information
    overlaps: bool = False  # partition -1 spanning the whole device (green contexts hold every SM)


class _Device(msgspec.Struct, frozen=True, dict=True):
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

    def without_blocks(self) -> _Device:
        return msgspec.structs.replace(self, blocks=None)


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


def _partitions(tl: Timeline, dev: _Device) -> list[Partition]:
    """Green-context partitions of the device (sorted by id), then partition -1 when it has work
    or SMs of its own."""
    configured: dict[int, int] = {}
    for c in tl.contexts:
        if c.rank == dev.rank and c.device == dev.device and c.is_green and c.green_context >= 0:
            configured[c.green_context] = max(configured.get(c.green_context, 0), c.sm_count)
    ids = set(configured)
    ids.update(int(g) for g in distinct(dev.kcols["green_context"]) if g >= 0)
    measured_sms: dict[int, np.ndarray] = {} if dev.blocks is None else {
        int(g): sorted_unique(sms.to_numpy()) for g, sms in dev.blocks.groupby("green_context")["sm"]}
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


def _empty_lane_columns() -> dict[str, np.ndarray]:
    return {c: np.zeros(0, dtype=t) for c, t in SM_LANE_COLUMNS.items()}


def _empty_lanes() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(_empty_lane_columns())


def _merge_intervals(keys: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Union of intervals per key (vectorized). Returns (first row index of each merged interval,
    merged start, merged end) in key order."""
    import pandas as pd

    n = len(start)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    order = np.lexsort((start, *reversed(keys)))
    s, e = start[order], end[order]
    new_key = np.zeros(n, dtype=bool)
    new_key[0] = True
    for k in keys:
        ko = k[order]
        new_key[1:] |= ko[1:] != ko[:-1]
    # running max of end within a key group
    grp = np.cumsum(new_key) - 1
    running = pd.Series(e).groupby(grp).cummax().to_numpy()
    new = new_key.copy()
    new[1:] |= s[1:] > running[:-1]
    first = np.flatnonzero(new)
    return order[first], s[first], np.maximum.reduceat(e, first)


def _instrumented(dev: _Device) -> np.ndarray:
    """Which kernel events of the device have probe blocks: a block of the same name that starts
    within the event (the probe aligns each invocation's first block to its kernel's start).
    Workloads may probe only some launches of a kernel; the others are estimated."""
    k = dev.kcols
    out = np.zeros(dev.n_kernels, dtype=bool)
    if dev.blocks is None or not dev.n_kernels:
        return out
    k_name = k["name"]
    b_name = dev.blocks["name"].to_numpy()
    b_start = dev.blocks["start"].to_numpy()
    for nid in sorted_unique(b_name):  # one pass per probed kernel name
        rows = np.flatnonzero(k_name == nid)
        if not len(rows):
            continue
        order = np.argsort(k["start"][rows], kind="stable")
        rows = rows[order]
        ks = k["start"][rows]
        ke = k["end"][rows]
        bs = b_start[b_name == nid]
        idx = np.searchsorted(ks, bs, side="right") - 1
        hit = idx >= 0
        hit[hit] = bs[hit] <= ke[idx[hit]]
        out[rows[sorted_unique(idx[hit])]] = True
    return out


def _measured_rows(dev: _Device) -> pd.DataFrame:
    import pandas as pd

    b = dev.blocks
    assert b is not None
    sm = b["sm"].to_numpy().astype(np.int64)
    gc = b["green_context"].to_numpy().astype(np.int64)
    name = b["name"].to_numpy().astype(np.int64)
    first, ms, me = _merge_intervals([sm, gc, name], b["start"].to_numpy().astype(np.int64),
                                     b["end"].to_numpy().astype(np.int64))
    return pd.DataFrame({
        "sm_first": sm[first].astype(np.int32), "sm_last": sm[first].astype(np.int32), "start": ms, "end": me,
        "green_context": gc[first], "name": name[first].astype(np.int32), "measured": np.ones(len(first), dtype=bool),
        "kernel": np.full(len(first), -1, dtype=np.int64),
    })
