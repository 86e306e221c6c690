"""Per-timeline memos: what several analyses derive from one Timeline (its GPU rows grouped by
device, which names are communication kernels, a device's SM-time) is computed once and shared.

A Timeline is immutable, so a memo never goes stale; entries are keyed by the timeline's identity and
checked through a weak reference (a freed timeline's id reused by a new one starts empty). The memos of
the last `KEEP` timelines are kept (the dashboard and `compare` hold a few at a time)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from ..model import Timeline

KEEP = 8
T = TypeVar("T")

_LOCK = threading.Lock()  # the dashboard calls from several threads
_MEMOS: OrderedDict[int, tuple[weakref.ref, dict[Hashable, Any]]] = OrderedDict()
_PENDING: dict[tuple[int, Hashable], threading.Event] = {}  # (memo dict, key) being computed -> done


def _memos_of(timeline: Timeline) -> dict[Hashable, Any]:
    key = id(timeline)
    with _LOCK:
        hit = _MEMOS.get(key)
        if hit is not None and hit[0]() is timeline:
            _MEMOS.move_to_end(key)
            return hit[1]
        memos: dict[Hashable, Any] = {}
        _MEMOS[key] = (weakref.ref(timeline), memos)
        # the memos of freed timelines go at once (a dashboard that let a run go must not keep its
        # arrays until KEEP newer timelines came), then the oldest beyond KEEP
        for dead in [k for k, (ref, _) in _MEMOS.items() if ref() is None]:
            del _MEMOS[dead]
        while len(_MEMOS) > KEEP:
            _MEMOS.popitem(last=False)
        return memos


def memo(timeline: Timeline, key: Hashable, compute: Callable[[], T]) -> T:
    """compute(), once per (timeline, key). A thread that asks while another computes the same key
    waits for that result (analyze runs independent analyses on threads, and several of them need
    the same device rows or SM time). Memos depend on each other only one way (an analysis's memo
    may use a lower-level one, never the reverse), so the waits cannot form a cycle."""
    memos = _memos_of(timeline)
    with _LOCK:
        if key in memos:
            return memos[key]
        pending = _PENDING.get((id(memos), key))
        if pending is None:
            pending = _PENDING[(id(memos), key)] = threading.Event()
            mine = True
        else:
            mine = False
    if not mine:
        pending.wait()
        with _LOCK:
            if key in memos:
                return memos[key]
        return memo(timeline, key, compute)  # the other thread's compute failed: try here
    try:
        value = compute()
        with _LOCK:
            return memos.setdefault(key, value)
    finally:
        with _LOCK:
            del _PENDING[(id(memos), key)]
        pending.set()


def hand_over(timeline: Timeline, key: Hashable, value: Any) -> None:
    """Leave `value` for one later `take_over` of the same key: what one view computed on its way and
    another needs whole (the dashboard's SM lanes and the analysis's SM time start from the same
    estimate). Unlike `memo`, the taker removes it, so a process that never asks holds it no longer
    than the timeline, and one that asks holds it only until then."""
    memos = _memos_of(timeline)
    with _LOCK:
        memos[("hand_over", key)] = value


def known(timeline: Timeline, key: Hashable) -> bool:
    """Whether `memo` holds (or is computing) `key` for this timeline."""
    memos = _memos_of(timeline)
    with _LOCK:
        return key in memos or (id(memos), key) in _PENDING


def take_over(timeline: Timeline, key: Hashable) -> Any:
    """What `hand_over` left under `key` (removed), or None."""
    memos = _memos_of(timeline)
    with _LOCK:
        return memos.pop(("hand_over", key), None)


def column(timeline: Timeline, name: str) -> np.ndarray:
    """An event column as a numpy array (the Timeline holds numpy columns: no pandas, no copy)."""
    return timeline.col(name)


def lane_column(timeline: Timeline, name: str) -> np.ndarray:
    """A column of the lane table as a numpy array."""
    return timeline.lane_col(name)
