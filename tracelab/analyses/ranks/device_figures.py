"""The Ranks table's per-device figures clipped to the rank's steps (tracelab.analyses.ranks.view
`_steps_figures`): every device at once, each in its own band of the number line
(tracelab.analyses.core.bands), instead of a few interval passes per device."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.bands import Bands, band_sums
from tracelab.analyses.core.intervals import intersect, merge
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import DeviceRows, comm_kernels
from tracelab.model import EventKind, Timeline


def device_figures(timeline: Timeline, devices: list[DeviceRows], spans: dict[int, tuple[int, int]],
                   ) -> list[tuple[int, int, int, int, int, int] | None] | None:
    """Per device (of a rank in `spans`), its GPU work clipped to the rank's [lo, hi): (first start, last
    end, busy, idle, comm, compute/comm overlap) as `_steps_figures` sums them, None for a device with no
    work inside; None for all when the bands would pass 2^60 (the caller goes device by device)."""
    n = len(devices)
    start, end, kind = column(timeline, "start"), column(timeline, "end"), column(timeline, "kind")
    rows = np.concatenate([dr.rows for dr in devices]) if n else np.zeros(0, dtype=np.int64)
    dev = np.repeat(np.arange(n, dtype=np.int64), [dr.rows.size for dr in devices])
    lo_d = np.array([spans[dr.rank][0] for dr in devices], dtype=np.int64)[dev]
    hi_d = np.array([spans[dr.rank][1] for dr in devices], dtype=np.int64)[dev]
    s, e = start[rows], end[rows]
    keep = (e > lo_d) & (s < hi_d)
    rows, dev = rows[keep], dev[keep]
    s, e = np.maximum(s[keep], lo_d[keep]), np.minimum(e[keep], hi_d[keep])  # start order kept per device
    bands = Bands.of(n, s, e)
    if bands is None:
        return None
    bs, be = bands.shift(s, dev), bands.shift(e, dev)
    comm = comm_kernels(timeline, rows)
    compute = (kind[rows] == int(EventKind.KERNEL)) & ~comm
    us, ue = merge(bs, be, assume_sorted=True)
    busy = band_sums(bands, us, ue - us, n)
    cs, ce = merge(bs[comm], be[comm], assume_sorted=True)
    comm_ns = band_sums(bands, cs, ce - cs, n)
    # compute/comm overlap as device_overlap defines it (kernels that are not communication ∩ comm kernels)
    xs, xe = intersect(*merge(bs[compute], be[compute]), *merge(bs[comm], be[comm]))
    overlap = band_sums(bands, xs, xe - xs, n)
    out: list[tuple[int, int, int, int, int, int] | None] = [None] * n
    if dev.size:
        first = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]])
        d_lo = np.minimum.reduceat(s, first).tolist()
        d_hi = np.maximum.reduceat(e, first).tolist()
        b, c, o = busy.tolist(), comm_ns.tolist(), overlap.tolist()
        for d, lo, hi in zip(dev[first].tolist(), d_lo, d_hi, strict=True):
            out[d] = (lo, hi, b[d], (hi - lo) - b[d], c[d], o[d])
    return out
