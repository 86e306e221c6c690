"""Scope: `--steps A:B` / `--window START_US:END_US` parsing, and clipping a Timeline to the range so
that busy / idle / gaps computed on it are that range's figures (checked against hand sums)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_analyses_builder import TB, us

from tracelab.analyses.device.devices import device_summaries
from tracelab.analyses.gaps.idle import Classification
from tracelab.analyses.scope import OPEN_END, Scope, apply_scope, parse_scope
from tracelab.analyses.steps.infer import find_steps
from tracelab.errors import BadInput
from tracelab.model import EventKind


# ---- parsing -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:3", (1, 3)),
        ("2", (2, 3)),
        ("3:", (3, OPEN_END)),
        (":5", (0, 5)),
        (" 0 : 10 ", (0, 10)),
        (":", (0, OPEN_END)),
    ],
)
def test_parse_steps(text: str, expected: tuple[int, int]) -> None:
    assert parse_scope(text, None) == Scope(steps=expected, window_ns=None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000:2500", (1_000_000, 2_500_000)),
        ("1.5:2", (1500, 2000)),
        (":7", (0, 7000)),
        ("5:", (5000, OPEN_END)),
    ],
)
def test_parse_window(text: str, expected: tuple[int, int]) -> None:
    assert parse_scope(None, text) == Scope(steps=None, window_ns=expected)


@pytest.mark.parametrize("bad", ["a:b", "3:1", "2:2", "1:2:3", "", "-1:3", "1.5:3"])
def test_bad_steps(bad: str) -> None:
    with pytest.raises(BadInput, match="--steps"):
        parse_scope(bad, None)


@pytest.mark.parametrize("bad", ["5:1", "3:3", "x:1", "1000", "1:2:3", "-5:10"])
def test_bad_window(bad: str) -> None:
    with pytest.raises(BadInput, match="--window"):
        parse_scope(None, bad)


def test_no_scope_and_both_options() -> None:
    assert parse_scope(None, None) is None
    with pytest.raises(BadInput, match="not both"):
        parse_scope("1:2", "0:10")


# ---- window clipping -----------------------------------------------------------------------------
def window_trace(origin: float = 1000.0):
    """Kernels [0,100) [150,300) [400,500) µs after the origin, a blocking sync over [50,450),
    NVTX marks at 100 and 200."""
    tb = TB()
    o = origin
    tb.kernel(o + 0, 100, name="a")
    tb.kernel(o + 150, 150, name="b")
    tb.kernel(o + 400, 100, name="c")
    tb.api("cudaStreamSynchronize", o + 50, 400)
    for t in (100, 200):
        tb._add(kind=EventKind.NVTX_MARK, start=us(o + t), end=us(o + t), pid=100, tid=1, name=f"m{t}")
    return tb.build()


def test_window_clips_events_at_its_edges() -> None:
    tl = window_trace()
    scope = parse_scope(None, "120:420")
    out, note = apply_scope(tl, scope, find_steps(tl))
    out.validate()
    ev = out.events
    names = list(out.names(ev["name"]))
    # kernel a [0,100) lies before the window: gone; mark at 100 too; mark at 200 stays
    assert sorted(names) == ["b", "c", "cudaStreamSynchronize", "m200"]
    got = {n: (int(s), int(e)) for n, s, e in zip(names, ev["start"], ev["end"], strict=True)}
    o = us(1000)
    assert got["b"] == (o + us(150), o + us(300))
    assert got["c"] == (o + us(400), o + us(420))  # clipped at the window's end
    assert got["cudaStreamSynchronize"] == (o + us(120), o + us(420))  # clipped at both ends
    assert got["m200"] == (o + us(200), o + us(200))
    # the figures of the range, by hand: busy 150 + 20, span from 150 to 420, idle 100
    (dev,) = device_summaries(out)
    assert (dev.busy_ns, dev.span_ns, dev.idle_ns) == (us(170), us(270), us(100))
    gaps = Classification(out, threshold_ns=us(10)).gaps()[0]
    assert [(g.start_ns, g.end_ns) for g in gaps] == [(o + us(300), o + us(400))]
    assert "+120.0 µs" in note.replace("120.00", "120.0") or "120" in note
    assert out.meta.extra["scope"]["window_ns"] == [us(120), us(420)]


def test_open_window_runs_to_the_end() -> None:
    tl = window_trace()
    out, note = apply_scope(tl, parse_scope(None, "300:"), find_steps(tl))
    names = sorted(out.names(out.events["name"]))
    # b ends exactly at 300: outside [300, end); c and the sync (clipped to start at 300) stay
    assert names == ["c", "cudaStreamSynchronize"]
    assert int(out.events["start"].min()) == us(1300)
    assert "the end" in note
    (dev,) = device_summaries(out)
    assert dev.busy_ns == us(100)


def test_window_keeps_the_original_timeline_untouched() -> None:
    tl = window_trace()
    before = tl.events.copy()
    apply_scope(tl, parse_scope(None, "120:420"), find_steps(tl))
    pd.testing.assert_frame_equal(tl.events, before)


def test_sm_blocks_are_clipped_too() -> None:
    tl = window_trace()
    blocks = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "device": [0, 0, 0],
            "green_context": [-1, -1, -1],
            "sm": [0, 1, 2],
            "start": [us(1000), us(1150), us(1400)],
            "end": [us(1100), us(1300), us(1500)],
            "name": [0, 1, 2],
        }
    )
    out, _ = apply_scope(replace(tl, sm_blocks=blocks), parse_scope(None, "120:420"), find_steps(tl))
    assert out.sm_blocks is not None
    assert out.sm_blocks["sm"].tolist() == [1, 2]
    assert out.sm_blocks["end"].tolist() == [us(1300), us(1420)]


# ---- step ranges ---------------------------------------------------------------------------------
STEP_BOUNDS = [(0, 100), (100, 250), (250, 400), (400, 600)]  # µs


def stepped_trace(rank: int = 0, offset: float = 0.0, tb: TB | None = None) -> TB:
    tb = tb or TB()
    for i, (s, e) in enumerate(STEP_BOUNDS):
        tb.range(f"step {i}", offset + s, offset + e, rank=rank)
    for s, d in ((50, 70), (200, 100), (390, 20), (500, 50)):
        tb.kernel(offset + s, d, rank=rank)
    return tb


def test_steps_range_clips_to_the_chosen_steps() -> None:
    tl = stepped_trace().build()
    steps = find_steps(tl)
    out, note = apply_scope(tl, parse_scope("1:3", None), steps)
    # range [100, 400): kernels clipped to [100,120) [200,300) [390,400)
    kernels = out.events[out.events["kind"] == int(EventKind.KERNEL)]
    assert list(zip(kernels["start"], kernels["end"], strict=True)) == [
        (us(100), us(120)),
        (us(200), us(300)),
        (us(390), us(400)),
    ]
    (dev,) = device_summaries(out)
    assert (dev.busy_ns, dev.span_ns, dev.idle_ns) == (us(130), us(300), us(170))
    # the chosen steps are the steps of the scoped timeline
    assert [(s.start_ns, s.end_ns) for s in find_steps(out).steps] == [(us(100), us(250)), (us(250), us(400))]
    assert note.startswith("figures cover rank 0: steps 1–2 of 0–3") and "marked steps" in note
    assert out.meta.extra["scope"]["ranges_ns"] == {"0": [us(100), us(400)]}


def test_single_step_and_open_step_range() -> None:
    tl = stepped_trace().build()
    steps = find_steps(tl)
    one, _ = apply_scope(tl, parse_scope("2", None), steps)
    assert (int(one.events["start"].min()), int(one.events["end"].max())) == (us(250), us(400))
    rest, note = apply_scope(tl, parse_scope("3:", None), steps)
    (dev,) = device_summaries(rest)
    # range [400, 600): [390,410) clipped to [400,410) and [500,550): 10 + 50
    assert dev.busy_ns == us(60) and "steps 3–3" in note


def test_steps_out_of_range_or_missing_are_bad_input() -> None:
    tl = stepped_trace().build()
    with pytest.raises(BadInput, match="rank 0 has 4 steps"):
        apply_scope(tl, parse_scope("5:", None), find_steps(tl))
    bare = TB()
    bare.kernel(0, 10, launch_at=None)
    tl2 = bare.build()
    with pytest.raises(BadInput, match="no steps found"):
        apply_scope(tl2, parse_scope("0:2", None), find_steps(tl2))


def test_each_rank_is_clipped_to_its_own_steps() -> None:
    tb = stepped_trace(rank=0)
    stepped_trace(rank=1, offset=1000.0, tb=tb)
    tl = tb.build()
    out, note = apply_scope(tl, parse_scope("1:2", None), find_steps(tl))
    for rank, off in ((0, 0), (1, 1000)):
        ev = out.events[out.events["rank"] == rank]
        assert (int(ev["start"].min()), int(ev["end"].max())) == (us(off + 100), us(off + 250))
    assert "rank 1: steps 1–1" in note


def test_no_scope_returns_the_timeline_and_a_warmup_note() -> None:
    tl = stepped_trace().build()
    out, note = apply_scope(tl, None, find_steps(tl))
    assert out is tl
    # durations 100, 150, 150, 200 µs: median 150, warm-up step 0 lasts 100 µs (0.7× the median)
    assert "4 steps" in note and "marked" in note and "0.7× the median" in note
    assert np.isclose(100 / 150, 0.667, atol=1e-3)


def test_scope_timeline_keeps_step_indices_and_drops_warmup_flag() -> None:
    from tracelab.analyses.scope import scope_timeline
    from tracelab.analyses.steps.table import step_rows

    tl = stepped_trace().build()
    out, steps, note = scope_timeline(tl, "1:3", None)
    assert [(s.index, s.start_ns, s.end_ns) for s in steps.steps] == [
        (1, us(100), us(250)),
        (2, us(250), us(400)),
    ]
    rows = step_rows(out, steps, ())
    assert [r.index for r in rows] == [1, 2] and not any(r.warmup for r in rows)
    # busy per step by hand: step 1 [100,250): [100,120) + [200,250); step 2 [250,400): [250,300) + [390,400)
    assert [r.gpu_busy_ns for r in rows] == [us(20 + 50), us(50 + 10)]
    # a window cuts steps at its edges, indices kept
    out, steps, _ = scope_timeline(tl, None, "200:300")
    assert [(s.index, s.start_ns, s.end_ns) for s in steps.steps] == [
        (1, us(200), us(250)),
        (2, us(250), us(300)),
    ]
    whole, all_steps, note = scope_timeline(tl, None, None)
    assert whole is tl and len(all_steps) == 4 and "whole trace" in note


def test_a_finding_over_a_step_range_names_the_steps_as_the_trace_numbers_them(tmp_path) -> None:
    """`--steps 5:8` of sync_pitfalls/item_every_step/torch: the sync_per_iteration finding's example and
    range are steps 5..7, not "step 0 … step 2" of the clipped timeline (issue 28). The steps that wait are
    read from the steps themselves: every step of this run has its cudaStreamSynchronize."""
    import json

    from click.testing import CliRunner

    from tracelab.cli import main
    from tracelab.demo import demo_run

    path = demo_run("sync_pitfalls-item_every_step-torch", tmp_path / "c")
    whole = json.loads(CliRunner().invoke(main, ["analyze", "--json", str(path)]).stdout)
    (f_all,) = [f for f in whole["findings"] if f["rule"] == "sync_per_iteration"]
    (rank_all,) = f_all["data"]["ranks"]
    assert rank_all["steps_with_sync"] == rank_all["steps"] == 20  # a sync in every step
    doc = json.loads(CliRunner().invoke(main, ["analyze", "--json", str(path), "--steps", "5:8"]).stdout)
    (f,) = [f for f in doc["findings"] if f["rule"] == "sync_per_iteration"]
    (rank,) = f["data"]["ranks"]
    assert (rank["first_step"], rank["last_step"], rank["steps"]) == (5, 7, 3)
    assert f["data"]["example"]["step"] == 5
    text = CliRunner().invoke(main, ["analyze", str(path), "--steps", "5:8"], env={"COLUMNS": "200"}).stdout
    assert "in step 5)" in text and "(step 5 … step 7)" in text and "step 0" not in text
