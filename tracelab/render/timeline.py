"""The dashboard's timeline figure (rows: `tracelab.render.timeline_rows`, re-exported here). Pure
functions. Every string reaching Plotly's SVG goes through `plotly_text` (names are untrusted)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracelab.analyses.results import Gap
from tracelab.model.kinds import EventKind, Flag

from .figures import fmt_ns, plotly_text
from .lod import LEVELS, LodView
from .timeline_rows import (  # noqa: F401 - the rows are part of this module's interface
    ROW_COLUMNS,
    SmRows,
    lane_depth_cap,
    lane_to_row,
    nesting_depth,
    sm_partitions_of,
    sm_row_table,
    stream_label,
    timeline_rows,
)


def axis_unit(span_ns: int) -> tuple[float, str]:
    """The time unit of the timeline's x axis for a window: ms above 5 ms, else µs."""
    return (1e6, "ms") if span_ns > 5_000_000 else (1e3, "µs")


# ---------------------------------------------------------------------------------------------
# classes and colours

EVENT_CLASSES: dict[str, tuple[str, str]] = {  # class -> (legend name, colour)
    "kernel": ("kernels", "#1f77b4"),
    "comm": ("communication", "#9467bd"),
    "memcpy": ("memcpy", "#2ca02c"),
    "memset": ("memset", "#17becf"),
    "sync": ("GPU sync", "#7f7f7f"),
    "annotation": ("GPU annotations", "#bcbd22"),
    "api": ("API calls", "#ff7f0e"),
    "blocking": ("blocking API calls", "#d62728"),
    "cpu_op": ("CPU ops", "#c7c7c7"),
    "nvtx": ("NVTX ranges", "#e377c2"),
    "sm": ("SM activity", "#8c564b"),
    "other": ("other host events", "#aaaaaa"),
}
_THIN = {"cpu_op", "sm", "other"}
IDLE_COLORS = {  # distinct from the event colours (API calls are orange, blocking calls red)
    "host_sync": "#7f1d1d",
    "launch_latency": "#eab308",
    "dependency_wait": "#7c3aed",
    "no_work": "#9ca3af",
    "unknown": "#65a30d",
}
BIN_COLOR = "#4c6a92"
IDLE_ALL_COLOR = "#f2b8b5"
BOX_PX = 12  # thickness of a full-height box


def event_class(events: pd.DataFrame) -> np.ndarray:
    """The drawing class of each event (vectorized)."""
    if "sm_first" in events.columns and "kind" not in events.columns:
        return np.full(len(events), "sm", dtype=object)
    if "kind" not in events.columns:
        return np.full(len(events), "other", dtype=object)
    kind = events["kind"].to_numpy()
    flags = events["flags"].to_numpy() if "flags" in events.columns else np.zeros(len(events), dtype=np.int16)
    api = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER])
    conds = [
        (kind == EventKind.KERNEL) & ((flags & Flag.COMM) != 0),
        kind == EventKind.KERNEL,
        kind == EventKind.MEMCPY,
        kind == EventKind.MEMSET,
        kind == EventKind.SYNC,
        kind == EventKind.GPU_ANNOTATION,
        api & ((flags & Flag.BLOCKING) != 0),
        api,
        kind == EventKind.CPU_OP,
        np.isin(kind, [EventKind.NVTX_RANGE, EventKind.NVTX_MARK]),
    ]
    choices = ["comm", "kernel", "memcpy", "memset", "sync", "annotation", "blocking", "api", "cpu_op", "nvtx"]
    return np.select(conds, choices, default="other").astype(object)


# ---------------------------------------------------------------------------------------------
# drawing helpers


def _segments_xy(x0: np.ndarray, x1: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(x0)
    xs = np.empty(3 * n, dtype=float)
    ys = np.empty(3 * n, dtype=float)
    xs[0::3], xs[1::3], xs[2::3] = x0, x1, np.nan
    ys[0::3], ys[1::3], ys[2::3] = y, y, np.nan
    return xs, ys


def _short(s: str, limit: int) -> str:
    """Long (templated) names cut in the middle."""
    return s if len(s) <= limit else s[: limit * 2 // 3] + "…" + s[-(limit // 3) :]


HOVER_NAME_CHARS = 100


def name_table(strings: Sequence[str], limit: int = HOVER_NAME_CHARS) -> np.ndarray:
    """Escaped, shortened names, indexed by string id (one entry per distinct name; last = "")."""
    return np.array([plotly_text(_short(s, limit)) for s in strings] + [""], dtype=object)


def _names_of(items: pd.DataFrame, names: np.ndarray) -> np.ndarray:
    if "name" not in items.columns:
        return np.full(len(items), "", dtype=object)
    ids = items["name"].to_numpy()
    n = len(names) - 1
    return names[np.where((ids >= 0) & (ids < n), ids, n)]


def _wrap(text: str, width: int = 90) -> str:
    """Long evidence on several hover lines (never cut off)."""
    words, lines, cur = text.split(" "), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return "<br>".join(lines)


@dataclass(frozen=True)
class Overlays:
    """What the timeline draws besides events: gaps (idle lane), steps (start, end, row, label),
    search matches (start, end, row), the correlated selection (events with `row`), and whether
    launch -> GPU flow arrows are drawn for the events in view."""

    gaps: Sequence[Gap] | pd.DataFrame = ()  # a DataFrame as `gaps_frame` makes it
    idle: pd.DataFrame | None = None  # all idle time per idle row, as LodView.bins (busy = idle fraction)
    steps: pd.DataFrame | None = None
    matches: pd.DataFrame | None = None
    highlight: pd.DataFrame | None = None
    flows: bool = True


FLOW_MAX = 400  # arrows drawn only when at most this many launch -> GPU pairs are in view
LABEL_MAX = 400  # names drawn inside at most this many boxes
LABEL_MIN_PX = 36  # boxes narrower than this carry no name
CHAR_PX = 6.5


def timeline_figure(
    view: LodView,
    rows: pd.DataFrame,
    strings: Sequence[str],
    *,
    origin_ns: int,
    sm_view: LodView | None = None,
    overlays: Overlays = Overlays(),
    title: str = "",
    uirevision: str = "timeline",
) -> dict[str, Any]:
    """The timeline (a Plotly figure dict): one horizontal row per `timeline_rows` row, events as WebGL segments with their
    names inside when wide enough, aggregated bins as segments whose thickness is their busy fraction,
    per-device idle lanes coloured by cause, x in µs or ms from `origin_ns`.

    Each drawn event carries customdata [row, start - origin, end - origin, correlation, kind, duration µs]
    (plain float64 JSON numbers) and a compact hover built by a template from it."""
    unit, unit_name = axis_unit(view.t1 - view.t0)
    ns_per_px = view.ns_per_px
    y_of_row = rows["y"].to_numpy(dtype=float) if len(rows) else np.zeros(1)
    n_units = float(rows["height"].sum()) if len(rows) else 1.0
    names = name_table(strings)
    traces: list[Any] = []
    labels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def x(ns: np.ndarray) -> np.ndarray:
        return (np.asarray(ns, dtype=np.float64) - origin_ns) / unit

    def boxes(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x0, x1 with a one-pixel gap at the end of boxes wider than 3 px, so that touching boxes
        (PDL kernels, consecutive steps) stay apart."""
        cut = np.where(end - start > 3 * ns_per_px, ns_per_px, 0.0)
        return x(start), x(end - cut)

    def add_items(items: pd.DataFrame, classes: np.ndarray) -> None:
        if len(items) == 0:
            return
        st, en = items["start"].to_numpy(), items["end"].to_numpy()
        x0, x1 = boxes(st, en)
        row = items["row"].to_numpy()
        y = y_of_row[row]
        kind = items["kind"].to_numpy() if "kind" in items.columns else np.full(len(items), -1)
        corr = items["correlation"].to_numpy() if "correlation" in items.columns else np.full(len(items), -1)
        custom = np.column_stack(
            [row, st - origin_ns, en - origin_ns, corr, kind, np.round((en - st) / 1e3, 3)]
        ).astype(np.float64)
        text = _names_of(items, names)
        for cls in pd.unique(classes):
            m = classes == cls
            legend, color = EVENT_CLASSES.get(cls, EVENT_CLASSES["other"])
            thin = cls in _THIN
            xs, ys = _segments_xy(x0[m], x1[m], y[m])
            traces.append(
                _gl(
                    x=xs, y=ys, mode="lines", line={"color": color, "width": 3 if thin else BOX_PX},
                    name=legend, legendgroup=cls, hoverinfo="skip",
                )
            )
            traces.append(
                _gl(
                    x=(x0[m] + x1[m]) / 2, y=y[m], mode="markers",
                    marker={"color": color, "size": 3 if thin else 5, "opacity": 0.35 if thin else 0.6},
                    name=legend, legendgroup=cls, showlegend=False,
                    text=text[m], customdata=custom[m],
                    hovertemplate="%{text}<br>%{customdata[5]:,.3~f} µs<extra>" + legend + "</extra>",
                )
            )
        wide = (en - st) / ns_per_px >= LABEL_MIN_PX
        if wide.any() and not ("sm_first" in items.columns and "kind" not in items.columns):
            labels.append((st[wide], en[wide], row[wide], text[wide]))

    def add_bins(bins: pd.DataFrame, color: str, group: str, legend: str) -> None:
        """Aggregated short events: a segment per run of bins, as thick as its busy fraction (an
        8 %-busy stretch is a thin line, a fully busy one a full box)."""
        if len(bins) == 0:
            return
        x0, x1 = x(bins["start"].to_numpy()), x(bins["end"].to_numpy())
        y = y_of_row[bins["row"].to_numpy()]
        lv = bins["level"].to_numpy()
        full = {"bins": BOX_PX, "idle-all": 9}.get(group, 5)
        custom = np.column_stack([bins["count"].to_numpy(), np.round(bins["busy"].to_numpy() * 100, 1)])
        for level in range(len(LEVELS)):
            m = lv == level
            if not m.any():
                continue
            xs, ys = _segments_xy(x0[m], x1[m], y[m])
            traces.append(
                _gl(
                    x=xs, y=ys, mode="lines",
                    line={"color": color, "width": max(1.0, full * LEVELS[level])},
                    name=legend, legendgroup=group, hoverinfo="skip",
                    showlegend=level == int(lv.max()),
                )
            )
        traces.append(
            _gl(
                x=(x0 + x1) / 2, y=y, mode="markers",
                marker={"color": color, "size": 4, "opacity": 0.4},
                legendgroup=group, showlegend=False, customdata=custom,
                hovertemplate=(
                    "idle %{customdata[1]}% of this stretch<extra></extra>" if group == "idle-all"
                    else "%{customdata[0]:,} short events<br>busy %{customdata[1]}%<extra></extra>"
                ),
            )
        )

    if overlays.idle is not None:
        add_bins(overlays.idle, IDLE_ALL_COLOR, "idle-all", "idle, all (thickness = idle fraction)")
    _idle_lane(traces, rows, overlays.gaps, view, x, y_of_row)
    add_bins(view.bins, BIN_COLOR, "bins", "short events, aggregated (thickness = busy fraction)")
    add_items(view.items, event_class(view.items))
    if sm_view is not None:
        add_bins(sm_view.bins, EVENT_CLASSES["sm"][1], "sm-bins", "SM activity, aggregated")
        add_items(sm_view.items, np.full(len(sm_view.items), "sm", dtype=object))
    if overlays.steps is not None and len(overlays.steps):
        _steps_lane(traces, labels, overlays.steps, boxes, y_of_row)
    n_flows = _flows(traces, view.items, y_of_row, x) if overlays.flows else 0
    if overlays.matches is not None and len(overlays.matches):
        mx0, mx1 = boxes(overlays.matches["start"].to_numpy(), overlays.matches["end"].to_numpy())
        xs, ys = _segments_xy(mx0, np.maximum(mx1, mx0 + 2 * ns_per_px / unit), y_of_row[overlays.matches["row"].to_numpy()])
        traces.append(
            _gl(
                x=xs, y=ys, mode="lines", line={"color": "#ff00aa", "width": BOX_PX + 6}, opacity=0.55,
                name="search matches", hoverinfo="skip",
            )
        )
    if overlays.highlight is not None and len(overlays.highlight):
        _selection(traces, overlays.highlight, x, y_of_row)
    if labels:
        traces.append(_labels_trace(labels, x, y_of_row, ns_per_px, view.t0, view.t1))

    for tr in traces:  # a drag-selection picks a time range: nothing outside it may fade
        if tr["mode"] == "markers":
            tr["unselected"] = {"marker": {"opacity": tr.get("marker", {}).get("opacity", 1)}}
        elif tr["mode"] == "text":
            tr["unselected"] = {"textfont": {"color": "#111"}}
    # a plain figure dict: plotly's per-property validation (and the deep copies of go.Figure) cost
    # more than everything else in a view; the structure is fixed here and tested
    layout = _layout(rows, view, unit, unit_name, y_of_row, n_units, title, uirevision, origin_ns)
    layout["meta"] = {"flows": n_flows}
    return {"data": traces, "layout": layout}


def _idle_lane(traces: list, rows: pd.DataFrame, gaps: Sequence[Gap], view: LodView, x, y_of_row) -> None:
    """Per device, its gaps on its idle row, one trace per cause ("idle (host_sync)", ...). Gaps
    narrower than a pixel are widened to one so that idle stays visible at whole-run zoom; more than
    MAX_GAPS gaps in view are merged per cause where they lie within a pixel of each other."""
    idle_rows = rows[rows["kind"] == "idle"]
    if not len(gaps) or not len(idle_rows):
        return
    row_of = {(int(r.rank), int(r.device)): int(r.row) for r in idle_rows.itertuples(index=False)}
    g = gaps if isinstance(gaps, pd.DataFrame) else gaps_frame(gaps)
    g = g[(g["end"].to_numpy() > view.t0) & (g["start"].to_numpy() < view.t1)]
    g = g.assign(row=[row_of.get((r, d), -1) for r, d in zip(g["rank"].tolist(), g["device"].tolist())])
    g = g[g["row"] >= 0]
    if g.empty:
        return
    px = view.ns_per_px
    for cause in sorted(set(g["cause"])):
        part = g[g["cause"] == cause].sort_values(["row", "start"])
        st, en, row = part["start"].to_numpy(), part["end"].to_numpy(), part["row"].to_numpy()
        evidence = part["evidence"].to_numpy(dtype=object)
        count = np.ones(len(part), dtype=np.int64)
        if len(part) > MAX_GAPS:  # merge neighbours within a pixel (vectorized)
            new = np.r_[True, (st[1:] - en[:-1] > px) | (row[1:] != row[:-1])]
            grp = np.cumsum(new) - 1
            first = np.flatnonzero(new)
            st, row = st[first], row[first]
            en = np.maximum.reduceat(en, first)
            count = np.bincount(grp)
            evidence = np.where(count > 1, "", evidence[first])
        total = en - st
        en_drawn = np.maximum(en, st + px)
        color = IDLE_COLORS.get(cause, "#333")
        xs, ys = _segments_xy(x(st), x(en_drawn), y_of_row[row])
        name = f"idle ({cause})"
        traces.append(
            _gl(
                x=xs, y=ys, mode="lines", line={"color": color, "width": 9}, name=name,
                legendgroup=f"idle-{cause}", hoverinfo="skip",
            )
        )
        hover = [
            f"{name} · {fmt_ns(t)}" + (f" · {c} gaps" if c > 1 else "") + (f"<br>{_wrap(plotly_text(ev))}" if ev else "")
            for t, c, ev in zip(total.tolist(), count.tolist(), evidence.tolist())
        ] if len(st) <= 2000 else None
        traces.append(
            _gl(
                x=(x(st) + x(en_drawn)) / 2, y=y_of_row[row], mode="markers",
                marker={"color": color, "size": 5, "opacity": 0.5}, legendgroup=f"idle-{cause}",
                showlegend=False, name=name, hovertext=hover, hoverinfo="text" if hover else "skip",
            )
        )


MAX_GAPS = 2000


def gaps_frame(gaps: Sequence[Gap], evidence: Sequence[str] | None = None) -> pd.DataFrame:
    """Gaps as columns (rank, device, start, end, cause, evidence), for the idle lanes; `evidence`: each
    gap's evidence text in the order of `gaps` (tracelab.render.gap_evidence; '' without it)."""
    return pd.DataFrame(
        {
            "rank": np.array([gp.rank for gp in gaps], dtype=np.int64),
            "device": np.array([gp.device for gp in gaps], dtype=np.int64),
            "start": np.array([gp.start_ns for gp in gaps], dtype=np.int64),
            "end": np.array([gp.end_ns for gp in gaps], dtype=np.int64),
            "cause": [str(gp.cause) for gp in gaps],
            "evidence": list(evidence) if evidence is not None else [""] * len(gaps),
        }
    )


def _steps_lane(traces: list, labels: list, steps: pd.DataFrame, boxes, y_of_row) -> None:
    st, en = steps["start"].to_numpy(), steps["end"].to_numpy()
    x0, x1 = boxes(st, en)
    y = y_of_row[steps["row"].to_numpy()]
    even = np.arange(len(steps)) % 2 == 0
    for m, color in ((even, "#0f766e"), (~even, "#5eead4")):
        xs, ys = _segments_xy(x0[m], x1[m], y[m])
        traces.append(
            _gl(
                x=xs, y=ys, mode="lines", line={"color": color, "width": BOX_PX}, name="steps",
                legendgroup="steps", showlegend=bool(m is even), hoverinfo="skip",
            )
        )
    text = np.array([plotly_text(s) for s in steps["label"].tolist()], dtype=object)
    traces.append(
        _gl(
            x=(x0 + x1) / 2, y=y, mode="markers", marker={"size": 5, "color": "#0f766e", "opacity": 0.5},
            legendgroup="steps", showlegend=False, text=text,
            customdata=np.round((en - st) / 1e3, 3), hovertemplate="%{text}<br>%{customdata:,.3~f} µs<extra>step</extra>",
        )
    )
    labels.append((st, en, steps["row"].to_numpy(), text))


def _flows(traces: list, items: pd.DataFrame, y_of_row: np.ndarray, x) -> int:
    """Launch -> GPU operation arrows for the pairs whose both ends are drawn in this view (none when
    more than FLOW_MAX pairs: the whole-run view would be a hairball)."""
    if len(items) == 0 or not {"flags", "correlation", "kind"} <= set(items.columns):
        return 0
    kind, flags, corr = items["kind"].to_numpy(), items["flags"].to_numpy(), items["correlation"].to_numpy()
    rank = items["rank"].to_numpy()
    launch = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER]) & ((flags & Flag.LAUNCH) != 0) & (corr >= 0)
    gpu = np.isin(kind, [EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET]) & (corr >= 0)
    if not launch.any() or not gpu.any():
        return 0
    a = pd.DataFrame({"rank": rank[launch], "corr": corr[launch], "s": items["start"].to_numpy()[launch], "r": items["row"].to_numpy()[launch]})
    b = pd.DataFrame({"rank": rank[gpu], "corr": corr[gpu], "s": items["start"].to_numpy()[gpu], "r": items["row"].to_numpy()[gpu]})
    pairs = a.merge(b, on=["rank", "corr"], suffixes=("_l", "_g"))
    if len(pairs) == 0 or len(pairs) > FLOW_MAX:
        return 0
    x0, x1 = x(pairs["s_l"].to_numpy()), x(pairs["s_g"].to_numpy())
    y0, y1 = y_of_row[pairs["r_l"].to_numpy()], y_of_row[pairs["r_g"].to_numpy()]
    n = len(pairs)
    xs, ys = np.empty(3 * n), np.empty(3 * n)
    xs[0::3], xs[1::3], xs[2::3] = x0, x1, np.nan
    ys[0::3], ys[1::3], ys[2::3] = y0, y1, np.nan
    traces.append(
        _gl(
            x=xs, y=ys, mode="lines", line={"color": "rgba(60,60,60,0.45)", "width": 1},
            name="launch → GPU", legendgroup="flows", hoverinfo="skip",
        )
    )
    traces.append(
        _gl(
            x=x1, y=y1 + np.where(y0 > y1, 0.3, -0.3), mode="markers",
            marker={"symbol": np.where(y0 > y1, "triangle-up", "triangle-down").tolist(), "size": 7, "color": "rgba(60,60,60,0.7)"},
            legendgroup="flows", showlegend=False, hoverinfo="skip",
        )
    )
    return n


def _selection(traces: list, highlight: pd.DataFrame, x, y_of_row) -> None:
    hx0, hx1 = x(highlight["start"].to_numpy()), x(highlight["end"].to_numpy())
    hy = y_of_row[highlight["row"].to_numpy()]
    xs, ys = _segments_xy(hx0, hx1, hy)
    traces.append(
        _gl(
            x=xs, y=ys, mode="lines", line={"color": "#ffd700", "width": 18}, opacity=0.7,
            name="selected (correlated)", hoverinfo="skip",
        )
    )
    order = np.argsort(hx0)
    traces.append(
        _gl(
            x=hx0[order], y=hy[order], mode="lines+markers", line={"color": "#d4a000", "width": 2, "dash": "dash"},
            marker={"size": 9, "color": "#d4a000"}, showlegend=False, hoverinfo="skip",
        )
    )


def _labels_trace(labels: list, x, y_of_row: np.ndarray, ns_per_px: float, t0: int, t1: int) -> dict:
    """Names inside the boxes wide enough for a few characters (cut to fit), the widest first, at most
    LABEL_MAX (WebGL text: SVG text would lie under the WebGL boxes)."""
    st = np.concatenate([a for a, *_ in labels])
    en = np.concatenate([b for _, b, *_ in labels])
    row = np.concatenate([r for *_, r, _ in labels])
    text = np.concatenate([t for *_, t in labels])
    st, en = np.maximum(st, t0), np.minimum(en, t1)  # the part of each box in view
    width_px = (en - st) / ns_per_px
    keep = np.argsort(-width_px, kind="stable")[:LABEL_MAX]
    keep = keep[width_px[keep] >= LABEL_MIN_PX]
    fit = np.maximum((width_px[keep] / CHAR_PX).astype(int) - 1, 3)
    shown = [_fit_label(t, n) for t, n in zip(text[keep].tolist(), fit.tolist())]
    return _gl(
        # left-aligned a few pixels into the box (WebGL text measures glyphs unlike the browser, so a
        # centred name drifts; a left edge stays put)
        x=x(st[keep] + 4 * ns_per_px), y=y_of_row[row[keep]], mode="text", text=shown,
        textposition="middle right", textfont={"size": 10, "color": "#111"}, hoverinfo="skip", showlegend=False, name="names",
    )


def _fit_label(escaped: str, chars: int) -> str:
    """A name cut to `chars` characters for WebGL text, which draws glyphs and decodes no entities:
    angle brackets become ‹ › (never markup, and no "&lt;" on screen)."""
    import html

    raw = html.unescape(escaped)
    raw = raw if len(raw) <= chars else raw[: max(chars - 1, 1)] + "…"
    return raw.replace("<", "‹").replace(">", "›")


def _gl(**kw: Any) -> dict:
    """A scattergl trace as a plain dict."""
    return {"type": "scattergl", **kw}


def _layout(rows, view, unit, unit_name, y_of_row, n_units, title, uirevision, origin_ns) -> dict:
    labels = rows["label"].to_numpy(dtype=object) if len(rows) else np.zeros(0, dtype=object)
    is_header = (rows["kind"] == "header").to_numpy() if len(rows) else np.zeros(0, dtype=bool)
    tick_mask = labels != ""
    ticktext = [
        f"<b>{plotly_text(t)}</b>" if h else plotly_text(t) for t, h in zip(labels[tick_mask], is_header[tick_mask])
    ]
    shapes = [
        {
            "type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
            "y0": float(y - 0.5), "y1": float(y - 0.5), "line": {"color": "#888", "width": 1},
        }
        for y in (y_of_row[: len(rows)][is_header] if len(rows) else [])
    ]
    out = dict(  # noqa: C408 - keyword form reads like Plotly's layout reference
        height=int(min(max(260, n_units * 26 + 150), 4000)),
        margin={"l": 10, "r": 10, "t": 70 if title else 60, "b": 40},
        xaxis={
            "title": {"text": f"time ({unit_name} from run start)"},
            "range": [(view.t0 - origin_ns) / unit, (view.t1 - origin_ns) / unit],
            "showgrid": True, "zeroline": False,
        },
        yaxis={
            "tickvals": y_of_row[: len(rows)][tick_mask].tolist() if len(rows) else [],
            "ticktext": ticktext, "range": [n_units, 0], "fixedrange": True, "showgrid": False,
            "automargin": True, "tickfont": {"size": 11},
        },
        shapes=shapes,
        hovermode="closest",
        dragmode="select",
        selectdirection="h",
        uirevision=uirevision,
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "xanchor": "left", "font": {"size": 11}},
        plot_bgcolor="white",
    )
    if title:
        out["title"] = {"text": plotly_text(title), "x": 0.01}
    return out
