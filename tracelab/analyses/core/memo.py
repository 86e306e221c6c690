"""Analysis contexts: what several analyses derive from one Timeline (its GPU rows grouped by device,
which names are communication kernels, a device's SM-time) is computed once per context and shared.

An `AnalysisContext(timeline)` is created and held by its caller (`tracelab.api` for one call or one
command, the dashboard for each run it has loaded) and made active for the work done with it:

    ctx = AnalysisContext(timeline)
    with ctx.active():
        analysis = analyze(timeline)        # device rows, SM time, ... computed once, kept in ctx

Inside, `memo(timeline, key, compute)` finds the active context of that timeline; without one it
simply computes (nothing is kept). There is no process-wide cache: what a context holds goes with it.
The active contexts live in a `contextvars.ContextVar`, so threads and tasks see only those activated
on their own path (`tracelab.analyses.parallel` carries them to its helper threads). A Timeline is
immutable and every value is a pure function of it and its key, so results never depend on which
analysis asked first."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # nothing heavy at import: the facade (tracelab.api) imports this module
    import numpy as np

    from tracelab.model import Timeline

T = TypeVar("T")

_ACTIVE: contextvars.ContextVar[tuple[AnalysisContext, ...]] = contextvars.ContextVar(
    "tracelab_analysis_contexts", default=()
)


class AnalysisContext:
    """Derived data of one timeline shared by the analyses run with it (thread-safe)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._lock = threading.Lock()  # the dashboard and analyze's helper threads share one context
        self._values: dict[Hashable, Any] = {}
        self._pending: dict[Hashable, threading.Event] = {}  # keys being computed -> done

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """compute(), once per key. A thread that asks while another computes the same key waits for
        that result (analyze runs independent analyses on threads, and several of them need the same
        device rows or SM time). Values depend on each other only one way (an analysis's value may use
        a lower-level one, never the reverse), so the waits cannot form a cycle."""
        while True:
            with self._lock:
                if key in self._values:
                    return self._values[key]
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another thread computes it; if that failed, try here
        try:
            value = compute()
            with self._lock:
                return self._values.setdefault(key, value)
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()

    def holds(self, key: Hashable) -> bool:
        """Whether `key` is computed (or being computed) in this context."""
        with self._lock:
            return key in self._values or key in self._pending

    def put(self, key: Hashable, value: Any) -> None:
        """Keep `value` under `key` until one `take` (what one view computed on its way and another
        needs whole: the dashboard's SM lanes and the analysis's SM time start from the same estimate)."""
        with self._lock:
            self._values[("kept", key)] = value

    def take(self, key: Hashable) -> Any:
        """What `put` left under `key` (removed), or None."""
        with self._lock:
            return self._values.pop(("kept", key), None)

    @contextlib.contextmanager
    def active(self) -> Iterator[AnalysisContext]:
        """Make this context the one `memo` uses for its timeline (innermost wins) inside the block."""
        token = _ACTIVE.set((*_ACTIVE.get(), self))
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


def context_of(timeline: Timeline) -> AnalysisContext | None:
    """The innermost active context of `timeline`, or None."""
    for ctx in reversed(_ACTIVE.get()):
        if ctx.timeline is timeline:
            return ctx
    return None


@contextlib.contextmanager
def using(timeline: Timeline, context: AnalysisContext | None = None) -> Iterator[AnalysisContext]:
    """`context` (when it is one of `timeline`), else the active context of `timeline`, else a new one
    for the block: the analyses inside share what they derive from `timeline`."""
    if context is not None and context.timeline is timeline:
        if context_of(timeline) is context:
            yield context
            return
        with context.active():
            yield context
        return
    ctx = context_of(timeline)
    if ctx is not None:
        yield ctx
        return
    with AnalysisContext(timeline).active() as ctx:
        yield ctx


def bound(fn: Callable[[], T]) -> Callable[[], T]:
    """fn, to run on another thread with the contexts active here (each call gets its own copy)."""
    snapshot = contextvars.copy_context()
    return lambda: snapshot.copy().run(fn)


def memo(timeline: Timeline, key: Hashable, compute: Callable[[], T]) -> T:
    """compute(), once per key in the active context of `timeline` (`AnalysisContext.memo`); without
    an active context, compute() each time."""
    ctx = context_of(timeline)
    return compute() if ctx is None else ctx.memo(key, compute)


def begun(timeline: Timeline, key: Hashable) -> Any:
    """What a helper thread began under `key` in the active context of `timeline` (waiting for it while it
    runs), or None when nothing was begun there or it failed."""
    ctx = context_of(timeline)
    if ctx is None or not ctx.holds(key):
        return None
    return ctx.memo(key, lambda: None)


def column(timeline: Timeline, name: str) -> np.ndarray:
    """An event column as a numpy array (the Timeline holds numpy columns: no pandas, no copy)."""
    return timeline.col(name)


def lane_column(timeline: Timeline, name: str) -> np.ndarray:
    """A column of the lane table as a numpy array."""
    return timeline.lane_col(name)
