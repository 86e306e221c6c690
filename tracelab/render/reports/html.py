"""HTML report: ONE self-contained file that works offline.

plotly.js is inlined once; every figure is embedded as JSON (without plotly.js and without its own copy
of the layout template: one shared template) and drawn by one small script. Figures are aggregated
(binned utilization, top-N bars), never raw events, so the file stays small whatever the trace size.
A Content-Security-Policy forbids every remote load; all untrusted text goes through html.escape, and
figure JSON is encoded with plotly's script-safe encoder (`<`, `>`, `/`, `&` as \\u escapes).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.json import to_json_plotly
from plotly.offline import get_plotlyjs

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.results import Analysis
from tracelab.model import Timeline
from tracelab.render.figures import dashboard as dash_figures
from tracelab.render.format import run_origin
from tracelab.render.reports import figures as rf
from tracelab.render.reports.meta import metadata_rows, report_title
from tracelab.render.text.compare import (
    compared_devices,
    device_label,
    device_rows,
    finding_rows,
    fmt_fraction,
    gap_rows,
    green_context_rows,
    green_context_title,
    kernel_rows,
    shorten,
    side_label,
    verdict_detail,
    verdict_line,
)
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.render.text.green import green_context_message
from tracelab.text_format import fmt_ns, fmt_offset, fmt_pct

NAME_LIMIT = 160


@dataclass(frozen=True)
class Limits:
    """How much detail a report embeds. COMPACT is used when the full report would pass the size budget."""

    top_gaps: int = 15
    top_kernels: int = 30
    bins: int = 200
    max_activity_devices: int = 4  # per-device activity figures (the heatmap shows every device)
    max_sm_devices: int = 2  # per-SM lane heatmaps (132 rows each on an H100)
    sm_bins: int = 120
    max_heatmap_rows: int = 64  # utilization heatmap: device rows + the busiest streams
    max_streams: int = 24  # per-stream bars per device
    title_limit: int = 400  # full kernel names in the tooltip, cut (0: no tooltip)
    top_findings: int = 100
    text_limit: int = 600  # finding messages, evidence
    compact: bool = False


FULL = Limits()
COMPACT = Limits(top_gaps=10, top_kernels=15, bins=120, max_activity_devices=1, max_sm_devices=1, sm_bins=60,
                 max_heatmap_rows=24, max_streams=12, title_limit=0, top_findings=25, text_limit=200, compact=True)

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; frame-src 'none'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'"
)
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showLink": False, "showSendToCloud": False}

_CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:0;color:#1d2733;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:16px 28px 60px}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d9dee4;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;background:#fff;font-size:13px}
th,td{border:1px solid #d9dee4;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all;max-width:640px}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #d9dee4;border-radius:6px;padding:10px 14px;min-width:230px}
.card b{font-size:20px}.muted{color:#66717f;font-size:12px}
.sev-critical{color:#b00020;font-weight:600}.sev-warning{color:#a85a00;font-weight:600}.sev-info{color:#2b6cb0}
.fig{background:#fff;border:1px solid #d9dee4;border-radius:6px;margin:8px 0 14px;min-height:200px}
ul.narrative li{margin:3px 0}.cmp{display:flex;flex-wrap:wrap;gap:0 22px}.new{color:#b00020}.gone{color:#1b7f3b}
"""


_SECTIONS = (
    ("summary", "summary"), ("devices", "devices"), ("findings", "findings"), ("gaps", "gaps"), ("overlap", "overlap"),
    ("utilization", "utilization"), ("streams", "streams"), ("sm", "SMs"), ("kernels", "kernels"),
    ("comparison", "comparison"),
)


@dataclass(frozen=True)
class _Fig:
    id: str
    figure: go.Figure


class _Figures:
    """Collects figures; each `place` returns the div that will hold it."""

    def __init__(self) -> None:
        self.items: list[_Fig] = []

    def place(self, fig: go.Figure) -> str:
        fid = f"fig{len(self.items)}"
        self.items.append(_Fig(fid, fig))
        return f'<div class="fig" id="{fid}"></div>'

    def script(self) -> str:
        template = pio.templates["plotly_white"].to_plotly_json()
        figs = []
        for f in self.items:
            d = f.figure.to_plotly_json()
            layout = dict(d.get("layout", {}))
            layout.pop("template", None)
            figs.append({"id": f.id, "data": d.get("data", []), "layout": layout})
        return (
            "<script>(function(){var T="
            + to_json_plotly(template)
            + ";var F="
            + to_json_plotly(figs)
            + ";var C="
            + to_json_plotly(PLOT_CONFIG)
            + ";F.forEach(function(f){f.layout.template=T;Plotly.newPlot(f.id,f.data,f.layout,C);});})();</script>"
        )


def _e(text: object, limit: int | None = None, *, middle: bool = False) -> str:
    """Untrusted text as HTML; longer than `limit`: cut at the end (in the middle with `middle`)."""
    s = str(text)
    if middle:
        s = shorten(s, limit)
    elif limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


def _code(text: str) -> str:
    return f"<code>{_e(text)}</code>"


def _table(header: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """Cells must already be escaped HTML."""
    numeric = numeric if numeric is not None else set(range(1, len(header)))
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    thead = f"<thead><tr>{head}</tr></thead>" if any(header) else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _metadata(analysis: Analysis, timeline: Timeline | None) -> str:
    rows = [[_e(k, 80), _e(v, 500)] for k, v in metadata_rows(analysis, timeline)]
    return _table(["", ""], rows, numeric=set())


def _device_cards(analysis: Analysis) -> str:
    cards = []
    for d in analysis.devices:
        frac = d.busy_ns / d.span_ns if d.span_ns else 0.0
        ngaps = sum(1 for g in analysis.gaps if (g.rank, g.device) == (d.rank, d.device))
        cards.append(
            f'<div class="card"><div class="muted">rank {d.rank} · GPU {d.device} · {_e(d.name or "unknown GPU", 60)}'
            f" · {d.sm_count or '?'} SMs</div><b>{fmt_fraction(frac)}</b> busy"
            f'<div class="muted">span {fmt_ns(d.span_ns)} · busy {fmt_ns(d.busy_ns)} · idle {fmt_ns(d.idle_ns)}<br>'
            f"{d.kernels} kernels · {d.memcpys} memcpys · {d.memsets} memsets · {ngaps} gaps<br>"
            f"SM busy {fmt_fraction(d.sm.busy_fraction)} ({_e(d.sm.source)})</div></div>"
        )
    return '<div class="cards">' + "".join(cards) + "</div>" if cards else "<p>No GPU activity in this trace.</p>"


def _devices_table(analysis: Analysis) -> str:
    rows = [
        [f"r{d.rank}/d{d.device}", _e(d.name or "unknown GPU", 60), fmt_ns(d.span_ns), fmt_ns(d.busy_ns), fmt_ns(d.idle_ns),
         fmt_fraction(d.busy_ns / d.span_ns if d.span_ns else 0), fmt_ns(d.kernel_ns), fmt_ns(d.memcpy_ns),
         fmt_ns(d.memset_ns), fmt_ns(d.comm_ns), fmt_ns(d.overlap.compute_compute_ns), fmt_ns(d.overlap.compute_copy_ns),
         fmt_ns(d.overlap.compute_comm_ns), fmt_ns(d.overlap.copy_copy_ns)]
        for d in analysis.devices
    ]
    return _table(
        ["device", "GPU", "span", "busy", "idle", "busy %", "kernels", "memcpy", "memset", "comm",
         "compute ∩ compute", "compute ∩ copy", "compute ∩ comm", "copy ∩ copy"],
        rows, numeric=set(range(2, 14)),
    )


def _findings(analysis: Analysis, limits: Limits) -> str:
    if not analysis.findings:
        return "<p>No findings.</p>"
    ranked = sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))
    rows = [
        [f'<span class="sev-{_e(f.severity)}">{_e(f.severity)}</span>', _code(f.rule), str(f.count),
         fmt_ns(f.wasted_ns), _e(f.message, limits.text_limit), _e(f.where, limits.text_limit)]
        for f in ranked[: limits.top_findings]
    ]
    table = _table(["severity", "rule", "count", "wasted", "what", "where (evidence)"], rows, numeric={2, 3})
    hidden = len(ranked) - limits.top_findings
    return table + (f'<p class="muted">{hidden} more findings in the .json report.</p>' if hidden > 0 else "")


def _gaps(analysis: Analysis, limits: Limits) -> str:
    origin = run_origin(analysis)
    top = sorted(analysis.gaps, key=lambda g: -int(g.duration_ns))[:limits.top_gaps]
    rows = [
        [f"r{g.rank}/d{g.device}", fmt_offset(g.start_ns, origin), fmt_ns(g.duration_ns),
         _code(g.cause), _e(evidence, limits.text_limit)]
        for g, evidence in zip(top, gap_evidence(analysis, top))
    ]
    return _table(["device", "at (from the run start)", "duration", "cause", "evidence"], rows,
                  numeric={1, 2})


def _name_cell(name: str, limits: Limits) -> str:
    shown = _e(name or "(unnamed)", NAME_LIMIT, middle=True)
    if limits.title_limit and len(name) > NAME_LIMIT:
        return f'<span title="{_e(name, limits.title_limit, middle=True)}">{shown}</span>'
    return shown


def _kernels(kernels: pd.DataFrame, limits: Limits) -> str:
    rows = []
    for i, r in enumerate(kernels.head(limits.top_kernels).itertuples(index=False)):
        name = r.name or "(unnamed)"
        rows.append(
            [str(i + 1), _name_cell(name, limits) + (" <i>(comm)</i>" if r.comm else ""),
             f"{r.calls:,}", fmt_ns(r.total_ns), fmt_ns(r.mean_ns), fmt_ns(r.min_ns), fmt_ns(r.max_ns), fmt_fraction(r.share)]
        )
    table = _table(["#", "kernel", "calls", "total", "mean", "min", "max", "share"], rows, numeric={0, 2, 3, 4, 5, 6, 7})
    table = table.replace("<td>", '<td class="name">')  # only the name column is not numeric
    hidden = len(kernels) - limits.top_kernels
    more = f'<p class="muted">{hidden} more kernels not shown.</p>' if hidden > 0 else ""
    return table + more


def _narrative(analysis: Analysis) -> str:
    items = []
    for d in analysis.devices:
        frac = d.busy_ns / d.span_ns if d.span_ns else 0.0
        gaps = [g for g in analysis.gaps if (g.rank, g.device) == (d.rank, d.device)]
        text = (f"<b>r{d.rank}/d{d.device}</b> ({_e(d.name or 'unknown GPU', 60)}) was busy <b>{fmt_fraction(frac)}</b> "
                f"of its {fmt_ns(d.span_ns)} span")
        if gaps:
            by: dict[str, int] = {}
            for g in gaps:
                by[g.cause] = by.get(g.cause, 0) + int(g.duration_ns)
            top = max(by, key=by.__getitem__)
            text += f"; {len(gaps)} gaps total {fmt_ns(sum(by.values()))}, mostly <code>{_e(top)}</code> ({fmt_ns(by[top])})"
        items.append(f"<li>{text}.</li>")
    for f in sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))[:3]:
        items.append(f'<li><span class="sev-{_e(f.severity)}">{_e(f.rule)}</span> ({fmt_ns(f.wasted_ns)}): {_e(f.message, 300)}</li>')
    return '<ul class="narrative">' + "".join(items) + "</ul>"


def _busiest_rows(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    """Every device row, then the busiest stream rows, up to `limit` rows (order kept)."""
    if len(rows) <= limit:
        return rows
    busy = np.array([b.sum() for b in rows["busy"]])  # one value per row (a few per stream)
    is_device = rows["stream"].to_numpy() < 0
    keep = is_device.copy()
    room = max(limit - int(is_device.sum()), 0)
    streams = np.flatnonzero(~is_device)
    keep[streams[np.argsort(-busy[streams], kind="stable")[:room]]] = True
    return rows[keep]


def _sm_section(analysis: Analysis, timeline: Timeline | None, figs: _Figures, limits: Limits) -> str:
    """SM busy per device and partition (from the analysis), then the per-SM lanes of the first devices
    that have SM data (engineer H's figures: measured from probes or estimated from launch configs)."""
    with_sm = [d for d in analysis.devices if d.sm.source != "none"]
    if not with_sm:
        return ('<p class="muted">No per-SM data: the trace has neither probe records nor the launch '
                "configurations and SM counts an estimate needs.</p>")
    parts = [figs.place(rf.sm_partitions_figure(analysis))]
    if timeline is None:
        return "".join(parts)
    try:
        from tracelab.analyses.sm.summary import sm_grid, sm_utilization
        from tracelab.render.figures.sm import partition_utilization_figure, sm_lanes_figure
    except ImportError:  # per-SM lanes not available in this build
        return "".join(parts)
    for d in with_sm[:limits.max_sm_devices]:
        grid = sm_grid(timeline, d.rank, d.device, bins=limits.sm_bins)
        if grid.busy.size:
            parts.append(figs.place(sm_lanes_figure(grid, compact=True, origin_ns=run_origin(analysis))))
        if d.sm.partitions:
            util = sm_utilization(timeline, d.rank, d.device, bins=limits.bins)
            if len(util):
                parts.append(figs.place(partition_utilization_figure(util, origin_ns=run_origin(analysis))))
    if len(with_sm) > limits.max_sm_devices:
        parts.append(f'<p class="muted">SM lanes shown for the first {limits.max_sm_devices} of {len(with_sm)} '
                     "devices.</p>")
    return "".join(parts)


def _comparison(c: Comparison, figs: _Figures, limits: Limits, labels: tuple[str, str] | None = None) -> str:
    la, lb = labels or (side_label(c.a), side_label(c.b))
    w = c.wasted_ns
    parts = [
        '<h2 id="comparison">Comparison</h2>',
        (f'<p>Baseline <b>A</b>: <span title="{_e(c.a.source, 300)}">{_e(la, 300)}</span><br>'
         f'Variant <b>B</b>: <span title="{_e(c.b.source, 300)}">{_e(lb, 300)}</span><br>'
        '<span class="muted">Deltas are B − A; percentages are relative to A.</span></p>'),
    ]
    if c.verdict is not None:
        parts.append(f'<p class="verdict"><b>{_e(verdict_line(c.verdict, None))}</b><br>'
                     f'<span class="muted">{_e(verdict_detail(c.verdict))}</span></p>')
    parts += [f'<p class="muted">note: {_e(n, 400)}</p>' for n in c.notes]
    parts.append(
        f'<p>Findings: <b class="new">{c.new_findings} new</b>, <b class="gone">{c.gone_findings} gone</b>, '
        f"<b>{c.changed_findings} changed</b>; time wasted by findings {fmt_ns(w.a)} → {fmt_ns(w.b)} ({fmt_pct(w.pct)}).</p>"
    )
    if c.devices:
        parts.append(figs.place(rf.comparison_device_figure(c)))
    cards = []
    for d in compared_devices(c):
        present = {"both": "", "a": " (only in A)", "b": " (only in B)"}[d.present]
        name = _e(d.name_a or d.name_b or "unknown GPU", 60) if d.rank >= 0 else "all matched devices"
        cards.append(f"<div><h3>Device {_e(device_label(d))}: {name}{present}</h3>"
                     + _table(["", "A", "B", "Δ", "%"], [[_e(x) for x in r] for r in device_rows(d)]) + "</div>")
    parts.append('<div class="cmp">' + "".join(cards) + "</div>")
    if c.green_contexts is not None:
        parts += [f"<h3>Green contexts: {_e(green_context_title(c))}</h3>",
                  f'<p class="green-explanation">{_e(green_context_message(c.green_contexts))}</p>',
                  _table(["", "A", "B", "B / A"], [[_e(x) for x in r] for r in green_context_rows(c)])]
    gaps = gap_rows(c, _code)
    parts += ["<h3>Gaps by cause</h3>", _table(["cause", "count A", "count B", "time A", "time B", "Δ", "%"], gaps)]
    if gaps:
        parts.append(figs.place(rf.comparison_gaps_figure(c)))
    if c.findings:
        rows = finding_rows(c, rule=_code, status=lambda s: f'<span class="{_e(s)}">{_e(s)}</span>', severity=_e)
        parts += ["<h3>Findings</h3>",
                  _table(["rule", "status", "severity A", "severity B", "count A", "count B", "wasted A", "wasted B"],
                         rows, numeric={4, 5, 6, 7})]
    if c.kernels_compared and c.kernels:
        rows = kernel_rows(c, lambda n: _name_cell(n, limits))
        parts += ["<h3>Top kernels</h3>", figs.place(rf.comparison_kernels_figure(c)),
                  _table(["kernel", "calls A", "calls B", "total A", "total B", "Δ", "%"], rows).replace(
                      "<td>", '<td class="name">')]
    return "".join(parts)


def render_html(
    analysis: Analysis,
    timeline: Timeline | None,
    kernels: pd.DataFrame | None = None,
    comparison: Comparison | None = None,
    limits: Limits = FULL,
    labels: tuple[str, str] | None = None,
    extras: tuple | None = None,
    critical_path: Any = None,
) -> str:
    """The whole report as one HTML string. `kernels` is `kernel_summary(timeline)`; `labels` name the
    compared runs (A, B); `extras` (health, range projection, memory) and `critical_path` are computed by
    the caller (`tracelab.api.report_parts`)."""
    figs = _Figures()
    title = f"tracelab report: {_e(report_title(analysis, timeline), 160)}"
    body = [
        f"<h1>{title}</h1>",
        (f'<p class="muted">generated {datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")} · times on the '
        "trace's own clock · busy = union of kernels, memcpys and memsets; idle = span − busy"
         + (" · compact report (less detail, to stay under the size budget; the .json report has every figure)"
            if limits.compact else "") + "</p>"),
        '<h2 id="summary">Summary</h2>', _narrative(analysis), _device_cards(analysis),
        *_health_html(analysis, extras),
        '<h2 id="run">Run</h2>', _metadata(analysis, timeline),
        '<h2 id="devices">Devices</h2>', _devices_table(analysis),
    ]
    if analysis.devices:
        body.append(figs.place(rf.device_summary_figure(analysis)))
    from tracelab.render.text.setup import setup_sentence

    setup = setup_sentence(analysis, run_origin(analysis))
    if setup is not None:
        body += ['<h2 id="setup">Set-up (before the first step)</h2>', f"<p>{_e(setup)}</p>"]
    body += ['<h2 id="findings">Findings</h2>', _findings(analysis, limits)]
    body.append(f'<h2 id="gaps">Idle gaps (≥ {fmt_ns(analysis.options.gap_threshold_ns)})</h2>')
    if analysis.gaps:
        body += [figs.place(rf.gaps_by_cause_figure(analysis)), figs.place(rf.gaps_over_time_figure(analysis)),
                 f"<h3>Top {min(limits.top_gaps, len(analysis.gaps))} gaps</h3>",
                 _gaps(analysis, limits)]
    else:
        body.append("<p>No gaps.</p>")
    from tracelab.render.text.critical_path import critical_path_table

    cpath = critical_path
    if cpath is not None:
        header, rows = critical_path_table(cpath)
        body += [
            '<h2 id="critical-path">Critical path</h2>',
            ("<p>What sets each step's length: the chain of host launch → GPU work → waits → collectives, "
             "as shares of the path in each category.</p>"),
            _table([_e(h, 40) for h in header], [[_e(c, 120) for c in r] for r in rows],
                   numeric=set(range(1, len(header) - 1))),
        ]
    if analysis.devices:
        body += ['<h2 id="overlap">Overlap</h2>', figs.place(dash_figures.overlap_bars_figure(analysis.devices))]
    if timeline is not None and analysis.devices:
        rows, edges = rf.binned_utilization(timeline, bins=limits.bins)
        if len(rows):
            shown = _busiest_rows(rows, limits.max_heatmap_rows)
            omitted = len(rows) - len(shown)
            body += ['<h2 id="utilization">Utilization over time</h2>',
                     (f'<p class="muted">busy fraction of {len(edges) - 1} time bins of '
                     f"{fmt_ns((edges[-1] - edges[0]) / max(len(edges) - 1, 1))} each"
                     + (f"; {omitted} less busy streams not shown" if omitted else "") + "</p>"),
                     figs.place(rf.utilization_heatmap_figure(shown, edges, run_origin(analysis)))]
            for d in analysis.devices[:limits.max_activity_devices]:
                series = rf.kind_binned(timeline, d.rank, d.device, edges)
                if series:
                    label = f"r{d.rank}/d{d.device}: compute, copy and comm activity"  # not `title`: the page's
                    body.append(figs.place(rf.activity_figure(series, edges, label, run_origin(analysis))))
            if len(analysis.devices) > limits.max_activity_devices:
                body.append(f'<p class="muted">Activity lines shown for the first {limits.max_activity_devices} of '
                            f"{len(analysis.devices)} devices; the heatmap above shows all.</p>")
    if analysis.devices:
        trimmed = [replace(d, streams=tuple(sorted(d.streams, key=lambda st: -st.busy_ns)[:limits.max_streams]))
                   for d in analysis.devices]
        body += ['<h2 id="streams">Per-stream utilization</h2>', figs.place(dash_figures.stream_utilization_figure(trimmed))]
        if any(len(d.streams) > limits.max_streams for d in analysis.devices):
            body.append(f'<p class="muted">The {limits.max_streams} busiest streams of each device are shown; every '
                        "stream is in the JSON report.</p>")
        body += ['<h2 id="sm">Per-SM utilization</h2>', _sm_section(analysis, timeline, figs, limits)]
    if kernels is not None:
        body.append('<h2 id="kernels">Kernels</h2>')
        if len(kernels):
            body += [figs.place(rf.kernels_figure(kernels)), _kernels(kernels, limits)]
        else:
            body.append("<p>No kernels.</p>")
    if comparison is not None:
        body.append(_comparison(comparison, figs, limits, labels))
    nav = " · ".join(f'<a href="#{sid}">{label}</a>' for sid, label in _SECTIONS if f'id="{sid}"' in "".join(body))
    body.insert(2, f'<nav class="muted">{nav}</nav>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{_CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head>\n<body><main>"
        + "\n".join(body)
        + "</main>\n"
        + figs.script()
        + "</body></html>\n"
    )


def _health_html(analysis: Analysis, extras: tuple | None) -> list[str]:
    """The trace health section (tracelab/analyses/health.py), then GPU time by range and GPU memory (the
    report's summary area: what the trace supports, where the GPU time went); nothing without them."""
    if extras is None:
        return []
    h, projection, mem = extras
    rows = "".join(
        f"<tr><td>{html.escape(c.status)}</td><td>{html.escape(c.name)}</td><td>{html.escape(c.summary)}</td></tr>"
        for c in h.checks
    )
    weak = "".join(f"<li>finding <code>{html.escape(r)}</code> is weakened: {html.escape(w)}</li>" for r, w in h.weakened)
    return ['<h2 id="health">Trace health</h2>', f"<table><tbody>{rows}</tbody></table>",
            f"<ul>{weak}</ul>" if weak else "", *_ranges_html(projection), *_memory_html(mem, analysis)]


def _ranges_html(p) -> list[str]:
    from tracelab.render.reports.extras import TOP_RANGES

    if not p.stats:
        return []
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{html.escape(s.kind)}</td><td>{s.calls}</td><td>{fmt_ns(s.gpu_ns)}</td>"
        f"<td>{fmt_ns(s.kernel_ns)}</td><td>{fmt_ns(s.span_ns)}</td><td>{s.share:.1%}</td></tr>"
        for s in p.stats[:TOP_RANGES]
    )
    head = "<tr><th>range</th><th>kind</th><th>calls</th><th>GPU time</th><th>kernels</th><th>span</th><th>share</th></tr>"
    return ['<h2 id="ranges">GPU time by range</h2>',
            (f'<p class="muted">GPU ops launched inside each range on its thread; nested ranges are not subtracted; '
            f"share of the {html.escape(p.reference)}; top {min(TOP_RANGES, len(p.stats))} of {len(p.stats)} names.</p>"),
            f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"]


def _memory_html(mem, analysis: Analysis) -> list[str]:
    if mem is None:
        return []
    from tracelab.text_format import fmt_bytes

    origin = run_origin(analysis)
    rows = "".join(
        f"<tr><td>r{q.rank}/d{q.device}</td><td>{fmt_bytes(q.peak_bytes)}</td><td>{fmt_offset(q.at_ns, origin)}</td>"
        f"<td>{fmt_bytes(q.allocation_bytes)}</td><td>{html.escape(q.op)}</td>"
        f"<td>{fmt_bytes(q.reserved_peak_bytes) if q.reserved_peak_bytes >= 0 else 'n/a'}</td></tr>"
        for q in mem.peaks
    )
    steps = ", ".join(f"#{s.index} {fmt_bytes(s.peak_bytes)}" for s in mem.steps[:40])
    return ['<h2 id="memory">GPU memory</h2>', f'<p class="muted">{html.escape(mem.source)}</p>',
            ("<table><thead><tr><th>device</th><th>peak allocated</th><th>at</th><th>allocation</th><th>in op</th>"
            f"<th>reserved peak</th></tr></thead><tbody>{rows}</tbody></table>"),
            f"<p>peak per step: {html.escape(steps)}</p>" if steps else ""]
