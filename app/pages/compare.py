"""Compare page: /compare?a=BASELINE&b=VARIANT. The same analysis of two runs side by side, with
deltas (variant - baseline) per device, per gap cause, per finding rule and for the top kernels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import dcc, html

from tracelab.api import compare
from tracelab.api.types import RunRecord
from tracelab.errors import BadInput, MissingDependency
from tracelab.render.figures.dashboard import compare_bars_figure
from tracelab.render.text.compare import green_context_rows, green_context_title
from tracelab.render.text.green import green_context_message
from tracelab.text_format import fmt_count, fmt_ns, fmt_pct, fmt_signed_count, fmt_signed_ns

from ..components import data_table, run_options
from ..data import comparison_tables
from ..state import AppState, current_state, describe_error
from ..urls import href

_HEADER_WORDS = (("_delta_pct", " Δ %"), ("delta_pct", "Δ %"), ("_delta", " Δ (B − A)"), ("_a", " A"), ("_b", " B"))


def _header(column: str) -> str:
    """'count_a' -> 'count A', 'time_delta' -> 'time Δ (B − A)', 'delta_pct' -> 'Δ %'."""
    for suffix, words in _HEADER_WORDS:
        if column.endswith(suffix):
            return column[: -len(suffix)].replace("_", " ") + words
    return column.replace("_", " ")


def _columns(df) -> list[dict[str, str]]:
    return [{"name": _header(c), "id": c} for c in df.columns if c != "id"]


def _delta_table(table_id: str, df, time: str):
    """A table of A / B / delta columns: the `time`_a, _b, _delta columns written by text_format (deltas
    signed, a plain 0 for no change), counts with thousands separators (deltas signed)."""
    out = df.copy()
    for c in out.columns:
        values = out[c].tolist()
        if c in (f"{time}_a", f"{time}_b", f"{time}_delta"):
            out[c] = [fmt_signed_ns(v) if c.endswith("_delta") else fmt_ns(v) for v in values]
        elif c.startswith(("count", "calls")):
            out[c] = [fmt_signed_count(v) if c.endswith("_delta") else fmt_count(v) for v in values]
    return data_table(table_id, out, _columns(out))


def green_contexts_section(cmp: Any) -> Any:
    """Why the green-context run is slower or faster than the other run (when exactly one uses green
    contexts): the explanation's text and its key figures. Text is escaped by Dash."""
    g = cmp.green_contexts
    if g is None:
        return ""
    header = html.Tr([html.Th(h) for h in ("", "A (baseline)", "B (variant)", "B / A")])
    body = [html.Tr([html.Td(r[0])] + [html.Td(x, className="n") for x in r[1:]]) for r in green_context_rows(cmp)]
    return html.Div([html.H4(f"Green contexts: {green_context_title(cmp)}"),
                     html.P(green_context_message(g), className="green-explanation"),
                     html.Table([html.Thead(header), html.Tbody(body)], id="compare-green-table")],
                    id="compare-green-contexts")


def compare_content(state: AppState, a: str | None, b: str | None) -> html.Div:
    """The comparison of runs a (baseline) and b (variant), or a line saying what is missing."""
    if not a or not b:
        named = a or b
        text = ("No run of the same workload or program to compare it with: pick the "
                + ("variant (B)." if a else "baseline (A).") if named else "Pick a baseline and a variant run.")
        return html.Div(text, id="compare-result", className="hint")
    try:
        ra, rb = state.record(a), state.record(b)
        an_a, an_b = state.analysis(ra.id), state.analysis(rb.id)
        cmp = compare(an_a, an_b, state.timeline(ra.id), state.timeline(rb.id))
    except (BadInput, MissingDependency) as exc:
        return html.Div(describe_error(exc), id="compare-result", className="error-message")
    t = comparison_tables(cmp)
    dev = t["devices"].copy()
    timed = dev["unit"] == "ns"
    for c in ("baseline", "variant"):
        dev[c] = [fmt_ns(v) if is_t else fmt_count(v) for v, is_t in zip(dev[c].tolist(), timed.tolist())]
    dev["delta"] = [fmt_signed_ns(v) if is_t else fmt_signed_count(v) for v, is_t in zip(dev["delta"].tolist(), timed.tolist())]
    headline = []
    if cmp.totals is not None:
        span, idle = cmp.totals.span_ns, cmp.totals.idle_ns
        headline = [
            html.Span(f"span {fmt_ns(span.a)} → {fmt_ns(span.b)}" + ("" if span.pct is None else f" ({fmt_pct(span.pct)})")),
            " · ", html.Span(f"idle {fmt_ns(idle.a)} → {fmt_ns(idle.b)}"), " · ",
            html.Span(f"busy {cmp.totals.busy_fraction_a:.1%} → {cmp.totals.busy_fraction_b:.1%}"),
        ]
    parts: list[Any] = [
        html.H3(["Baseline ", html.Code(ra.name), " vs variant ", html.Code(rb.name)]),
        html.Div(headline, id="compare-headline", className="compare-headline"),
        html.Ul([html.Li(n) for n in cmp.notes], className="notes") if cmp.notes else "",
        green_contexts_section(cmp),
        dcc.Graph(id="compare-bars", figure=compare_bars_figure(cmp, a_label=f"A: {ra.name}", b_label=f"B: {rb.name}"),
                  config={"displaylogo": False}),
        html.H4("Devices"),
        data_table("compare-devices", dev.drop(columns=["unit"]), _columns(dev.drop(columns=["unit"])), page_size=40),
        html.H4("Idle gaps by cause"),
        _delta_table("compare-gaps", t["gaps"], "time"),
        html.H4(f"Findings ({cmp.new_findings} new, {cmp.gone_findings} gone, {cmp.changed_findings} changed)"),
        _delta_table("compare-findings", t["findings"], "wasted"),
    ]
    if cmp.kernels_compared:
        parts += [html.H4("Top kernels"), _delta_table("compare-kernels", t["kernels"], "total")]
    return html.Div(parts, id="compare-result")


def _variant_order(workload: str) -> list[str]:
    try:
        from tracelab.api import workloads

        return [v.name for v in {w.name: w for w in workloads()}[workload].variants]
    except (ImportError, KeyError):
        return []


def _params(r: RunRecord) -> str:
    """The non-default parameters a recorded run's name ends with (workload/variant/backend/params)."""
    parts = r.name.split("/")
    return "/".join(parts[3:]) if len(parts) > 3 else ""


def _source_stem(r: RunRecord) -> str:
    name = Path(r.source or "").name.lower()
    for suffix in (".gz", ".zst", ".json", ".sqlite", ".nsys-rep", ".pt", ".trace"):
        name = name.removesuffix(suffix)
    return name


def related_baseline(records: list[RunRecord], run_id: str) -> str | None:
    """The run to compare `run_id` against: the same workload on the same backend with the same
    parameters in another variant (the workload's first variant, the one showing the problem, else
    the next one); else a run of a trace with the same file name; else None."""
    run = next((r for r in records if r.id == run_id), None)
    if run is None:
        return None
    others = [r for r in records if r.id != run.id]
    if run.workload:
        same = [
            r for r in others
            if r.workload == run.workload and r.backend == run.backend and _params(r) == _params(run)
            and r.variant and r.variant != run.variant
        ]
        if same:
            order = _variant_order(run.workload)
            rank = {v: i for i, v in enumerate(order)}
            return min(same, key=lambda r: (rank.get(r.variant, len(order)), r.variant)).id
    stem = _source_stem(run)
    if stem:
        same_source = [r for r in others if _source_stem(r) == stem]
        if same_source:
            return same_source[0].id
    return None


def default_pair(state: AppState, a: str | None, b: str | None) -> tuple[str | None, str | None]:
    """(baseline, variant) to show: what the URL names; with only one run named, that run and its
    related baseline (`related_baseline`); with none, the newest run and its related baseline. A run of
    another workload or program is never pre-selected: without a related run the other side is None and
    the page asks for it (a DDP run against another workload's run reads nothing useful)."""
    records = state.runs()
    ids = [r.id for r in records]

    def resolve(value: str | None) -> str | None:
        if not value:
            return None
        try:
            return state.record(value).id
        except BadInput:
            return value  # shown as an error in the content

    a_id, b_id = resolve(a), resolve(b)
    if a_id and b_id:
        return a_id, b_id
    if b_id or a_id:
        named = b_id or a_id
        other = related_baseline(records, named)
        return (other, named) if b_id else (named, other)
    if not ids:
        return None, None
    newest = ids[0]
    return related_baseline(records, newest), newest


def compare_layout(state: AppState, a: str | None = None, b: str | None = None) -> html.Div:
    opts = run_options(state.runs())
    a_id, b_id = default_pair(state, a, b)
    return html.Div(
        [
            html.H2("Compare runs"),
            html.Div([html.Label("baseline (A)"), dcc.Dropdown(id="compare-a", options=opts, value=a_id, clearable=False),
                      html.Label("variant (B)"), dcc.Dropdown(id="compare-b", options=opts, value=b_id, clearable=False)],
                     className="compare-pickers"),
            dcc.Link("Permalink", id="compare-permalink", href=href("compare", a=a_id, b=b_id)),
            dcc.Loading(html.Div(compare_content(state, a_id, b_id), id="compare-content"), type="dot"),
        ],
        id="compare-page",
    )


def on_compare(state: AppState, a: str | None, b: str | None) -> tuple[Any, str]:
    return compare_content(state, a, b), href("compare", a=a, b=b)


def layout(a: str | None = None, b: str | None = None, **_ignored: Any) -> html.Div:
    return compare_layout(current_state(), a, b)
