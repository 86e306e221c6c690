"""The data routes of the timeline's canvas (`app/assets/timeline_canvas.js`), on the dashboard's Flask
server (so the Host / Origin guard of `app.guards` runs before each of them):

- GET /api/timeline/meta?run=ID[&show=G,..][&t0=NS&t1=NS][&q=TEXT][&drawn=1]: the run's rows, steps,
  colours and the window the URL opens (JSON); t0 / t1 as in the page URL (trace-clock ns); drawn=1:
  the page has drawn its first view (a big run's background work starts then, `start_background`);
- GET /api/timeline/tile?run=ID&show=G,..&level=L&index=I: tile I of 2^L (binary,
  `tracelab.render.timeline.data.pack`);
- GET /api/timeline/matches?run=ID&show=G,..&q=TEXT&t0=NS&t1=NS: the search matches in a window (ns
  from the run start; JSON, the longest 3,000);
- GET /api/timeline/hover?run=ID&event=POS | &gap=INDEX: a tooltip's lines (JSON), times formatted
  by `tracelab.text_format`.

A run is named by its id or name in the store (never a path). Every bad request gets 400 and one line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import flask
import numpy as np
import pandas as pd

from tracelab.api.types import EventKind, RunRecord
from tracelab.errors import BadInput
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.render.timeline.data import stream_label, style
from tracelab.text_format import fmt_bytes, fmt_ns

from .pages.timeline import MAX_QUERY, default_show, offset_ns, parse_show
from .state import AppState, current_state
from .timeline_lanes import memory_on_rows, ranges_on_rows
from .timeline_view import (
    hidden_lane_count,
    initial_window,
    max_level,
    on_lane_rows,
    run_critical_path,
    run_gaps,
    search_matches_in_window,
    search_positions,
    shown_rows,
    start_background,
    steps_if_ready,
    tile_bytes,
)

log = logging.getLogger(__name__)
bp = flask.Blueprint("timeline_api", __name__, url_prefix="/api/timeline")
MAX_MATCHES = 3000
HOVER_NAME_CHARS = 600


def _bad(message: str) -> flask.Response:
    return flask.Response(message.splitlines()[0][:300] + "\n", status=400, mimetype="text/plain")


def _answers_400(route: Callable[[], Any]) -> Callable[[], Any]:
    """Bad parameters, an unknown run or a stale request: 400 with one line, never 500."""

    @functools.wraps(route)
    def run() -> Any:
        try:
            return route()
        except BadInput as exc:
            return _bad(str(exc))
        except (TypeError, ValueError, OverflowError, KeyError, IndexError) as exc:
            log.warning("timeline request %s refused: %s: %s", flask.request.full_path, type(exc).__name__, exc)
            return _bad(f"bad timeline request: {type(exc).__name__}")

    return run


def _arg(name: str, *, required: bool = True, limit: int = 200) -> str:
    value = flask.request.args.get(name)
    if value is None or value == "":
        if required:
            raise BadInput(f"missing parameter {name!r}")
        return ""
    if len(value) > limit:
        raise BadInput(f"parameter {name!r} is too long")
    return value


def _int_arg(name: str, lo: int, hi: int) -> int:
    raw = _arg(name, limit=40)
    try:
        v = int(raw)
    except ValueError:
        raise BadInput(f"parameter {name!r} must be an integer, got {raw!r}") from None
    if not lo <= v <= hi:
        raise BadInput(f"parameter {name!r} must be in {lo}..{hi}, got {v}")
    return v


def _request() -> tuple[AppState, RunRecord, list[str]]:
    """The app's state, the run asked for (`run`: an id, prefix or name in the store) and the lane
    groups (`show`, the run's default when absent)."""
    state = current_state()
    record = state.record(_arg("run"))
    raw = flask.request.args.get("show")
    return state, record, default_show(record) if raw is None else parse_show(raw[:100])


def _query(required: bool) -> str:
    return _arg("q", required=required, limit=1000).strip()[:MAX_QUERY]


def _no_store(resp: flask.Response) -> flask.Response:
    resp.headers["Cache-Control"] = "no-store"  # a run can be deleted or re-imported under its name
    return resp


def _json(data: Any) -> flask.Response:
    return _no_store(flask.jsonify(data))


def _spans(frame: pd.DataFrame, origin: int, *text: str) -> dict[str, list]:
    """start / end (from the run's start), row, then the text columns `text` of spans drawn on rows."""
    return {"start": [int(v) - origin for v in frame["start"].tolist()],
            "end": [int(v) - origin for v in frame["end"].tolist()],
            "row": frame["row"].astype(int).tolist(), **{c: frame[c].astype(str).tolist() for c in text}}


@bp.get("/meta")
@_answers_400
def meta() -> Any:
    state, record, show = _request()
    query = _query(required=False)
    t0, t1, match = initial_window(state, record, _arg("t0", required=False, limit=40) or None,
                                   _arg("t1", required=False, limit=40) or None, query)
    origin = int(record.start_ns or 0)
    rows = shown_rows(state, record, show)
    # a big run's columns, analysis and steps load once the page has drawn its first view (the canvas
    # then asks with drawn=1, and again until they are there), or after a tile computed from them
    if flask.request.args.get("drawn") == "1":
        start_background(state, record)
    gaps, ready = run_gaps(state, record, start=False)
    found = steps_if_ready(state, record, start=False)
    steps = on_lane_rows(found, rows, "steps", ("label",))
    projected = ranges_on_rows(state, record, rows)  # the projected ranges lane, drawn like steps
    if len(projected):
        steps = pd.concat([steps[["start", "end", "row", "label"]], projected], ignore_index=True)
    cpath = run_critical_path(state, record) if ready else None
    crit = on_lane_rows(cpath, rows, "critical", ("category", "label"))
    labels = rows["label"].astype(str).tolist()
    if found is not None:  # a steps lane whose rank has none says so
        with_steps = set(found["rank"].astype(int).tolist())
        for i in np.flatnonzero((rows["kind"] == "steps").to_numpy() & ~rows["rank"].isin(with_steps).to_numpy()):
            labels[i] = "steps (none found)"
    return _json(
        {
            "run": record.id,
            "origin": str(origin),
            "span": int(record.span_ns or 0),
            "tile_px": state.width_px,
            "max_level": max_level(record),
            "show": show,
            "window": [t0 - origin, t1 - origin],
            "query": query,
            "match": match,
            "rows": {
                "label": labels,
                "kind": rows["kind"].astype(str).tolist(),
                "height": rows["height"].astype(float).tolist(),
                "rank": rows["rank"].astype(int).tolist(),
            },
            "steps": _spans(steps, origin, "label"),
            "memory": memory_on_rows(state, record, rows),
            "critical": _spans(crit, origin, "category", "label"),
            # lanes with no event in the run (no row; the canvas says how many)
            "hidden_lanes": hidden_lane_count(state, record, show),
            "gaps_ready": ready,
            "steps_ready": found is not None,
            "causes_present": sorted(set(gaps["cause"].tolist())),
            "style": style(),
        }
    )


@bp.get("/tile")
@_answers_400
def tile() -> Any:
    state, record, show = _request()
    level = _int_arg("level", 0, max_level(record))
    index = _int_arg("index", 0, (1 << level) - 1)
    return _no_store(flask.Response(tile_bytes(state, record, show, level, index), mimetype="application/octet-stream"))


@bp.get("/matches")
@_answers_400
def matches() -> Any:
    state, record, show = _request()
    query = _query(required=True)
    origin = int(record.start_ns or 0)
    t0 = origin + offset_ns(_arg("t0", limit=40), "t0")
    t1 = origin + offset_ns(_arg("t1", limit=40), "t1")
    if t1 <= t0:
        raise BadInput("the window is empty or reversed")
    found = search_matches_in_window(state, record, query, t0, t1, show, limit=MAX_MATCHES)
    return _json({"count": len(search_positions(state, record.id, query)), "in_view": len(found),
                  **_spans(found, origin)})


@bp.get("/hover")
@_answers_400
def hover() -> Any:
    state, record, _ = _request()
    if flask.request.args.get("gap") is not None:
        gaps, _ = run_gaps(state, record)
        i = _int_arg("gap", 0, max(len(gaps) - 1, 0))
        if i >= len(gaps):
            raise BadInput(f"run {record.id} has no gap {i}")
        analysis = state.analysis(record.id)  # the frame is in the analysis' order: gap i is gaps[i]
        evidence = gap_evidence(analysis, [analysis.gaps[i]])[0]  # worded for this gap only
        return _json({"lines": gap_lines(gaps.iloc[i], int(record.start_ns or 0), evidence)})
    tl = state.timeline(record.id)
    p = _int_arg("event", 0, max(len(tl.events) - 1, 0))
    if p >= len(tl.events):
        raise BadInput(f"run {record.id} has no event {p}")
    return _json({"lines": event_lines(tl.events.iloc[p], state.strings(record.id), int(record.start_ns or 0))})


def gap_lines(gap: Any, origin: int, evidence: str = "") -> list[str]:
    """A gap's tooltip: cause, length and start, then its whole evidence."""
    head = f"idle ({gap['cause']}) · {fmt_ns(int(gap['end']) - int(gap['start']))} at +{fmt_ns(int(gap['start']) - origin)}"
    return [head] + ([evidence] if evidence else [])


def event_lines(r: Any, strings: tuple[str, ...], origin: int) -> list[str]:
    """An event's tooltip: its name, what and where it is, its length and start, and its launch
    configuration or size."""
    name = strings[int(r["name"])] if 0 <= int(r["name"]) < len(strings) else ""
    if len(name) > HOVER_NAME_CHARS:
        name = name[: HOVER_NAME_CHARS * 2 // 3] + "…" + name[-(HOVER_NAME_CHARS // 3) :]
    kind = EventKind(int(r["kind"])).name.lower().replace("_", " ")
    where = (
        f"GPU {int(r['device'])} · {stream_label(int(r['stream']))}" if int(r["device"]) >= 0 else f"thread {int(r['tid'])}"
    )
    lines = [name, f"{kind} · {where}", f"{fmt_ns(int(r['end']) - int(r['start']))} at +{fmt_ns(int(r['start']) - origin)}"]
    if int(r["grid_x"]) > 0:
        lines.append(
            f"grid ({int(r['grid_x'])},{int(r['grid_y'])},{int(r['grid_z'])}) "
            f"block ({int(r['block_x'])},{int(r['block_y'])},{int(r['block_z'])})"
        )
    if int(r["bytes"]) >= 0:
        lines.append(fmt_bytes(int(r["bytes"])))
    if int(r["correlation"]) >= 0:
        lines.append(f"correlation {int(r['correlation'])} (click to link launch and GPU work)")
    return lines


def register(server: flask.Flask) -> None:
    server.register_blueprint(bp)
