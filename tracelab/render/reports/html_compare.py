"""The HTML report's comparison section: run A against run B (verdict, devices, green contexts, gaps by
cause, findings, top kernels)."""

from __future__ import annotations

from tracelab.analyses.comparison import Comparison
from tracelab.render.reports import figures as rf
from tracelab.render.reports.html_page import Figures, Limits, code_cell, esc, html_table
from tracelab.render.reports.html_sections import name_cell
from tracelab.render.text.compare import (
    compared_devices,
    device_label,
    device_rows,
    finding_rows,
    gap_rows,
    green_context_rows,
    green_context_title,
    kernel_rows,
    side_label,
    verdict_detail,
    verdict_line,
)
from tracelab.render.text.green import green_context_message
from tracelab.text_format import fmt_ns, fmt_pct


def comparison_html(c: Comparison, figs: Figures, limits: Limits, labels: tuple[str, str] | None = None) -> str:
    la, lb = labels or (side_label(c.a), side_label(c.b))
    w = c.wasted_ns
    parts = [
        '<h2 id="comparison">Comparison</h2>',
        (f'<p>Baseline <b>A</b>: <span title="{esc(c.a.source, 300)}">{esc(la, 300)}</span><br>'
         f'Variant <b>B</b>: <span title="{esc(c.b.source, 300)}">{esc(lb, 300)}</span><br>'
        '<span class="muted">Deltas are B − A; percentages are relative to A.</span></p>'),
    ]
    if c.verdict is not None:
        parts.append(f'<p class="verdict"><b>{esc(verdict_line(c.verdict, None))}</b><br>'
                     f'<span class="muted">{esc(verdict_detail(c.verdict))}</span></p>')
    parts += [f'<p class="muted">note: {esc(n, 400)}</p>' for n in c.notes]
    parts.append(
        f'<p>Findings: <b class="new">{c.new_findings} new</b>, <b class="gone">{c.gone_findings} gone</b>, '
        f"<b>{c.changed_findings} changed</b>; time wasted by findings {fmt_ns(w.a)} → {fmt_ns(w.b)} ({fmt_pct(w.pct)}).</p>"
    )
    if c.devices:
        parts.append(figs.place(rf.comparison_device_figure(c)))
    cards = []
    for d in compared_devices(c):
        present = {"both": "", "a": " (only in A)", "b": " (only in B)"}[d.present]
        name = esc(d.name_a or d.name_b or "unknown GPU", 60) if d.rank >= 0 else "all matched devices"
        cards.append(f"<div><h3>Device {esc(device_label(d))}: {name}{present}</h3>"
                     + html_table(["", "A", "B", "Δ", "%"], [[esc(x) for x in r] for r in device_rows(d)]) + "</div>")
    parts.append('<div class="cmp">' + "".join(cards) + "</div>")
    if c.green_contexts is not None:
        parts += [f"<h3>Green contexts: {esc(green_context_title(c))}</h3>",
                  f'<p class="green-explanation">{esc(green_context_message(c.green_contexts))}</p>',
                  html_table(["", "A", "B", "B / A"], [[esc(x) for x in r] for r in green_context_rows(c)])]
    gaps = gap_rows(c, code_cell)
    parts += ["<h3>Gaps by cause</h3>", html_table(["cause", "count A", "count B", "time A", "time B", "Δ", "%"], gaps)]
    if gaps:
        parts.append(figs.place(rf.comparison_gaps_figure(c)))
    if c.findings:
        rows = finding_rows(c, rule=code_cell, status=lambda s: f'<span class="{esc(s)}">{esc(s)}</span>', severity=esc)
        parts += ["<h3>Findings</h3>",
                  html_table(["rule", "status", "severity A", "severity B", "count A", "count B", "wasted A", "wasted B"],
                         rows, numeric={4, 5, 6, 7})]
    if c.kernels_compared and c.kernels:
        rows = kernel_rows(c, lambda n: name_cell(n, limits))
        parts += ["<h3>Top kernels</h3>", figs.place(rf.comparison_kernels_figure(c)),
                  html_table(["kernel", "calls A", "calls B", "total A", "total B", "Δ", "%"], rows).replace(
                      "<td>", '<td class="name">')]
    return "".join(parts)

