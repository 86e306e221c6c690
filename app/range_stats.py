"""Statistics of a time range selected on the timeline, computed by the library's analyses on the run
restricted to that range: `tracelab.api.analyze(..., window_us=...)`, the same call and the same
figures as `tracelab analyze RUN --window START_US:END_US` (`tracelab.analyses.scope`: events that
overlap the range, clipped at its edges)."""

from __future__ import annotations

import msgspec
import pandas as pd
from dash import html

from tracelab.api import analyze, run_start, scoped_timeline
from tracelab.api.types import Analysis, EventKind, RunRecord
from tracelab.text_format import fmt_ns

from .state import AppState
from .timeline_view import run_steps


def window_us(origin: int, t0: int, t1: int) -> str:
    """[t0, t1) (trace clock ns) as `--window START_US:END_US` from the run start, exactly (3 decimals)."""

    def us(ns: int) -> str:
        d = int(ns) - int(origin)
        return f"{d // 1000}.{d % 1000:03d}"

    return f"{us(t0)}:{us(t1)}"


class RangeStats(msgspec.Struct, frozen=True):
    t0: int
    t1: int
    window: str  # the range as `--window START_US:END_US`
    analysis: Analysis
    top_kernels: pd.DataFrame  # name, count, total_ns (clipped to the range)
    steps: pd.DataFrame  # rank, start, end, label of the steps overlapping the range


def range_stats(state: AppState, run_id: str, t0: int, t1: int) -> RangeStats:
    """The range's figures: `analyze` of the run restricted to it (cached), its top 5 kernels, its steps."""
    tl = state.timeline(run_id)
    window = window_us(run_start(tl), t0, t1)
    ev = scoped_timeline(tl, window_us=window).events
    k = ev[ev["kind"].to_numpy() == int(EventKind.KERNEL)]
    dur = (k["end"] - k["start"]).to_numpy()
    kernels = (pd.DataFrame({"name": k["name"].to_numpy(), "dur": dur}).groupby("name")["dur"]
               .agg(count="count", total_ns="sum").reset_index().nlargest(5, "total_ns"))
    kernels["name"] = tl.names(kernels["name"].to_numpy())
    steps = run_steps(state, run_id)
    steps = steps[(steps["end"] > t0) & (steps["start"] < t1)]
    analysis = state.cached(("range", run_id, window), lambda: analyze(tl, window_us=window))
    return RangeStats(int(t0), int(t1), window, analysis, kernels, steps)


def _row(label: str, value: str) -> html.Tr:
    return html.Tr([html.Th(label), html.Td(value, className="n")])


def range_panel(record: RunRecord, stats: RangeStats, *, full: bool = False) -> list:
    """The statistics panel of a range: per device busy / idle / overlap, gaps by cause, top kernels,
    steps in range; `full` adds the findings of the range ("analyze this range")."""
    origin = record.start_ns or 0
    a = stats.analysis
    parts: list = [html.Div([html.B(f"Range +{fmt_ns(stats.t0 - origin)} … +{fmt_ns(stats.t1 - origin)}"),
                             f" ({fmt_ns(stats.t1 - stats.t0)}) · same figures as ",
                             html.Code(f"tracelab analyze {record.id} --window {stats.window}")], className="range-head")]
    for d in a.devices:
        window = stats.t1 - stats.t0
        rows = [
            _row("busy", f"{fmt_ns(d.busy_ns)} ({d.busy_ns / window:.1%} of the range)"),
            _row("idle in range", f"{fmt_ns(window - d.busy_ns)}"),
            _row("kernels / memcpy / memset", f"{fmt_ns(d.kernel_ns)} / {fmt_ns(d.memcpy_ns)} / {fmt_ns(d.memset_ns)}"),
            _row("compute ∩ copy", fmt_ns(d.overlap.compute_copy_ns)),
            _row("compute ∩ compute", fmt_ns(d.overlap.compute_compute_ns)),
        ]
        parts.append(html.Div([html.Div(f"rank {d.rank} · GPU {d.device}", className="range-dev"), html.Table(html.Tbody(rows))],
                              className="range-device",
                              **{"data-busy-ns": str(d.busy_ns), "data-rank": str(d.rank), "data-device": str(d.device)}))
    if not a.devices:
        parts.append(html.P("no GPU activity in this range", className="hint"))
    by_cause: dict[str, list[int]] = {}
    for g in a.gaps:
        by_cause.setdefault(g.cause, []).append(g.duration_ns)
    if by_cause:
        parts.append(html.Div(["gaps by cause: "] + [
            html.Span(f"{c} {len(v)} × = {fmt_ns(sum(v))}", className=f"gap-cause cause-{c}")
            for c, v in sorted(by_cause.items(), key=lambda kv: -sum(kv[1]))
        ], className="range-gaps"))
    if len(stats.top_kernels):
        parts.append(html.Div([html.Div("top kernels in range", className="range-dev")] + [
            html.Div([html.Code(str(r.name)[:90]), f" {r.count:,} × · {fmt_ns(r.total_ns)}"])
            for r in stats.top_kernels.itertuples(index=False)
        ], className="range-kernels"))
    n_steps = len(stats.steps)
    parts.append(html.Div(
        f"steps in range: {n_steps}"
        + (f" ({', '.join(stats.steps['label'].astype(str).head(4))}{' …' if n_steps > 4 else ''})" if n_steps else ""),
        className="range-steps"))
    if full:
        items = ([html.Li([html.B(f.rule), f" ({f.severity}) · ", f.message]) for f in a.findings]
                 or [html.Li("no findings in this range")])
        parts.append(html.Div([html.Div("findings in range", className="range-dev"), html.Ul(items)], id="tl-range-findings"))
    return parts
