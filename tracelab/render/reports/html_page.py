"""The HTML report's page: how much it embeds (`Limits`), its style and security policy, the figures it
holds (`Figures`: one shared template, drawn by one small script), escaping and tables, and the page
around the sections (`page`)."""

from __future__ import annotations

import html

import msgspec
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.json import to_json_plotly
from plotly.offline import get_plotlyjs

from tracelab.render.text.compare import shorten

NAME_LIMIT = 160


class Limits(msgspec.Struct, frozen=True):
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


class _Fig(msgspec.Struct, frozen=True):
    id: str
    figure: go.Figure


class Figures:
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


def esc(text: object, limit: int | None = None, *, middle: bool = False) -> str:
    """Untrusted text as HTML; longer than `limit`: cut at the end (in the middle with `middle`)."""
    s = str(text)
    if middle:
        s = shorten(s, limit)
    elif limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


def code_cell(text: str) -> str:
    return f"<code>{esc(text)}</code>"


def html_table(header: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """Cells must already be escaped HTML."""
    numeric = numeric if numeric is not None else set(range(1, len(header)))
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    thead = f"<thead><tr>{head}</tr></thead>" if any(header) else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def page(title: str, body: list[str], figs: Figures) -> str:
    """The whole HTML document: head (policy, style, plotly.js), a line of links to the sections present
    (after the title and the line under it), the sections, the figures' script."""
    nav = " · ".join(f'<a href="#{sid}">{label}</a>' for sid, label in _SECTIONS if f'id="{sid}"' in "".join(body))
    body = [*body[:2], f'<nav class="muted">{nav}</nav>', *body[2:]]
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
