"""Shareable URLs: /timeline?run=ID&t0=NS&t1=NS (integer ns on the trace's own clock) and friends."""

from __future__ import annotations

from urllib.parse import urlencode

from tracelab.api.types import RunRecord
from tracelab.errors import BadInput

MIN_SPAN_NS = 1_000  # the narrowest window the timeline zooms into


def href(page: str, **params: object) -> str:
    """'/page?k=v&...' with only the parameters that are set, properly encoded."""
    query = urlencode({k: str(v) for k, v in params.items() if v is not None and v != ""})
    path = "/" + page.strip("/")
    return f"{path}?{query}" if query else path


def timeline_href(
    run_id: str, t0: int | None = None, t1: int | None = None, q: str | None = None, open_ranks: str | None = None
) -> str:
    """The timeline of a run, on [t0, t1) when given, with search `q` (highlighted, counted) and, for a run
    of several ranks, the ranks shown unfolded (`open_ranks`: "1,3", "none"; the first rank without it)."""
    return href(
        "timeline", run=run_id, t0=None if t0 is None else int(t0), t1=None if t1 is None else int(t1), q=q,
        open=open_ranks,
    )


def _parse_ns(value: object, what: str) -> int:
    try:
        text = str(value).strip()
        return int(text) if text.lstrip("-").isdigit() else int(float(text))
    except (TypeError, ValueError, OverflowError):
        raise BadInput(
            f"the time window's {what} must be an integer number of nanoseconds, got {str(value)[:40]!r}"
        ) from None


def parse_window(record: RunRecord, t0: object = None, t1: object = None) -> tuple[int, int]:
    """The window to show: the whole run when t0 / t1 are absent; clamped to the run's extent.
    BadInput (one line) for values that are not numbers, an empty or reversed window, or a window
    that does not touch the run."""
    lo = record.start_ns if record.start_ns is not None else 0
    hi = record.end_ns if record.end_ns is not None else lo
    if hi <= lo:
        hi = lo + MIN_SPAN_NS
    a = lo if t0 in (None, "") else _parse_ns(t0, "start (t0)")
    b = hi if t1 in (None, "") else _parse_ns(t1, "end (t1)")
    if b <= a:
        raise BadInput(f"the time window is empty or reversed: t0={a} must be before t1={b}")
    if b <= lo or a >= hi:
        raise BadInput(
            f"the time window [{a}, {b}) lies outside run {record.id}, which spans [{lo}, {hi}) ns"
        )
    a, b = max(a, lo), min(b, hi)
    if b - a < MIN_SPAN_NS:
        mid = (a + b) // 2
        a, b = mid - MIN_SPAN_NS // 2, mid + MIN_SPAN_NS // 2
    return a, b


def gap_window(start_ns: int, end_ns: int, lo: int | None = None, hi: int | None = None) -> tuple[int, int]:
    """The timeline window that shows a gap (or any interval) with context on both sides: the
    interval takes the middle third of the view. Clamped to [lo, hi] when given."""
    start_ns, end_ns = int(start_ns), int(end_ns)
    pad = max(end_ns - start_ns, MIN_SPAN_NS)
    a, b = start_ns - pad, end_ns + pad
    if lo is not None:
        a = max(a, int(lo))
    if hi is not None:
        b = min(b, int(hi))
    return a, b
