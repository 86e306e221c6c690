"""HTML report: ONE self-contained file that works offline.

plotly.js is inlined once; every figure is embedded as JSON (without plotly.js and without its own copy
of the layout template: one shared template) and drawn by one small script. Figures are aggregated
(binned utilization, top-N bars), never raw events, so the file stays small whatever the trace size.
A Content-Security-Policy forbids every remote load; all untrusted text goes through html.escape, and
figure JSON is encoded with plotly's script-safe encoder (`<`, `>`, `/`, `&` as \\u escapes).

This module puts the sections in order; html_page.py holds the page (limits, style, figures, escaping),
html_sections.py the sections about one run, html_compare.py the comparison.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgspec
import pandas as pd

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.results import Analysis
from tracelab.model import Timeline
from tracelab.render.figures import dashboard as dash_figures
from tracelab.render.format import run_origin
from tracelab.render.reports import figures as rf
from tracelab.render.reports.html_compare import comparison_html
from tracelab.render.reports.html_page import FULL, Figures, Limits, esc, html_table, page
from tracelab.render.reports.html_sections import (
    busiest_rows,
    device_cards,
    devices_table,
    findings_table,
    gaps_table,
    health_html,
    kernels_table,
    metadata_table,
    narrative,
    sm_section,
)
from tracelab.render.reports.meta import report_title
from tracelab.text_format import fmt_ns


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
    figs = Figures()  # figures are numbered in the order they are placed
    title = f"tracelab report: {esc(report_title(analysis, timeline), 160)}"
    body = _summary(analysis, timeline, title, limits, extras, figs)
    body += ['<h2 id="findings">Findings</h2>', findings_table(analysis, limits)]
    body += _gaps_section(analysis, figs, limits)
    body += _critical_path_section(critical_path)
    if analysis.devices:
        body += ['<h2 id="overlap">Overlap</h2>', figs.place(dash_figures.overlap_bars_figure(analysis.devices))]
    if timeline is not None and analysis.devices:
        body += _utilization_section(analysis, timeline, figs, limits)
    if analysis.devices:
        body += _streams_section(analysis, timeline, figs, limits)
    if kernels is not None:
        body += _kernels_section(kernels, figs, limits)
    if comparison is not None:
        body.append(comparison_html(comparison, figs, limits, labels))
    return page(title, body, figs)


def _summary(
    analysis: Analysis, timeline: Timeline | None, title: str, limits: Limits, extras: tuple | None, figs: Figures
) -> list[str]:
    """Title, the line under it, summary (narrative, device cards, trace health), run, devices, set-up."""
    body = [
        f"<h1>{title}</h1>",
        (f'<p class="muted">generated {datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")} · times on the '
        "trace's own clock · busy = union of kernels, memcpys and memsets; idle = span − busy"
         + (" · compact report (less detail, to stay under the size budget; the .json report has every figure)"
            if limits.compact else "") + "</p>"),
        '<h2 id="summary">Summary</h2>', narrative(analysis), device_cards(analysis),
        *health_html(analysis, extras),
        '<h2 id="run">Run</h2>', metadata_table(analysis, timeline),
        '<h2 id="devices">Devices</h2>', devices_table(analysis),
    ]
    if analysis.devices:
        body.append(figs.place(rf.device_summary_figure(analysis)))
    from tracelab.render.text.setup import setup_sentence

    setup = setup_sentence(analysis, run_origin(analysis))
    if setup is not None:
        body += ['<h2 id="setup">Set-up (before the first step)</h2>', f"<p>{esc(setup)}</p>"]
    return body


def _gaps_section(analysis: Analysis, figs: Figures, limits: Limits) -> list[str]:
    body = [f'<h2 id="gaps">Idle gaps (≥ {fmt_ns(analysis.options.gap_threshold_ns)})</h2>']
    if analysis.gaps:
        body += [figs.place(rf.gaps_by_cause_figure(analysis)), figs.place(rf.gaps_over_time_figure(analysis)),
                 f"<h3>Top {min(limits.top_gaps, len(analysis.gaps))} gaps</h3>",
                 gaps_table(analysis, limits)]
    else:
        body.append("<p>No gaps.</p>")
    return body


def _critical_path_section(cpath: Any) -> list[str]:
    from tracelab.render.text.critical_path import critical_path_table

    if cpath is None:
        return []
    header, rows = critical_path_table(cpath)
    return [
        '<h2 id="critical-path">Critical path</h2>',
        ("<p>What sets each step's length: the chain of host launch → GPU work → waits → collectives, "
         "as shares of the path in each category.</p>"),
        html_table([esc(h, 40) for h in header], [[esc(c, 120) for c in r] for r in rows],
                   numeric=set(range(1, len(header) - 1))),
    ]


def _utilization_section(analysis: Analysis, timeline: Timeline, figs: Figures, limits: Limits) -> list[str]:
    """The busy-fraction heatmap of devices and their busiest streams, then compute / copy / comm activity
    lines of the first devices."""
    rows, edges = rf.binned_utilization(timeline, bins=limits.bins)
    if not len(rows):
        return []
    shown = busiest_rows(rows, limits.max_heatmap_rows)
    omitted = len(rows) - len(shown)
    body = ['<h2 id="utilization">Utilization over time</h2>',
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
    return body


def _streams_section(analysis: Analysis, timeline: Timeline | None, figs: Figures, limits: Limits) -> list[str]:
    """Per-stream utilization (the busiest streams of each device), then per-SM utilization."""
    trimmed = [msgspec.structs.replace(d, streams=tuple(sorted(d.streams, key=lambda st: -st.busy_ns)[:limits.max_streams]))
               for d in analysis.devices]
    body = ['<h2 id="streams">Per-stream utilization</h2>', figs.place(dash_figures.stream_utilization_figure(trimmed))]
    if any(len(d.streams) > limits.max_streams for d in analysis.devices):
        body.append(f'<p class="muted">The {limits.max_streams} busiest streams of each device are shown; every '
                    "stream is in the JSON report.</p>")
    return [*body, '<h2 id="sm">Per-SM utilization</h2>', sm_section(analysis, timeline, figs, limits)]


def _kernels_section(kernels: pd.DataFrame, figs: Figures, limits: Limits) -> list[str]:
    if not len(kernels):
        return ['<h2 id="kernels">Kernels</h2>', "<p>No kernels.</p>"]
    return ['<h2 id="kernels">Kernels</h2>', figs.place(rf.kernels_figure(kernels)), kernels_table(kernels, limits)]
