"""The Gaps page's chart as one self-contained SVG document (no plotly.js: loading and running it took
most of the page's draw time, issue 28): each idle gap a point at (start, length) on a log length axis,
coloured by cause, with its cause, length, offset and evidence as a native tooltip (`<title>`) and, when
`links` are given, a link that opens the timeline there. Axis labels come from text_format: offsets
from the run start (`+20.00 ms`) and durations (`10.0 µs`, `1.00 ms`). Every text is XML-escaped.

    gaps_svg(gaps, origin_ns, evidence=None, links=None) -> str    an HTML document holding the SVG
    gaps_svg_element(...) -> str                                  the <svg> element alone, for a page
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from tracelab.analyses.results import Gap
from tracelab.text_format import fmt_ns_many, fmt_rel_many

__all__ = ["CAUSE_COLORS", "gaps_svg"]

CAUSE_COLORS = {
    "host_sync": "#d62728",
    "launch_latency": "#ff7f0e",
    "dependency_wait": "#9467bd",
    "no_work": "#7f7f7f",
    "unknown": "#bcbd22",
    "input_wait": "#17becf",
    "profiler": "#e377c2",
}
WIDTH, HEIGHT = 1400, 320  # the viewBox: the page's width at 1500 px, the iframe's height
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 28, 42  # plot area margins (px of the viewBox)


def offset_ticks(hi_ns: float, n: int = 6) -> list[float]:
    """About n ticks from 0 to hi_ns at a round step (1, 2 or 5 × a power of ten ns)."""
    raw = max(float(hi_ns), 1.0) / max(n - 1, 1)
    mag = 10.0 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return np.arange(0, float(hi_ns) + step / 2, step).tolist()


def duration_ticks(lo_ns: float, hi_ns: float) -> tuple[list[float], list[str]]:
    """Log-axis ticks for durations from lo_ns to hi_ns: 1, 2, 5 × each power of ten (only 1× when the
    range spans more than three decades), labelled by text_format (`10.0 µs`, `2.00 ms`), in ns."""
    lo, hi = max(float(lo_ns), 1.0), max(float(hi_ns), 1.0)
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    steps = (1,) if last - first > 3 else (1, 2, 5)
    vals = [m * 10.0**e for e in range(first, last + 1) for m in steps if lo / 1.5 <= m * 10.0**e <= hi * 1.5]
    if len(vals) < 2:
        vals = [lo, hi] if hi > lo else [lo]
    return vals, fmt_ns_many(vals)


def gaps_svg(
    gaps: Sequence[Gap],
    origin_ns: int,
    evidence: Sequence[str] | None = None,
    links: Sequence[str] | None = None,
) -> str:
    """The chart of `gaps` (see the module docstring) as an HTML document for an iframe's srcdoc."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>a circle:hover{stroke:#000;stroke-width:2}"
        "html,body{margin:0;height:100%;overflow:hidden}</style></head><body>"
        + gaps_svg_element(gaps, origin_ns, evidence, links)
        + "</body></html>"
    )


def gaps_svg_element(
    gaps: Sequence[Gap],
    origin_ns: int,
    evidence: Sequence[str] | None = None,
    links: Sequence[str] | None = None,
) -> str:
    """The chart of `gaps` as one `<svg>` element (a `<p>` when there are none) to put in a page (the
    Gaps page: no iframe, whose document cost a cold page 0.1-0.3 s, issue 28). Its links target the top
    page; points get a hover outline from the page's CSS (`a circle:hover`)."""
    if not len(gaps):
        return f'<p style="{_FONT}color:#666">no idle gaps above the threshold</p>'
    start = np.fromiter((g.start_ns for g in gaps), dtype=np.int64, count=len(gaps)) - int(origin_ns)
    dur = np.fromiter((g.duration_ns for g in gaps), dtype=np.int64, count=len(gaps))
    causes = [g.cause for g in gaps]
    x_hi = max(float(start.max() + dur.max()), 1.0)
    x_ticks = offset_ticks(x_hi)
    y_ticks, y_text = duration_ticks(float(dur.min()), float(dur.max()))
    y_lo, y_hi = np.log10(min(y_ticks[0], max(dur.min(), 1))), np.log10(max(y_ticks[-1], dur.max()))
    y_lo, y_hi = y_lo - 0.05 * max(y_hi - y_lo, 0.3), y_hi + 0.05 * max(y_hi - y_lo, 0.3)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: np.ndarray | list[float]) -> np.ndarray:
        return LEFT + np.asarray(x, dtype=float) / (x_hi * 1.02) * pw + 0.01 * pw

    def py(y: np.ndarray | list[float]) -> np.ndarray:
        return TOP + ph - (np.log10(np.maximum(np.asarray(y, dtype=float), 1.0)) - y_lo) / (y_hi - y_lo) * ph

    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'style="width:100%;height:100%" preserveAspectRatio="xMinYMin meet" role="img" aria-label="idle gaps by start and length" {_FONT_ATTR}>'
        ),
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for v, t, y in zip(y_ticks, y_text, py(y_ticks).tolist()):
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(t)}</text>'
        )
    x_text = ["0", *fmt_rel_many(x_ticks[1:])]
    for t, x in zip(x_text, px(x_ticks).tolist()):
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="#e4e4e4"/>'
            f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{escape(t)}</text>'
        )
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 4}" text-anchor="middle" fill="#555">gap start (from the '
        "run start)</text>"
    )
    out.append(
        f'<text x="12" y="{TOP + ph / 2}" text-anchor="middle" fill="#555" '
        f'transform="rotate(-90 12 {TOP + ph / 2})">gap length</text>'
    )
    # legend: the causes present, in order
    present = [c for c in CAUSE_COLORS if c in set(causes)] + sorted(set(causes) - set(CAUSE_COLORS))
    lx = LEFT
    for c in present:
        out.append(
            f'<circle cx="{lx + 5}" cy="12" r="5" fill="{CAUSE_COLORS.get(c, "#333")}"/>'
            f'<text x="{lx + 14}" y="16">{escape(c)}</text>'
        )
        lx += 24 + 7 * len(c)
    xs, ys = px(start).round(1).tolist(), py(dur).round(1).tolist()
    lengths, offsets = fmt_ns_many(dur), fmt_rel_many(start)
    ev = list(evidence) if evidence is not None else [""] * len(gaps)
    hrefs = list(links) if links is not None else [None] * len(gaps)
    # the longest last: drawn on top
    for i in np.argsort(dur, kind="stable").tolist():
        tip = escape(f"{causes[i]} · {lengths[i]} at {offsets[i]}" + (f"\n{ev[i]}" if ev[i] else ""))
        dot = (
            f'<circle cx="{xs[i]}" cy="{ys[i]}" r="4.5" fill="{CAUSE_COLORS.get(causes[i], "#333")}" '
            f'fill-opacity="0.85"><title>{tip}</title></circle>'
        )
        out.append(f'<a href="{escape(hrefs[i])}" target="_top">{dot}</a>' if hrefs[i] else dot)
    out.append("</svg>")
    return "".join(out)


_FONT = "font-family:sans-serif;font-size:12px;"
_FONT_ATTR = 'font-family="sans-serif" font-size="12"'
