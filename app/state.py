"""What the app holds: the store, where uploads may be written, and small per-run caches.

Page layouts and callbacks are plain functions taking an `AppState` first; the Dash wrappers find the
state of the app serving the request through Flask's `current_app` (several apps, each with its own
store, can live in one process: the tests do that).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import plotly
from dash.development.base_component import Component

from tracelab.api.types import Analysis, AnalysisContext, AnalysisOptions, Budget, RunRecord, Store, Timeline
from tracelab.errors import BadInput, MissingDependency, UnknownRun

STATE_KEY = "TRACELAB_APP_STATE"
DEFAULT_OPTIONS = AnalysisOptions()


# The caches' memory bound (issue 30: the dashboard grew from 107 MB to 5.0 GB over three walks of 80
# runs, because its caches were bounded by entry count only, and one entry of a big run is hundreds of
# MB). TRACELAB_APP_CACHE_MB (default 1536) is the total, shared out as below; each cache also keeps
# its entry-count bound, and always keeps its newest entry (a run bigger than its share still loads).
# docs/DECISIONS.md states the bound.
CACHE_MB_ENV = "TRACELAB_APP_CACHE_MB"
DEFAULT_CACHE_MB = 1536
CACHE_SHARES = {"timelines": 0.55, "analyses": 0.25, "misc": 0.15, "tiles": 0.05}


def cache_budget_bytes() -> int:
    """The total bytes the app's caches may hold (TRACELAB_APP_CACHE_MB, default 1536 MiB)."""
    try:
        mb = float(os.environ.get(CACHE_MB_ENV, DEFAULT_CACHE_MB))
    except ValueError:
        mb = DEFAULT_CACHE_MB
    return int(max(mb, 1.0) * 2**20)


def approx_bytes(value: Any, depth: int = 0) -> int:
    """About how many bytes `value` holds: numpy buffers, frames, strings, bytes exactly, a Dash layout as its
    JSON; containers and records (msgspec Structs) by their items (at most 3 levels deep; long sequences from a sample of
    256 items)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return 49 + len(value)
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=len(value) <= 100_000).sum())
    if isinstance(value, pd.Series):
        return int(value.memory_usage(index=True, deep=len(value) <= 100_000))
    if isinstance(value, Component):  # a page's content (the Gaps page's, cached per run): as Dash sends it
        return len(json.dumps(value.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder))
    if isinstance(value, Timeline):
        cols = sum(int(a.nbytes) for a in value.cols.values()) + sum(int(a.nbytes) for a in value.lane_cols.values())
        return cols + approx_bytes(value.strings, depth + 1) + approx_bytes(value.sm_blocks, depth + 1)
    if depth >= 3:
        return sys.getsizeof(value)
    if isinstance(value, dict):
        items = list(itertools.islice(value.items(), 256))
        each = sum(approx_bytes(k, depth + 1) + approx_bytes(v, depth + 1) for k, v in items)
        return 64 + (each * len(value) // len(items) if items else 0)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(itertools.islice(value, 256))
        each = sum(approx_bytes(v, depth + 1) for v in items)
        return 56 + (each * len(value) // len(items) if items else 0)
    if isinstance(value, msgspec.Struct):
        return 64 + sum(approx_bytes(getattr(value, f, None), depth + 1) for f in value.__struct_fields__)
    return sys.getsizeof(value)


class _Lru:
    """A small LRU cache that computes each key once: a request that needs a value another thread is
    computing waits for it instead of computing it again (a page and the timeline's data routes ask
    for the same run at the same time). Bounded by entry count and by `max_bytes` (as `approx_bytes`
    counts them): the least recently used entries go first, the newest always stays."""

    def __init__(self, size: int, max_bytes: int | None = None) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0  # what the entries held now count
        self.peak_bytes = 0
        self._d: OrderedDict[Any, Any] = OrderedDict()
        self._sizes: dict[Any, int] = {}
        self._lock = threading.Lock()
        self._building: dict[Any, threading.Lock] = {}

    def _evict(self) -> None:
        while len(self._d) > 1 and (
            len(self._d) > self.size or (self.max_bytes is not None and self.bytes > self.max_bytes)
        ):
            key, _ = self._d.popitem(last=False)
            self.bytes -= self._sizes.pop(key, 0)

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
                size = approx_bytes(value) if self.max_bytes is not None else 0
                with self._lock:
                    self.bytes += size - self._sizes.get(key, 0)
                    self._sizes[key] = size
                    self._d[key] = value
                    self._d.move_to_end(key)
                    self._evict()
                    self.peak_bytes = max(self.peak_bytes, self.bytes)
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
            self._sizes.clear()
            self.bytes = 0


class CorrelationIndex(msgspec.Struct, frozen=True):
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


def _share(cache: str) -> int:
    return int(cache_budget_bytes() * CACHE_SHARES[cache])


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
    _timelines: _Lru = field(default_factory=lambda: _Lru(3, _share("timelines")))
    _analyses: _Lru = field(default_factory=lambda: _Lru(8, _share("analyses")))
    _misc: _Lru = field(default_factory=lambda: _Lru(64, _share("misc")))
    # encoded timeline tiles (~10-200 KB each)
    _tiles: _Lru = field(default_factory=lambda: _Lru(160, _share("tiles")))
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

    def _loaded(self, run_id: str) -> tuple[Timeline, AnalysisContext]:
        """The run's timeline and its analysis context, cached together: what the analyses of the run
        derive from its timeline (device rows, SM time, ...) is kept while the run is loaded."""

        def load() -> tuple[Timeline, AnalysisContext]:
            tl = self.store.load(run_id)
            return tl, AnalysisContext(tl)

        return self._timelines.get(run_id, load)

    def timeline(self, run_id: str) -> Timeline:
        return self._loaded(run_id)[0]

    def context(self, run_id: str) -> AnalysisContext:
        """The analysis context of the run's timeline (`tracelab.api.AnalysisContext`): pass it to the api
        calls about this run, or make it active around render code that runs analyses (the SM lanes)."""
        return self._loaded(run_id)[1]

    def lanes(self, run_id: str) -> pd.DataFrame:
        return self.cached(("lanes", run_id), lambda: self.store.lanes(run_id))

    def strings(self, run_id: str) -> tuple[str, ...]:
        return self.cached(("strings", run_id), lambda: self.store.strings(run_id))

    def correlation_index(self, run_id: str) -> CorrelationIndex:
        return self._misc.get(("corr", run_id), lambda: CorrelationIndex.build(self.timeline(run_id)))

    def analysis(self, run_id: str, options: AnalysisOptions = DEFAULT_OPTIONS) -> Analysis:
        """The run's analysis (cached), through the library facade (findings with their prose)."""
        from tracelab.api import analyze

        return self._analyses.get(
            (run_id, options), lambda: analyze(self.timeline(run_id), options, context=self.context(run_id))
        )

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

        threading.Thread(target=run, name=name, daemon=True).start()

    def peek(self, key: Any) -> Any:
        """A value `cached` holds under `key`, or None (never computes it)."""
        return self._misc.peek(key)

    def cached_analysis(self, run_id: str, options: AnalysisOptions = DEFAULT_OPTIONS) -> Analysis | None:
        """The analysis if it was computed already (the timeline never waits for one)."""
        return self._analyses.peek((run_id, options))

    def cache_bytes(self) -> dict[str, int]:
        """What each cache holds now, in bytes as `approx_bytes` counts them."""
        return {
            name: cache.bytes
            for name, cache in (
                ("timelines", self._timelines), ("analyses", self._analyses), ("misc", self._misc), ("tiles", self._tiles)
            )
        }

    def forget(self) -> None:
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
