"""Window queries: the events of a run overlapping [t0, t1), read through the primary key.

`events` is clustered on (run_id, lane, start, seq), so each lane is one index range scan. An event
overlaps the window when start < t1 and (end > t0, or it is an instant at or after t0); since no
event on a lane lasts longer than that lane's `max_dur` (stored at import), start >= t0 - max_dur
bounds the scan from below.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..model.timeline import EVENT_COLUMNS
from .bulk import fetch_matrix
from .schema import EVENT_FIELDS, quote

COLUMNS: tuple[str, ...] = ("seq", "lane", *EVENT_FIELDS)
_MAX_TERMS = 400  # SQLite caps a compound SELECT at 500 terms


def window_events(
    conn: sqlite3.Connection,
    run_id: str,
    max_dur: Mapping[int, int],
    t0: int,
    t1: int,
    lanes: Iterable[int] | None = None,
    kinds: Iterable[int] | None = None,
    limit: int | None = None,
) -> pd.DataFrame:
    """Events overlapping [t0, t1) on the given lanes (all when None) and kinds, sorted by start,
    indexed by their row in the run's Timeline.events ("event")."""
    wanted = sorted(max_dur) if lanes is None else sorted({int(x) for x in lanes} & set(max_dur))
    if not wanted or t1 <= t0:
        return frame(np.zeros((0, len(COLUMNS)), dtype=np.int64))
    kl = sorted({int(k) for k in kinds}) if kinds is not None else []
    kind_sql = f" AND kind IN ({', '.join('?' * len(kl))})" if kinds is not None else ""
    select = (
        f"SELECT {', '.join(quote(c) for c in COLUMNS)} FROM events"
        " WHERE run_id = ? AND lane = ? AND start >= ? AND start < ?"
        f' AND ("end" > ? OR start >= ?){kind_sql}'
    )
    mats = []
    for lo in range(0, len(wanted), _MAX_TERMS):
        batch = wanted[lo : lo + _MAX_TERMS]
        params: list = []
        for lane in batch:
            params += [run_id, lane, t0 - max_dur[lane], t1, t0, t0, *kl]
        mats.append(fetch_matrix(conn, " UNION ALL ".join([select] * len(batch)), params, len(COLUMNS)))
    mat = np.concatenate(mats) if len(mats) > 1 else mats[0]
    order = np.lexsort((mat[:, 0], mat[:, COLUMNS.index("start")]))
    if limit is not None:
        order = order[: int(limit)]
    return frame(mat[order])


def frame(mat: np.ndarray, names: Sequence[str] = COLUMNS) -> pd.DataFrame:
    """EVENT_COLUMNS with their dtypes, indexed by seq, from an int64 matrix of `names` columns."""
    data = {c: mat[:, i + 1].astype(EVENT_COLUMNS[c]) for i, c in enumerate(names[1:])}
    df = pd.DataFrame({c: data[c] for c in EVENT_COLUMNS}, copy=False)
    df.index = pd.Index(mat[:, 0], name="event")
    return df
