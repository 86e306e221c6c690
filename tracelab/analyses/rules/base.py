"""The rule contract. A rule is one module `<id>.py` exporting `RULE = Rule(...)`: its id, a one-line
title (what it detects), its declaration for DESIGN.md's rule table (`fires_when`, `severity`,
`counts`, the thresholds `options` with their defaults, the reference `source`), the `TypedDict` of
its finding's `data`, an `evaluate(ctx, options)` that returns a `Finding` (it fired), a
`NotEvaluated` (the trace lacks what the rule needs: the reason is reported in the analysis notes)
or None (evaluated, nothing found), and a `describe(finding)` that writes its prose.

Rules return structure: `Finding.data` holds the numbers, event references and time windows, typed by
the rule's `data` TypedDict and read by its own `describe` with plain `data["key"]` (a key the rule
stopped writing raises, it never prints a default). `describe` returns (message, where) as plain
strings, numbers written by `tracelab.text_format` (the one formatter, below the analyses);
`tracelab.render.text.findings` only dispatches to it. `FindingContext` is what every rule reads: the
timeline, the device rows, the host views per rank, the device summaries, the displayed gaps, the
steps and the device idle intervals with their causes (independent of the display threshold).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, Protocol, TypedDict

import msgspec
import numpy as np

from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.memo import column
from tracelab.analyses.device.devices import DeviceRows
from tracelab.analyses.gaps.idle import IdleIntervals, idle_intervals
from tracelab.analyses.results import DeviceSummary, Finding, Gap
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import group_rows
from tracelab.text_format import fmt_ns

WARNING_FRACTION = 0.01  # wasted ≥ 1% of the span: warning (else the rule's base severity)
CRITICAL_FRACTION = 0.2  # wasted ≥ 20% of the span: critical


class StepsLike(Protocol):
    """What rules need from `tracelab.analyses.steps.infer.Steps`."""

    def of_rank(self, rank: int) -> tuple[np.ndarray, np.ndarray]: ...


class FindingContext(msgspec.Struct, frozen=True, dict=True):
    timeline: Timeline
    rows: list[DeviceRows]
    hosts: dict[int, HostView]
    devices: tuple[DeviceSummary, ...]
    gaps: Sequence[Gap]
    steps: StepsLike | None = None
    # every idle interval with its cause, when the caller has it (analyze: the gap classification,
    # completed on first use); else computed here
    idle_source: Callable[[], dict[tuple[int, int], IdleIntervals]] | None = None

    def span_ns(self, rank: int | None = None) -> int:
        return sum(d.span_ns for d in self.devices if rank is None or d.rank == rank)

    def col(self, name: str) -> np.ndarray:
        return column(self.timeline, name)

    @property
    def step_base(self) -> int:
        """The index of the first step in the timeline: 0, or A under `--steps A:B` (the scoped timeline
        holds steps A.. and finds them again from 0), so a finding names the steps as the trace numbers them."""
        scope = self.timeline.meta.extra.get("scope") if isinstance(self.timeline.meta.extra, dict) else None
        steps = (scope or {}).get("steps")
        return int(steps[0]) if steps else 0

    def step_bounds(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of a rank's steps, sorted; empty when the trace has none."""
        if self.steps is None:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        return self.steps.of_rank(rank)

    @cached_property
    def memcpys(self) -> np.ndarray:
        """Rows of every memcpy, in event order (from the GPU rows grouped by device: no pass over
        every event)."""
        if not self.rows:
            return np.zeros(0, dtype=np.int64)
        rows = np.sort(np.concatenate([dr.rows for dr in self.rows]))
        return rows[self.col("kind")[rows] == int(EventKind.MEMCPY)]

    @cached_property
    def idle(self) -> dict[tuple[int, int], IdleIntervals]:
        """Every idle interval (> 0 ns) of every device with its cause: what wasted_ns is computed from,
        whatever the display threshold (`--gap-threshold-us`) is."""
        if self.idle_source is not None:
            return self.idle_source()
        return {(dr.rank, dr.device): idle_intervals(self.timeline, dr, self.hosts[dr.rank]) for dr in self.rows}


class NotEvaluated(msgspec.Struct, frozen=True):
    rule: str
    reason: str


Prose = tuple[str, str]  # (message, where) of a finding, as people read it


class Window(TypedDict):
    """The time window every finding's data points at (its first or worst occurrence): `window()`."""

    start_ns: int
    end_ns: int


class Rule(msgspec.Struct, frozen=True):
    id: str
    title: str  # one line: what the rule detects (docs, the generic prose)
    evaluate: Callable[[FindingContext, Mapping[str, Any]], Finding | NotEvaluated | None]
    describe: Callable[[Finding], Prose]  # the finding's (message, where)
    data: type  # the TypedDict of Finding.data (a subclass of Window)
    fires_when: str  # the condition, in words (DESIGN.md's rule table)
    severity: str  # how the severity is chosen, in words
    counts: str  # what `count` / `wasted_ns` are, in words
    options: Mapping[str, Any] = msgspec.field(default_factory=dict)  # thresholds, with their defaults
    source: str = ""  # CUDA docs section / reference for the definition
    # the rule does long work of its own (classifies idle intervals): when the rules run on several
    # threads it starts first, so it does not run alone at the end (results are the same either way)
    long: bool = False


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str)) and not isinstance(v, bool)


def _value(key: str, v: Any) -> str:
    return fmt_ns(v) if key.endswith("_ns") and isinstance(v, (int, float)) else str(v)


def generic_prose(f: Finding, title: str) -> Prose:
    """Prose from the title and the data alone (a rule may use it as its `describe`; render uses it for a
    finding whose rule is not registered): title, count, GPU time and the data's scalar values; where =
    the ranks its data lists."""
    facts = ", ".join(
        f"{k} {_value(k, v)}" for k, v in f.data.items() if _scalar(v) and k not in ("start_ns", "end_ns")
    )
    msg = f"{title}: {f.count} occurrences, {fmt_ns(f.wasted_ns)} of GPU time" + (f" ({facts})" if facts else "")
    places = []
    for v in f.data.values():
        if isinstance(v, list):
            for item in v:
                if isinstance(item, dict) and "rank" in item:
                    extra = ", ".join(f"{k.removesuffix('_ns')} {_value(k, x)}" for k, x in item.items()
                                      if k != "rank" and _scalar(x))
                    places.append(f"rank {item['rank']}" + (f": {extra}" if extra else ""))
    return msg + ".", join_places(places)


def fired(rule: str, ctx: FindingContext, count: int, wasted: int, data: Mapping[str, Any], base: str = "info",
          ) -> Finding:
    """The finding of a rule that fired, its severity by the share of the run's span wasted (`severity`)."""
    return Finding(rule=rule, severity=severity(wasted, ctx.span_ns(), base), count=count, wasted_ns=wasted,
                   data=dict(data))


def severity(wasted: int, span: int, base: str = "info") -> str:
    """critical when wasted ≥ 20% of the span, warning when ≥ 1%, else `base`."""
    if span > 0 and wasted >= CRITICAL_FRACTION * span:
        return "critical"
    if span > 0 and wasted >= WARNING_FRACTION * span:
        return "warning"
    return base


def join_places(places: list[str], limit: int = 4) -> str:
    more = len(places) - limit
    return "; ".join(places[:limit]) + (f"; and {more} more" if more > 0 else "")


def window(start: int, end: int) -> Window:
    """The time window a finding points at (its first or worst occurrence), for `Finding.data`: the
    dashboard's "show in timeline" link opens it."""
    return {"start_ns": int(start), "end_ns": int(end)}


_WORD = re.compile(r"^[A-Za-z0-9_]+$")


def string_ids(strings: tuple[str, ...], pattern: re.Pattern[str]) -> np.ndarray:
    """Ids of the strings the pattern matches (rules ask per device: the answer is kept per string
    table and pattern)."""
    key = (id(strings), pattern.pattern, pattern.flags)
    hit = _STRING_IDS.get(key)
    if hit is not None and hit[0] is strings:
        return hit[1]
    if pattern.flags & re.IGNORECASE and _WORD.match(pattern.pattern):
        # a plain word matched in any case: a substring test of the case-folded string
        word = pattern.pattern.casefold()
        found = (i for i, s in enumerate(strings) if word in (s.lower() if s.isascii() else s.casefold()))
    else:
        found = (i for i, s in enumerate(strings) if pattern.search(s))
    ids = np.fromiter(found, dtype=np.int64)
    ids.flags.writeable = False
    if len(_STRING_IDS) >= 64:
        _STRING_IDS.clear()
    _STRING_IDS[key] = (strings, ids)
    return ids


_STRING_IDS: dict[tuple[int, str, int], tuple[tuple[str, ...], np.ndarray]] = {}


def count_places(ctx: FindingContext, pos: np.ndarray, what: str) -> list[dict[str, int]]:
    """Per (rank, device, stream): how many of the rows pos, most first (structured `where`)."""
    if pos.size == 0:
        return []
    r = ctx.col("rank")[pos].astype(np.int64)
    d = ctx.col("device")[pos].astype(np.int64)
    s = ctx.col("stream")[pos].astype(np.int64)
    group, first = group_rows([r, d, s])  # places in (rank, device, stream) order, hashed not sorted
    counts = np.bincount(group, minlength=first.size)
    order = np.argsort(-counts, kind="stable")
    return [
        {"rank": int(r[first[i]]), "device": int(d[first[i]]), "stream": int(s[first[i]]), what: int(counts[i])}
        for i in order
    ]
