"""What the app holds: the store, where uploads may be written, and small per-run caches.

Page layouts and callbacks are plain functions taking an `AppState` first; the Dash wrappers find the
state of the app serving the request through Flask's `current_app` (several apps, each with its own
store, can live in one process: the tests do that).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracelab.analyses.results import Analysis, AnalysisOptions
from tracelab.errors import BadInput, MissingDependency, UnknownRun
from tracelab.memory import inherit
from tracelab.model.timeline import Timeline
from tracelab.sandbox import Budget
from tracelab.store import RunRecord, Store

STATE_KEY = "TRACELAB_APP_STATE"
DEFAULT_OPTIONS = AnalysisOptions()


class _Lru:
    """A small LRU cache that computes each key once: a request that needs a value another thread is
    computing waits for it instead of computing it again (a page and the timeline's data routes ask
    for the same run at the same time)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Any, threading.Lock] = {}

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # outside the cache's lock: loading a big run must not block other runs
            with self._lock:
                if key in self._d:
                    self._d.move_to_end(key)
                    return self._d[key]
            try:
                value = make()
                with self._lock:
                    self._d[key] = value
                    self._d.move_to_end(key)
                    while len(self._d) > self.size:
                        self._d.popitem(last=False)
            finally:
                with self._lock:
                    self._building.pop(key, None)
        return value

    def peek(self, key: Any) -> Any:
        with self._lock:
            return self._d.get(key)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


@dataclass(frozen=True)
class CorrelationIndex:
    """Events sorted by correlation id, for launch <-> GPU op lookups in O(log n)."""

    order: np.ndarray  # positions into timeline.events, sorted by correlation
    keys: np.ndarray  # the sorted correlation ids

    @classmethod
    def build(cls, timeline: Timeline) -> CorrelationIndex:
        corr = timeline.events["correlation"].to_numpy()
        order = np.argsort(corr, kind="stable")
        return cls(order=order, keys=corr[order])

    def positions(self, correlation: int) -> np.ndarray:
        lo = np.searchsorted(self.keys, correlation, side="left")
        hi = np.searchsorted(self.keys, correlation, side="right")
        return self.order[lo:hi]


@dataclass
class AppState:
    store: Store
    import_dir: Path | None = None
    max_upload_bytes: int = 200 * 2**20
    max_expanded_bytes: int = 1 * 2**30  # an upload after decompression (docs/DECISIONS.md)
    upload_budget: Budget = field(default_factory=Budget)  # the child process that parses an upload
    # one upload child at a time: N hostile uploads cannot take N memory budgets
    upload_slot: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(1))
    width_px: int = 1600
    max_items: int = 4000
    _timelines: _Lru = field(default_factory=lambda: _Lru(3))
    _analyses: _Lru = field(default_factory=lambda: _Lru(8))
    _misc: _Lru = field(default_factory=lambda: _Lru(64))
    _tiles: _Lru = field(default_factory=lambda: _Lru(160))  # encoded timeline tiles (~10-200 KB each)
    _background: set[str] = field(default_factory=set)
    _background_lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- runs ----------------------------------------------------------------------------------
    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """A small derived value (lanes, tables, SM lanes) cached under `key`."""
        return self._misc.get(key, make)

    def tile(self, key: Any, make: Callable[[], bytes]) -> bytes:
        """An encoded timeline tile cached under `key` (its own cache: tiles are many and larger)."""
        return self._tiles.get(key, make)

    def device_names(self, run_id: str) -> dict[tuple[int, int], str]:
        """GPU names by (rank, device), from the run's device table (cached with the run)."""
        return self._misc.get(
            ("device_names", run_id),
            lambda: {(d.rank, d.device): d.name for d in self.timeline(run_id).devices},
        )

    def runs(self) -> list[RunRecord]:
        return self.store.runs()

    def record(self, run: str | None) -> RunRecord:
        """The run's record; UnknownRun for a missing / unknown id (or name)."""
        if not run:
            raise UnknownRun("")
        rid = self.store.resolve(str(run))
        return self.store.get_run(rid)

    def timeline(self, run_id: str) -> Timeline:
        return self._timelines.get(run_id, lambda: self.store.load(run_id))

    def lanes(self, run_id: str) -> pd.DataFrame:
        return self.cached(("lanes", run_id), lambda: self.store.lanes(run_id))

    def strings(self, run_id: str) -> tuple[str, ...]:
        return self.cached(("strings", run_id), lambda: self.store.strings(run_id))

    def correlation_index(self, run_id: str) -> CorrelationIndex:
        return self._misc.get(("corr", run_id), lambda: CorrelationIndex.build(self.timeline(run_id)))

    def analysis(self, run_id: str, options: AnalysisOptions = DEFAULT_OPTIONS) -> Analysis:
        """The run's analysis (cached), through the library facade (findings with their prose)."""
        from tracelab.api import analyze

        return self._analyses.get((run_id, options), lambda: analyze(self.timeline(run_id), options))

    def analyse_in_background(self, run_id: str) -> None:
        """Start the run's analysis in a daemon thread (once); `cached_analysis` has it when done."""
        self.in_background(f"analyse-{run_id}", lambda: self.analysis(run_id))

    def in_background(self, name: str, work: Callable[[], Any]) -> None:
        """Run `work` (which caches its result) in a daemon thread, unless one named `name` runs."""
        with self._background_lock:
            if name in self._background:
                return
            self._background.add(name)

        def run() -> None:
            try:
                work()
            except Exception:
                logging.getLogger("tracelab.app").exception("background work %s failed", name)
            finally:
                with self._background_lock:
                    self._background.discard(name)

        threading.Thread(target=inherit(run), name=name, daemon=True).start()

    def peek(self, key: Any) -> Any:
        """A value `cached` holds under `key`, or None (never computes it)."""
        return self._misc.peek(key)

    def cached_analysis(self, run_id: str, options: AnalysisOptions = DEFAULT_OPTIONS) -> Analysis | None:
        """The analysis if it was computed already (the timeline never waits for one)."""
        return self._analyses.peek((run_id, options))

    def forget(self, run_id: str | None = None) -> None:
        for cache in (self._timelines, self._analyses, self._misc, self._tiles):
            cache.clear()


def current_state() -> AppState:
    """The state of the app serving this request."""
    import flask

    state = flask.current_app.config.get(STATE_KEY)
    if state is None:  # pragma: no cover - only outside create_app
        raise RuntimeError("no tracelab app state: build the app with app.create_app(store)")
    return state


def describe_error(exc: Exception) -> str:
    """One line for the user: the BadInput message (it names the run / file) or the error type."""
    if isinstance(exc, (BadInput, MissingDependency)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
