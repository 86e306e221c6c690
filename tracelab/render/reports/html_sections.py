"""The HTML report's sections about one run: summary (narrative, device cards, trace health, GPU time by
range, GPU memory), run metadata, devices, findings, gaps, kernels and per-SM figures. Each returns
escaped HTML; figures are placed through the page's `Figures`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracelab.analyses.results import Analysis
from tracelab.model import Timeline
from tracelab.render.format import run_origin
from tracelab.render.reports import figures as rf
from tracelab.render.reports.html_page import NAME_LIMIT, Figures, Limits, code_cell, esc, html_table
from tracelab.render.reports.meta import metadata_rows
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.text_format import fmt_fraction, fmt_ns, fmt_offset


def metadata_table(analysis: Analysis, timeline: Timeline | None) -> str:
    rows = [[esc(k, 80), esc(v, 500)] for k, v in metadata_rows(analysis, timeline)]
    return html_table(["", ""], rows, numeric=set())


def device_cards(analysis: Analysis) -> str:
    cards = []
    for d in analysis.devices:
        frac = d.busy_ns / d.span_ns if d.span_ns else 0.0
        ngaps = sum(1 for g in analysis.gaps if (g.rank, g.device) == (d.rank, d.device))
        cards.append(
            f'<div class="card"><div class="muted">rank {d.rank} · GPU {d.device} · {esc(d.name or "unknown GPU", 60)}'
            f" · {d.sm_count or '?'} SMs</div><b>{fmt_fraction(frac)}</b> busy"
            f'<div class="muted">span {fmt_ns(d.span_ns)} · busy {fmt_ns(d.busy_ns)} · idle {fmt_ns(d.idle_ns)}<br>'
            f"{d.kernels} kernels · {d.memcpys} memcpys · {d.memsets} memsets · {ngaps} gaps<br>"
            f"SM busy {fmt_fraction(d.sm.busy_fraction)} ({esc(d.sm.source)})</div></div>"
        )
    return '<div class="cards">' + "".join(cards) + "</div>" if cards else "<p>No GPU activity in this trace.</p>"


def devices_table(analysis: Analysis) -> str:
    rows = [
        [f"r{d.rank}/d{d.device}", esc(d.name or "unknown GPU", 60), fmt_ns(d.span_ns), fmt_ns(d.busy_ns), fmt_ns(d.idle_ns),
         fmt_fraction(d.busy_ns / d.span_ns if d.span_ns else 0), fmt_ns(d.kernel_ns), fmt_ns(d.memcpy_ns),
         fmt_ns(d.memset_ns), fmt_ns(d.comm_ns), fmt_ns(d.overlap.compute_compute_ns), fmt_ns(d.overlap.compute_copy_ns),
         fmt_ns(d.overlap.compute_comm_ns), fmt_ns(d.overlap.copy_copy_ns)]
        for d in analysis.devices
    ]
    return html_table(
        ["device", "GPU", "span", "busy", "idle", "busy %", "kernels", "memcpy", "memset", "comm",
         "compute ∩ compute", "compute ∩ copy", "compute ∩ comm", "copy ∩ copy"],
        rows, numeric=set(range(2, 14)),
    )


def findings_table(analysis: Analysis, limits: Limits) -> str:
    if not analysis.findings:
        return "<p>No findings.</p>"
    ranked = sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))
    rows = [
        [f'<span class="sev-{esc(f.severity)}">{esc(f.severity)}</span>', code_cell(f.rule), str(f.count),
         fmt_ns(f.wasted_ns), esc(f.message, limits.text_limit), esc(f.where, limits.text_limit)]
        for f in ranked[: limits.top_findings]
    ]
    table = html_table(["severity", "rule", "count", "wasted", "what", "where (evidence)"], rows, numeric={2, 3})
    hidden = len(ranked) - limits.top_findings
    return table + (f'<p class="muted">{hidden} more findings in the .json report.</p>' if hidden > 0 else "")


def gaps_table(analysis: Analysis, limits: Limits) -> str:
    origin = run_origin(analysis)
    top = sorted(analysis.gaps, key=lambda g: -int(g.duration_ns))[:limits.top_gaps]
    rows = [
        [f"r{g.rank}/d{g.device}", fmt_offset(g.start_ns, origin), fmt_ns(g.duration_ns),
         code_cell(g.cause), esc(evidence, limits.text_limit)]
        for g, evidence in zip(top, gap_evidence(analysis, top))
    ]
    return html_table(["device", "at (from the run start)", "duration", "cause", "evidence"], rows,
                  numeric={1, 2})


def name_cell(name: str, limits: Limits) -> str:
    shown = esc(name or "(unnamed)", NAME_LIMIT, middle=True)
    if limits.title_limit and len(name) > NAME_LIMIT:
        return f'<span title="{esc(name, limits.title_limit, middle=True)}">{shown}</span>'
    return shown


def kernels_table(kernels: pd.DataFrame, limits: Limits) -> str:
    rows = []
    for i, r in enumerate(kernels.head(limits.top_kernels).itertuples(index=False)):
        name = r.name or "(unnamed)"
        rows.append(
            [str(i + 1), name_cell(name, limits) + (" <i>(comm)</i>" if r.comm else ""),
             f"{r.calls:,}", fmt_ns(r.total_ns), fmt_ns(r.mean_ns), fmt_ns(r.min_ns), fmt_ns(r.max_ns), fmt_fraction(r.share)]
        )
    table = html_table(["#", "kernel", "calls", "total", "mean", "min", "max", "share"], rows, numeric={0, 2, 3, 4, 5, 6, 7})
    table = table.replace("<td>", '<td class="name">')  # only the name column is not numeric
    hidden = len(kernels) - limits.top_kernels
    more = f'<p class="muted">{hidden} more kernels not shown.</p>' if hidden > 0 else ""
    return table + more


def narrative(analysis: Analysis) -> str:
    items = []
    for d in analysis.devices:
        frac = d.busy_ns / d.span_ns if d.span_ns else 0.0
        gaps = [g for g in analysis.gaps if (g.rank, g.device) == (d.rank, d.device)]
        text = (f"<b>r{d.rank}/d{d.device}</b> ({esc(d.name or 'unknown GPU', 60)}) was busy <b>{fmt_fraction(frac)}</b> "
                f"of its {fmt_ns(d.span_ns)} span")
        if gaps:
            by: dict[str, int] = {}
            for g in gaps:
                by[g.cause] = by.get(g.cause, 0) + int(g.duration_ns)
            top = max(by, key=by.__getitem__)
            text += f"; {len(gaps)} gaps total {fmt_ns(sum(by.values()))}, mostly <code>{esc(top)}</code> ({fmt_ns(by[top])})"
        items.append(f"<li>{text}.</li>")
    for f in sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))[:3]:
        items.append(f'<li><span class="sev-{esc(f.severity)}">{esc(f.rule)}</span> ({fmt_ns(f.wasted_ns)}): {esc(f.message, 300)}</li>')
    return '<ul class="narrative">' + "".join(items) + "</ul>"


def busiest_rows(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
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


def sm_section(analysis: Analysis, timeline: Timeline | None, figs: Figures, limits: Limits) -> str:
    """SM busy per device and partition (from the analysis), then the per-SM lanes of the first devices
    that have SM data (engineer H's figures: measured from probes or estimated from launch configs)."""
    with_sm = [d for d in analysis.devices if d.sm.source != "none"]
    if not with_sm:
        return ('<p class="muted">No per-SM data: the trace has neither probe records nor the launch '
                "configurations and SM counts an estimate needs.</p>")
    parts = [figs.place(rf.sm_partitions_figure(analysis))]
    if timeline is None:
        return "".join(parts)
    from tracelab.analyses.sm.summary import sm_grid, sm_utilization
    from tracelab.render.figures.sm import partition_utilization_figure, sm_lanes_figure

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


def health_html(analysis: Analysis, extras: tuple | None) -> list[str]:
    """The trace health section (tracelab/analyses/health.py), then GPU time by range and GPU memory (the
    report's summary area: what the trace supports, where the GPU time went); nothing without them."""
    if extras is None:
        return []
    h, projection, mem = extras
    rows = [[esc(c.status), esc(c.name), esc(c.summary)] for c in h.checks]
    weak = "".join(f"<li>finding <code>{esc(r)}</code> is weakened: {esc(w)}</li>" for r, w in h.weakened)
    return ['<h2 id="health">Trace health</h2>', html_table(["", "", ""], rows, numeric=set()),
            f"<ul>{weak}</ul>" if weak else "", *_ranges_html(projection), *_memory_html(mem, analysis)]


def _ranges_html(p) -> list[str]:
    from tracelab.render.reports.extras import TOP_RANGES

    if not p.stats:
        return []
    rows = [[esc(s.name), esc(s.kind), str(s.calls), fmt_ns(s.gpu_ns), fmt_ns(s.kernel_ns), fmt_ns(s.span_ns),
             f"{s.share:.1%}"] for s in p.stats[:TOP_RANGES]]
    return ['<h2 id="ranges">GPU time by range</h2>',
            (f'<p class="muted">GPU ops launched inside each range on its thread; nested ranges are not subtracted; '
            f"share of the {esc(p.reference)}; top {min(TOP_RANGES, len(p.stats))} of {len(p.stats)} names.</p>"),
            html_table(["range", "kind", "calls", "GPU time", "kernels", "span", "share"], rows, numeric=set())]


def _memory_html(mem, analysis: Analysis) -> list[str]:
    if mem is None:
        return []
    from tracelab.text_format import fmt_bytes

    origin = run_origin(analysis)
    rows = [[f"r{q.rank}/d{q.device}", fmt_bytes(q.peak_bytes), fmt_offset(q.at_ns, origin), fmt_bytes(q.allocation_bytes),
             esc(q.op), fmt_bytes(q.reserved_peak_bytes) if q.reserved_peak_bytes >= 0 else "n/a"] for q in mem.peaks]
    steps = ", ".join(f"#{s.index} {fmt_bytes(s.peak_bytes)}" for s in mem.steps[:40])
    return ['<h2 id="memory">GPU memory</h2>', f'<p class="muted">{esc(mem.source)}</p>',
            html_table(["device", "peak allocated", "at", "allocation", "in op", "reserved peak"], rows, numeric=set()),
            f"<p>peak per step: {esc(steps)}</p>" if steps else ""]
