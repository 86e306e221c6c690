"""Pieces of the dashboard's timeline (issue 12), checked against values computed here by hand or by
brute force: NVTX nesting rows, one row per stream, SM bands by partition, bin thickness = busy
fraction, the range statistics' restriction, Compare's related baseline."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.pages.compare import related_baseline
from app.range_stats import window_us
from tracelab.model.kinds import LaneKind
from tracelab.render.timeline.data import (
    BOX_PX,
    SmRows,
    TileParts,
    encode_tile,
    lane_to_row,
    nesting_depth,
    sm_row_table,
    style,
    timeline_rows,
    unpack,
)
from tracelab.render.timeline.lod import LEVELS, level_of_detail
from tracelab.store import RunRecord


def test_nesting_depth_matches_brute_force():
    rng = np.random.default_rng(3)
    # properly nested ranges on 3 lanes: each lane a random tree built by recursive splitting
    lanes, starts, ends = [], [], []

    def tree(lane, a, b, depth):
        lanes.append(lane), starts.append(a), ends.append(b)
        if depth < 4 and b - a > 8:
            cut = sorted(rng.integers(a + 1, b, size=2).tolist())
            if cut[1] - cut[0] > 1:
                tree(lane, cut[0], cut[1], depth + 1)

    for lane in range(3):
        for k in range(5):
            tree(lane, k * 1000, k * 1000 + 900, 0)
    lane, s, e = np.array(lanes), np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
    perm = rng.permutation(len(s))
    lane, s, e = lane[perm], s[perm], e[perm]
    got = nesting_depth(lane, s, e)
    want = [
        sum(1 for j in range(len(s)) if j != i and lane[j] == lane[i] and s[j] <= s[i] and e[i] <= e[j]
            and (s[j], -e[j]) < (s[i], -e[i]))
        for i in range(len(s))
    ]
    assert got.tolist() == want
    assert max(want) >= 2  # the test does exercise nesting


def _lanes(rows):
    cols = ["lane", "lane_kind", "rank", "device", "context", "green_context", "stream", "pid", "tid", "category"]
    return pd.DataFrame(rows, columns=cols)


def test_one_row_per_stream_and_named_lanes():
    # stream 7 recorded in two contexts (two lanes), stream -1 = device-wide syncs, an NVTX lane 2 deep
    lanes = _lanes(
        [
            (0, int(LaneKind.GPU_STREAM), 0, 0, 1, -1, 7, -1, -1, -1),
            (1, int(LaneKind.GPU_STREAM), 0, 0, 2, -1, 7, -1, -1, -1),
            (2, int(LaneKind.GPU_STREAM), 0, 0, 1, -1, -1, -1, -1, -1),
            (3, int(LaneKind.NVTX), 0, -1, -1, -1, -1, 10, 11, 0),
        ]
    )
    rows = timeline_rows(lanes, ("dom",), nvtx_depths={3: 2}, step_ranks=[0])
    labels = rows["label"].tolist()
    assert labels.count("stream 7 · ctx 1,2") == 1
    assert "device-wide syncs (no stream)" in labels and not any("all streams" in x for x in labels)
    table = lane_to_row(rows, 4)
    assert table[0] == table[1]  # the same stream never in two rows
    assert rows.loc[table[0], "label"] == "stream 7 · ctx 1,2"
    kinds = rows["kind"].tolist()
    assert kinds.count("idle") == 1 and kinds.count("steps") == 1 and kinds.count("nvtx") == 2
    assert kinds.index("idle") == kinds.index("header") + 1  # right under the GPU's header


def test_sm_bands_grouped_and_labelled_by_partition():
    lanes = _lanes([(0, int(LaneKind.GPU_STREAM), 0, 0, 1, -1, 7, -1, -1, -1)])
    sm = {(0, 0): SmRows(132, "estimated", ((2, 0, 15), (3, 16, 47), (-1, 48, 131)))}
    rows = timeline_rows(lanes, (), sm_rows=sm)
    band = rows[rows["kind"] == "sm"]
    assert (band["label"] != "").all()  # every band labelled
    heads = [x for x in band["label"] if "green ctx" in x or "outside" in x]
    assert heads[0].startswith("green ctx 2 · SMs 0–") and heads[0].endswith("(estimated)")
    assert heads[1].startswith("green ctx 3 · SMs 16–") and heads[2].startswith("outside green ctxs · SMs 48–")
    table = sm_row_table(rows, 0, 0, 132)
    # no band crosses a partition boundary
    assert table[15] != table[16] and table[47] != table[48] and (table >= 0).all()


def test_sm_bands_say_their_partitions_where_partitions_interleave():
    """Measured SM ids of green contexts interleave (green_ctx's 16-SM partition holds SMs 0-3, 12, 13,
    ...): no contiguous blocks, so each band of adjacent SMs names the partitions its SMs belong to
    (issue 28: the bands read "SMs 0–8 (measured)" with no partition)."""
    lanes = _lanes([(0, int(LaneKind.GPU_STREAM), 0, 0, 1, -1, 7, -1, -1, -1)])
    owner = (3, 3, 2, 2) * 30 + (-1,) * 12  # 132 SMs: 3 and 2 alternate, then 12 outside
    rows = timeline_rows(lanes, (), sm_rows={(0, 0): SmRows(132, "measured", (), owner)})
    band = rows[rows["kind"] == "sm"]
    labels = band["label"].tolist()
    assert labels and all("green ctx" in x or "outside green ctxs" in x for x in labels), labels
    assert labels[0].endswith("(measured)")
    for lo, hi, label in zip(band["sm"], band["sm_last"], labels):
        mine = owner[lo:hi + 1]
        n3, n2 = mine.count(3), mine.count(2)
        if n3 and n2:
            want = f"green ctx 3 ×{n3}, 2 ×{n2}" if n3 >= n2 else f"green ctx 2 ×{n2}, 3 ×{n3}"
            assert want in label, (lo, hi, label)
        elif not (n3 or n2):
            assert "outside green ctxs" in label


def test_recorded_green_ctx_sm_bands_count_each_partitions_sms():
    """On the bundled green_ctx run the bands' "×n" counts add up, per green context, to the SMs the
    probes saw each partition use (read from the run's SM blocks directly)."""
    import re
    import tempfile

    from tracelab.analyses.sm.summary import sm_lanes
    from tracelab.demo import demo_run
    from tracelab.io import load_trace
    from tracelab.render.timeline.rows import sm_partition_map

    tl = load_trace(demo_run("green_contexts-green_ctx-nsys", tempfile.mkdtemp()))
    lanes, source = sm_lanes(tl, 0, 0)
    owner = sm_partition_map(lanes, 132)
    rows = timeline_rows(tl.lanes, tl.strings, sm_rows={(0, 0): SmRows(132, source, (), owner)}, show=("sm",))
    counted: dict[int, int] = {}
    for label in rows.loc[rows["kind"] == "sm", "label"]:
        span = re.search(r"SMs? (\d+)(?:–(\d+))?", label)
        n = int(span.group(2) or span.group(1)) - int(span.group(1)) + 1
        words = label.split("green ctx ", 1)[1].removesuffix(f" ({source})")
        for part in words.split(", "):
            g, _, k = part.partition(" ×")
            counted[int(g)] = counted.get(int(g), 0) + (int(k) if k else n)
    b = tl.sm_blocks
    want = b.groupby("green_context")["sm"].nunique().to_dict()
    assert counted == {int(g): int(n) for g, n in want.items()} and sum(counted.values()) == 132


def test_aggregated_bins_are_as_thick_as_they_are_busy():
    """One row, 100 events of 10 ns spread over 1 ms: every 1.5-px bin is well under 12.5 % busy,
    so drawn at the thinnest level (1.5 px), not as a solid 12-px box; a fully busy run of events
    is drawn at full thickness."""
    sparse = pd.DataFrame({"start": np.arange(100) * 10_000, "end": np.arange(100) * 10_000 + 10, "row": 0})
    dense = pd.DataFrame({"start": np.arange(10_000) * 100, "end": np.arange(10_000) * 100 + 100, "row": 1})
    events = pd.concat([sparse, dense], ignore_index=True)
    view = level_of_detail(events, 0, 1_000_000, 2, width_px=200, max_items=40)
    assert set(view.bins.loc[view.bins["row"] == 0, "level"]) == {0}
    assert set(view.bins.loc[view.bins["row"] == 1, "level"]) == {len(LEVELS) - 1}
    # the tile carries each stretch's level; the canvas draws level L as thick as style's bin_px[L]
    empty = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("row", "start", "end", "cause", "index", "count")})
    parts = TileParts(0, 0, 0, 1_000_000, 0, view, None, view.bins.iloc[:0], empty, True)
    _, arrays = unpack(encode_tile(parts, ()))
    assert set(arrays["b.level"][arrays["b.row"] == 0].tolist()) == {0}
    assert set(arrays["b.level"][arrays["b.row"] == 1].tolist()) == {len(LEVELS) - 1}
    thickness = style()["bin_px"]
    assert (thickness[0], thickness[-1]) == (BOX_PX * LEVELS[0], BOX_PX) == (1.5, 12)
    js = (Path(__file__).resolve().parents[1] / "app" / "assets" / "timeline_canvas.js").read_text()
    assert 'lvlPx[kind][A["b.level"][j]]' in js  # the canvas takes the thickness from that table


def test_window_us_is_exact_and_range_stats_are_the_cli_window():
    """The panel's range is `--window START_US:END_US` from the run start with ns precision, and its
    figures are `tracelab.api.analyze(..., window_us=...)`'s; busy is checked against a union
    computed here."""
    from test_app_callbacks import make_store

    from app.range_stats import range_stats
    from app.state import AppState

    assert window_us(1_000, 1_000 + 1_234_567, 1_000 + 2_000_001) == "1234.567:2000.001"
    store, a, _ = make_store(Path(tempfile.mkdtemp()) / "s.db")
    state = AppState(store=store)
    ev = state.timeline(a).events
    origin = int(ev["start"].min())
    # step 0's kernels from the 2nd on, and the start of the NVTX range "step 1" (2.0 .. 3.5 ms): the
    # first step-like range (the run's first range has a hostile name), so tracelab's step 0, as
    # `--steps 0` counts it
    t0, t1 = origin + 15_000, origin + 2_100_000
    stats = range_stats(state, a, t0, t1)
    gpu = ev[ev["kind"].isin([0, 1, 2]) & (ev["end"] > t0) & (ev["start"] < t1)]
    spans = sorted(zip(np.clip(gpu["start"], t0, t1).tolist(), np.clip(gpu["end"], t0, t1).tolist()))
    busy, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            busy += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    assert stats.analysis.devices[0].busy_ns == busy
    assert stats.window == "15.000:2100.000"
    assert list(stats.steps["label"]) == ["step 0"]


def _record(rid, name, workload="", variant="", backend="", source=""):
    return RunRecord(
        id=rid, name=name, source=source, format="nsys", backend=backend, workload=workload, variant=variant,
        gpu="", created="", fingerprint=rid, events=1, start_ns=0, end_ns=1,
    )


@pytest.mark.parametrize(
    "run,expected",
    [
        ("g2", "e1"),  # graphs/graph/nsys -> graphs/eager/nsys (the workload's first variant, same backend)
        ("e1", "g2"),  # the first variant itself -> the next variant
        ("e3", "g4"),  # torch runs pair with torch runs
        ("u1", "u2"),  # imported traces: the same file name
        ("lone", None),
    ],
)
def test_related_baseline(run, expected):
    records = [
        _record("x0", "graphs/eager/nsys/n=4", "graphs", "eager", "nsys"),  # other parameters
        _record("g2", "graphs/graph/nsys", "graphs", "graph", "nsys"),
        _record("e1", "graphs/eager/nsys", "graphs", "eager", "nsys"),
        _record("e3", "graphs/eager/torch", "graphs", "eager", "torch"),
        _record("g4", "graphs/graph/torch", "graphs", "graph", "torch"),
        _record("u1", "trace A", source="/a/rank0.json.gz"),
        _record("u2", "trace B", source="/b/rank0.json"),
        _record("lone", "other", source="/c/z.json"),
    ]
    assert related_baseline(records, run) == expected
