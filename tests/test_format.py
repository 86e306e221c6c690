"""The one formatter (tracelab/text_format.py; the run origin: tracelab/render/format.py): expected
strings worked out by hand, and the same gap reading the same in the CLI, the Markdown and HTML reports
and the dashboard's gap table."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracelab import text_format as F
from tracelab.analyses.results import Analysis, AnalysisOptions, DeviceSummary, Overlap, TraceInfo
from tracelab.api import analyze
from tracelab.render.format import run_origin


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0 ns"),
        (850, "850 ns"),
        (999, "999 ns"),
        (999.5, "1.0 µs"),  # rounds to 1000 ns: shown in the next unit
        (1_000, "1.0 µs"),
        (12_345, "12.3 µs"),
        (999_949, "999.9 µs"),
        (999_960, "1.00 ms"),  # 999.96 µs would print as 1000.0 µs
        (4_560_000, "4.56 ms"),
        (60_630_000, "60.63 ms"),
        (999_996_000, "1.000 s"),
        (1_234_000_000, "1.234 s"),
        (-1_500, "-1.5 µs"),
        (None, "-"),
        (float("nan"), "-"),
    ],
)
def test_fmt_ns(ns, text):
    assert F.fmt_ns(ns) == text


def test_signed_relative_and_offsets():
    assert F.fmt_rel(9_300) == "+9.3 µs"
    assert F.fmt_rel(-1_200_000) == "-1.20 ms"
    assert F.fmt_rel(0) == "+0 ns"
    assert F.fmt_signed_ns(0) == "0"
    assert F.fmt_signed_ns(1_200_000) == "+1.20 ms"
    assert F.fmt_signed_ns(-628_800) == "-628.8 µs"
    assert F.fmt_offset(5_070_100, 100) == "+5.07 ms"
    values = [850, 12_345, -4_560_000, 999_960, 0]
    assert F.fmt_ns_many(values) == ["850 ns", "12.3 µs", "-4.56 ms", "1.00 ms", "0 ns"]
    assert F.fmt_ns_many(values, signed=True) == ["+850 ns", "+12.3 µs", "-4.56 ms", "+1.00 ms", "+0 ns"]
    assert F.fmt_rel_many(np.array(values)) == [F.fmt_rel(v) for v in values]


def test_sizes_percentages_counts():
    assert F.fmt_bytes(512) == "512 B"
    assert F.fmt_bytes(1536) == "1.5 KiB"
    assert F.fmt_bytes(3 * 2**20) == "3.0 MiB"
    assert F.fmt_bytes(5 * 2**40) == "5120.0 GiB"
    assert F.fmt_bytes(-1) == ""
    assert F.fmt_fraction(0.45) == "45.0%"
    assert F.fmt_share(1, 3) == "33.3%"
    assert F.fmt_share(1, 0) == "-"
    assert F.fmt_pct(17.5) == "+17.5%"
    assert F.fmt_pct(-2.25) == "-2.2%"  # round half to even, as Python formats
    assert F.fmt_pct(None) == "n/a"
    # a change that rounds to nothing is 0.0%, never "-0.0%" / "+0.0%" (nor the bars' former "(-0%)")
    assert F.fmt_pct(-0.04) == F.fmt_pct(0.0) == F.fmt_pct(0.049) == "0.0%"
    assert F.fmt_ranks([0]) == "rank 0" and F.fmt_ranks([]) == "no rank" and F.fmt_ranks([1, 0]) == "ranks 0, 1"
    assert F.fmt_ranks(range(8)) == "8 ranks (0-7)" and F.fmt_ranks([0, 2, 5, 6, 9]) == "ranks 0, 2, 5, 6, 9"
    assert F.fmt_signed_count(0) == "0" and F.fmt_signed_count(-18) == "-18" and F.fmt_signed_count(1234) == "+1,234"
    assert F.fmt_points(-0.076) == "-7.6 pt"
    assert F.fmt_ratio(2, 3) == "1.50x"
    assert F.fmt_ratio(0, 3) == "n/a"
    assert F.fmt_count(1234567) == "1,234,567"
    assert F.fmt_count(1, "kernel") == "1 kernel"
    assert F.fmt_count(700, "kernel") == "700 kernels"


def _device(start: int) -> DeviceSummary:
    return DeviceSummary(rank=0, device=0, name="", sm_count=0, start_ns=start, end_ns=start + 10, span_ns=10,
                         busy_ns=10, idle_ns=0, kernel_ns=10, memcpy_ns=0, memset_ns=0, comm_ns=0,
                         overlap=Overlap(), streams=())


def test_run_origin_is_the_run_start():
    with_start = Analysis(TraceInfo("x", "kineto", (0,), start_ns=100), (_device(500),), (), ())
    assert run_origin(with_start) == 100
    without = Analysis(TraceInfo("x", "kineto", (0,)), (_device(500), _device(300)), (), ())
    assert run_origin(without) == 300
    assert run_origin(Analysis(TraceInfo("x", "kineto", (0,)), (), (), ())) == 0


# ---- the same gap, everywhere ------------------------------------------------------------------


@pytest.fixture(scope="module")
def item_every_step(tmp_path_factory):
    from tracelab.demo import demo_archives, demo_run
    from tracelab.io.detect import load_run_dir

    if not demo_archives():
        pytest.skip("no bundled demo runs")
    path = demo_run("sync_pitfalls-item_every_step-torch", tmp_path_factory.mktemp("demo"))
    tl = load_run_dir(path)
    return path, tl, analyze(tl, AnalysisOptions())


def _by_hand(ns: int) -> str:
    """Independent of format.py: these gaps are between 1 µs and 1 s."""
    return f"{ns / 1e3:.1f} µs" if ns < 999_950 else f"{ns / 1e6:.2f} ms"


def test_the_longest_gap_reads_the_same_in_cli_reports_and_dashboard(item_every_step, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tracelab.api import report as write_report
    from tracelab.cli import main
    from tracelab.render.figures.dashboard import gaps_table

    path, tl, an = item_every_step
    gap = max(an.gaps, key=lambda g: g.duration_ns)
    run_start = int(tl.events["start"].min())
    at = "+" + _by_hand(gap.start_ns - run_start)
    length = _by_hand(gap.duration_ns)
    assert an.trace.start_ns == run_start

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "s.db"))
    out = CliRunner().invoke(main, ["analyze", str(path)], env={"COLUMNS": "100"}).stdout
    assert re.search(rf"r0 GPU 0 +{re.escape(at)} +{re.escape(length)} +{gap.cause}", out), out

    write_report(tmp_path / "r.md", an, tl)
    md = (tmp_path / "r.md").read_text()
    assert f"| r0/d0 | {at} | {length} | `{gap.cause}` |" in md

    write_report(tmp_path / "r.html", an, tl)
    html = (tmp_path / "r.html").read_text()
    assert re.search(rf"<td[^>]*>{re.escape(at)}</td><td[^>]*>{re.escape(length)}</td>", html)

    table = gaps_table(an.gaps, run_start)  # the dashboard's gaps page, from the run start too
    first = table.iloc[0]
    assert (first["at"], first["duration"]) == (at, length)
    # every row, as the CLI would write it (worked out here, independently of format.py)
    for g, row in zip(sorted(an.gaps, key=lambda g: -g.duration_ns), table.itertuples(index=False)):
        assert (row.at, row.duration) == ("+" + _by_hand(g.start_ns - run_start), _by_hand(g.duration_ns))


def test_reports_label_offsets_from_the_run_start(item_every_step, tmp_path):
    from tracelab.api import report as write_report

    _, tl, an = item_every_step
    write_report(tmp_path / "r.md", an, tl)
    assert "at (from the run start)" in (tmp_path / "r.md").read_text()
    assert Path(tmp_path / "r.md").stat().st_size > 0


def test_report_figures_share_the_run_start_axis(item_every_step):
    from tracelab.render.reports import figures as rf

    _, tl, an = item_every_step
    rows, edges = rf.binned_utilization(tl, bins=10)
    run_start = int(tl.events["start"].min())
    fig = rf.utilization_heatmap_figure(rows, edges, run_start)
    first_center_ms = ((edges[0] + edges[1]) / 2 - run_start) / 1e6
    assert float(fig.data[0].x[0]) == pytest.approx(first_center_ms, rel=1e-6)
    assert fig.layout.xaxis.title.text == "time since the run start (ms)"
    gaps = rf.gaps_over_time_figure(an, bins=10)
    assert gaps.layout.xaxis.title.text == "time since the run start (ms)"
    assert float(gaps.data[0].x[0]) > 0 and edges[0] > run_start  # the GPU starts after the run does


def test_sm_figures_share_the_run_start_axis(item_every_step):
    from tracelab.analyses.sm.summary import sm_grid, sm_utilization
    from tracelab.render.figures.sm import partition_utilization_figure, sm_lanes_figure

    _, tl, _ = item_every_step
    run_start = int(tl.events["start"].min())
    grid = sm_grid(tl, 0, 0, bins=10)
    fig = sm_lanes_figure(grid, compact=True, origin_ns=run_start)
    heat = next(t for t in fig.data if t.type == "heatmap")
    assert float(heat.x[0]) == pytest.approx(((grid.edges[0] + grid.edges[1]) / 2 - run_start) / 1e6, rel=1e-6)
    assert fig.layout.xaxis.title.text == "time since the run start (ms)"
    util = sm_utilization(tl, 0, 0, bins=10)
    assert partition_utilization_figure(util, origin_ns=run_start).layout.xaxis.title.text == (
        "time since the run start (ms)")
