"""Window queries: the events of a run overlapping [t0, t1), read chunk by chunk through an index.

`events` holds per-lane chunks (see schema.py). A chunk can hold an overlapping event only when
start_min < t1 and end_max >= t0; since no chunk on a lane reaches further than the lane's
`chunk_span` (max end_max - start_min, stored at import), start_min >= t0 - chunk_span bounds the
index range scan from below. The selected chunks are decoded with numpy and the exact rule applied
vectorized: start < t1 and (end > t0, or an instant at or after t0).
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import BadInput
from ..model.timeline import EVENT_COLUMNS
from .chunks import complete, decode, kind_bit

_MAX_TERMS = 400  # SQLite caps a compound SELECT at 500 terms


def window_events(
    conn: sqlite3.Connection,
    run_id: str,
    chunk_span: Mapping[int, int],
    columns: Sequence[str],
    t0: int,
    t1: int,
    lanes: Iterable[int] | None = None,
    kinds: Iterable[int] | None = None,
    limit: int | None = None,
    path: Path | None = None,
) -> pd.DataFrame:
    """Events overlapping [t0, t1) on the given lanes (all when None) and kinds, sorted by start,
    indexed by their row in the run's Timeline.events ("event")."""
    wanted = sorted(chunk_span) if lanes is None else sorted({int(x) for x in lanes} & set(chunk_span))
    kl = sorted({int(k) for k in kinds}) if kinds is not None else None
    if not wanted or t1 <= t0 or kl == []:
        return frame(complete({}, 0, 0), np.zeros(0, np.int64))
    mask = 0
    for k in kl or ():
        mask |= 1 << int(kind_bit(k))
    kind_sql = " AND (kinds & ?) != 0" if kl is not None else ""
    select = (
        "SELECT lane, n, data FROM events"
        " WHERE run_id = ? AND lane = ? AND start_min >= ? AND start_min < ? AND end_max >= ?" + kind_sql
    )
    parts: list[dict[str, np.ndarray]] = []
    for lo in range(0, len(wanted), _MAX_TERMS):
        batch = wanted[lo : lo + _MAX_TERMS]
        params: list = []
        for lane in batch:
            params += [run_id, lane, t0 - chunk_span[lane], t1, t0] + ([mask] if kl is not None else [])
        for lane, n, blob in conn.execute(" UNION ALL ".join([select] * len(batch)), params):
            try:
                cols = decode(blob, n, columns)
            except (ValueError, zlib.error) as e:
                raise BadInput(
                    f"corrupt store: an event chunk of run {run_id} is unreadable ({e})", path
                ) from None
            s, e_ = cols["start"], cols["end"]
            keep = (s < t1) & ((e_ > t0) | (s >= t0))
            if kl is not None:
                keep &= np.isin(cols["kind"], kl)
            if keep.any():
                parts.append(
                    {c: v[keep] for c, v in complete(cols, n, lane).items()} | {"seq": cols["seq"][keep]}
                )
    if not parts:
        return frame(complete({}, 0, 0), np.zeros(0, np.int64))
    data = {c: np.concatenate([p[c] for p in parts]) for c in (*EVENT_COLUMNS, "seq")}
    order = np.lexsort((data["seq"], data["start"]))
    if limit is not None:
        order = order[: int(limit)]
    return frame({c: data[c][order] for c in EVENT_COLUMNS}, data["seq"][order])


def frame(cols: Mapping[str, np.ndarray], seq: np.ndarray) -> pd.DataFrame:
    """EVENT_COLUMNS with their dtypes, indexed by seq (the row in Timeline.events)."""
    df = pd.DataFrame({c: np.asarray(cols[c], dtype=t) for c, t in EVENT_COLUMNS.items()}, copy=False)
    df.index = pd.Index(np.asarray(seq, dtype=np.int64), name="event")
    return df
