"""Per-SM lanes, utilization, partitions, idle_partition and the green-context explanation, on
synthetic timelines: a 132-SM H200 split into green contexts of 16 and 116 SMs, with probe blocks
simulated the way the hardware schedules them (block i of wave w on SM ids[i mod S])."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest
from sm_agreement import estimate_agreement, kernel_sm_agreement

from tracelab.analyses.sm import summary as sm
from tracelab.analyses.sm.occupancy import CC_LIMITS, occupancy
from tracelab.model import ContextInfo, DeviceInfo, EventKind, RunMeta, StringInterner, build_timeline
from tracelab.render.figures.sm import partition_utilization_figure, sm_lanes_figure
from tracelab.render.text.green import green_context_message

H200 = DeviceInfo(rank=0, device=0, name="NVIDIA H200", sm_count=132, cc_major=9, cc_minor=0)
SMALL, LARGE = 1, 2
RNG = np.random.default_rng(7)
# hardware SM ids of the partitions are not contiguous: a fixed random split of 0..131
PERM = RNG.permutation(132)
SMALL_IDS, LARGE_IDS = np.sort(PERM[:16]), np.sort(PERM[16:])


class Trace:
    """Builds kernel events and (optionally) the probe blocks they would record."""

    def __init__(self) -> None:
        self.s = StringInterner()
        self.rows: list[dict] = []
        self.blocks: list[pd.DataFrame] = []

    def kernel(
        self, name, start, dur, gc=-1, grid=132, threads=256, regs=32, smem=0, probe_ids=None, stream=7
    ):
        nid = self.s.intern(name)
        self.rows.append(
            {
                "kind": int(EventKind.KERNEL),
                "start": start,
                "end": start + dur,
                "device": 0,
                "stream": stream,
                "green_context": gc,
                "name": nid,
                "grid_x": grid,
                "block_x": threads,
                "registers": regs,
                "shared_mem": smem,
            }
        )
        if probe_ids is not None:
            ids = np.asarray(probe_ids)
            bps = int(occupancy(threads, regs, smem, CC_LIMITS[(9, 0)]).blocks_per_sm[0])
            per_wave = bps * len(ids)
            waves = -(-grid // per_wave)
            t = dur / waves
            i = np.arange(grid)
            w = i // per_wave
            # the first wave starts a little after the kernel, the last ends a little before it;
            # waves follow each other on an SM with a 2 ns hand-over
            b_start = (start + w * t + np.where(w == 0, 30, 0)).astype(np.int64)
            b_end = (start + (w + 1) * t - np.where(w == waves - 1, 20, 2)).astype(np.int64)
            self.blocks.append(
                pd.DataFrame(
                    {
                        "rank": 0,
                        "device": 0,
                        "green_context": gc,
                        "sm": ids[(i % per_wave) % len(ids)],
                        "start": b_start,
                        "end": b_end,
                        "name": nid,
                    }
                )
            )

    def memcpy(self, start, dur):
        self.rows.append(
            {"kind": int(EventKind.MEMCPY), "start": start, "end": start + dur, "device": 0, "stream": 7}
        )

    def build(self, contexts=(), device=H200, variant="green_ctx"):
        cols = pd.DataFrame(self.rows)
        cols = {c: cols[c].fillna(-1).to_numpy().astype(np.int64) for c in cols.columns}
        blocks = pd.concat(self.blocks, ignore_index=True) if self.blocks else None
        return build_timeline(
            cols,
            self.s.strings,
            RunMeta(source="synthetic", format="nsys", variant=variant),
            [device],
            contexts,
            sm_blocks=blocks,
        )


GREEN = (ContextInfo(0, 0, 10, True, 1, SMALL, 16), ContextInfo(0, 0, 11, True, 1, LARGE, 116))


def green_run(small_work=True, probe=True):
    t = Trace()
    # cuBLAS-like matmul (uninstrumented), bracketed by probe kernels on the large partition
    for i in range(4):
        t0 = 10_000 + i * 1_000_000
        t.kernel(
            "tl_probe_large_partition",
            t0,
            5_000,
            LARGE,
            grid=528,
            threads=32,
            probe_ids=LARGE_IDS if probe else None,
        )
        t.kernel(
            "sm90_xmma_gemm_bf16",
            t0 + 6_000,
            900_000,
            LARGE,
            grid=1024,
            threads=384,
            regs=168,
            smem=200_000,
            stream=8,
        )
    n = 60 if small_work else 2
    for i in range(n):  # Triton sigmoid, probed directly, on the small partition
        t.kernel(
            "sigmoid_kernel",
            10_000 + i * 66_000,
            60_000,
            SMALL,
            grid=16384,
            threads=256,
            regs=24,
            probe_ids=SMALL_IDS if probe else None,
            stream=9,
        )
    return t.build(GREEN)


# ---------------------------------------------------------------------------------------------
def test_measured_lanes_show_partition_sizes():
    tl = green_run()
    lanes, src = sm.sm_lanes(tl, 0, 0)
    assert src == "measured"
    meas = lanes[lanes["measured"]]
    assert (meas["sm_first"] == meas["sm_last"]).all()
    per_gc = meas.groupby("green_context")["sm_first"].nunique().to_dict()
    assert per_gc == {SMALL: 16, LARGE: 116}
    assert sum(per_gc.values()) == H200.sm_count
    assert set(meas[meas.green_context == SMALL]["sm_first"]) == set(SMALL_IDS.tolist())
    # the uninstrumented GEMM is estimated, on the SM ids measured for its partition
    est = lanes[~lanes["measured"]]
    assert set(tl.names(est["name"])) == {"sm90_xmma_gemm_bf16"}
    est_sms = set(sm.expand_lanes(est)["sm"].tolist())
    assert est_sms == set(LARGE_IDS.tolist())
    # blocks of one kernel on one SM merge into one busy interval per wave at most
    assert len(meas) < len(tl.sm_blocks)


def test_measured_partition_busy_fractions_come_from_the_blocks():
    tl = green_run()
    s = sm.sm_summary(tl, 0, 0)
    assert s.source == "measured"
    parts = {p.green_context: p for p in s.partitions}
    assert {g: p.sm_count for g, p in parts.items()} == {SMALL: 16, LARGE: 116}
    # independent computation: union of blocks per SM of the small partition / (16 x span)
    b = tl.sm_blocks[tl.sm_blocks.green_context == SMALL].sort_values(["sm", "start"])
    busy = 0
    for _, g in b.groupby("sm"):
        s0, e0 = g["start"].to_numpy(), g["end"].to_numpy()
        cur_s, cur_e = s0[0], e0[0]
        for a, z in zip(s0[1:], e0[1:]):
            if a > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = a, z
            else:
                cur_e = max(cur_e, z)
        busy += cur_e - cur_s
    ev = tl.events
    span = ev["end"].max() - ev["start"].min()
    assert parts[SMALL].busy_fraction == pytest.approx(busy / (16 * span), rel=1e-6)
    assert 0 < parts[SMALL].busy_fraction < 1 and 0 < parts[LARGE].busy_fraction < 1
    assert 0 < s.busy_fraction < 1


def test_estimate_agrees_with_measurement_within_10_percent():
    tl = green_run()
    agree = estimate_agreement(tl, 0, 0)
    assert agree is not None and agree.kernels == 64
    assert abs(agree.relative_error) < 0.10, agree
    # and the whole-device busy fraction, measured vs fully estimated
    est = sm._sm_time(tl, 0, 0, "estimated")
    meas = sm._sm_time(tl, 0, 0, "measured")
    assert est.source == "estimated" and meas.source == "measured"
    assert est.device_busy == pytest.approx(meas.device_busy, rel=0.10)


def test_estimated_layout_is_contiguous_per_partition():
    tl = green_run(probe=False)
    lanes, src = sm.sm_lanes(tl, 0, 0)
    assert src == "estimated" and not lanes["measured"].any()
    small = lanes[lanes.green_context == SMALL]
    large = lanes[lanes.green_context == LARGE]
    assert small["sm_first"].min() == 0 and small["sm_last"].max() == 15
    assert large["sm_first"].min() == 16 and large["sm_last"].max() == 131
    s = sm.sm_summary(tl, 0, 0)
    assert s.source == "estimated"
    assert [p.sm_count for p in s.partitions] == [16, 116]


def test_concurrent_kernels_stack_and_levels_clip():
    t = Trace()
    t.kernel("a", 0, 1000, grid=50)
    t.kernel("b", 0, 1000, grid=50, stream=8)
    t.kernel("c", 0, 1000, grid=50, stream=9)  # 150 SMs wanted on 132: clipped
    tl = t.build()
    lanes, _ = sm.sm_lanes(tl, 0, 0)
    ranges = sorted(zip(tl.names(lanes["name"]), lanes["sm_first"], lanes["sm_last"]))
    # a on 0-49, b stacked on 50-99, c on 100-131 and wrapped around to 0-17
    assert ranges == [("a", 0, 49), ("b", 50, 99), ("c", 0, 17), ("c", 100, 131)]
    s = sm.sm_summary(tl, 0, 0)
    assert s.busy_fraction == pytest.approx(1.0)  # 150 wanted, 132 available, whole span
    assert s.partitions == ()  # no green contexts on this device


def test_multi_wave_and_unknown_grid():
    t = Trace()
    # 256 threads x 32 regs -> 8 blocks/SM -> 1056 blocks per wave: 1584 blocks = 2 waves, all SMs
    t.kernel("full", 0, 1000, grid=1584)
    # 1024 threads x 64 regs -> 1 block/SM: 198 blocks = 2 waves; still all 132 SMs over the duration
    t.kernel("two_waves", 2000, 1000, grid=198, threads=1024, regs=64)
    t.kernel("unknown", 4000, 1000, grid=-1)  # no launch configuration: the whole partition
    t.kernel("small", 6000, 1000, grid=33)
    tl = t.build()
    st = sm._sm_time(tl, 0, 0, "estimated")
    expected = 132 * 1000 * 3 + 33 * 1000
    assert st.device_busy == pytest.approx(expected)
    util = sm.sm_utilization(tl, 0, 0, bins=7)
    dev = util[util.scope == "device"]
    assert dev["busy_sm_ns"].sum() == pytest.approx(expected)
    assert dev["utilization"].tolist() == pytest.approx([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.25])


def test_idle_partition_fires_on_idle_partition_only():
    busy = sm.idle_partition_findings(green_run(small_work=True))
    assert busy == []
    idle = sm.idle_partition_findings(green_run(small_work=False))
    assert len(idle) == 1
    f = idle[0]
    assert f.rule == "idle_partition" and f.data["green_context"] == SMALL and f.data["sm_count"] == 16
    assert f.data["busy_fraction"] < 0.1 and f.severity == "critical"
    span = f.data["span_ns"]
    assert f.data["idle_sm_ns"] == pytest.approx(16 * span * (1 - f.data["busy_fraction"]), rel=1e-3)
    assert f.wasted_ns == pytest.approx(f.data["idle_sm_ns"] / 132, abs=1)
    assert f.data["device_sm_count"] == 132 and f.data["source"] == "measured"
    assert f.data["end_ns"] - f.data["start_ns"] == span  # the dashboard link opens the whole span
    # a device without green contexts never has an idle partition
    t = Trace()
    t.kernel("k", 0, 1000, grid=4)
    t.kernel("k", 10_000, 1000, grid=4)
    assert sm.idle_partition_findings(t.build()) == []


def test_utilization_partitions_and_bins():
    tl = green_run()
    util = sm.sm_utilization(tl, 0, 0, bins=50)
    assert set(util["scope"]) == {"device", "partition"}
    assert set(util[util.scope == "partition"]["green_context"]) == {SMALL, LARGE}
    assert ((util["utilization"] >= 0) & (util["utilization"] <= 1 + 1e-9)).all()
    s = sm.sm_summary(tl, 0, 0)
    part = util[(util.scope == "partition") & (util.green_context == SMALL)]
    span = part["end"].max() - part["start"].min()
    assert part["busy_sm_ns"].sum() / (16 * span) == pytest.approx(
        {p.green_context: p.busy_fraction for p in s.partitions}[SMALL], rel=1e-5
    )


def test_bin_coverage_matches_brute_force():
    rng = np.random.default_rng(3)
    n, n_sm = 300, 20
    first = rng.integers(0, n_sm, n)
    last = np.minimum(first + rng.integers(0, 5, n), n_sm - 1)
    start = rng.integers(0, 10_000, n)
    end = start + rng.integers(1, 3_000, n)
    edges = np.linspace(-500, 12_000, 26).astype(np.int64)
    got = sm._range_bin_coverage(first, last, start, end, n_sm, edges)
    want = np.zeros((n_sm, len(edges) - 1))
    for f, l_, s_, e_ in zip(first, last, start, end):
        ov = np.clip(np.minimum(e_, edges[1:]) - np.maximum(s_, edges[:-1]), 0, None)
        want[f : l_ + 1] += ov
    assert np.allclose(got, want)


def test_unknown_sm_count_gives_none():
    t = Trace()
    t.kernel("k", 0, 1000, grid=4)
    tl = t.build(device=DeviceInfo(0, 0, "mystery accelerator"))
    assert sm.sm_lanes(tl, 0, 0)[1] == "none"
    assert sm.sm_summary(tl, 0, 0).source == "none"
    assert sm.sm_utilization(tl, 0, 0).empty


def test_lanes_figure_has_one_row_per_sm():
    for probe, label in ((True, "measured"), (False, "estimated")):
        grid = sm.sm_grid(green_run(probe=probe), 0, 0, bins=120)
        fig = sm_lanes_figure(grid)
        heat = [tr for tr in fig.data if tr.type == "heatmap"]
        assert len(heat) == 2  # one per partition, each in its own colour
        rows = sorted(y for tr in heat for y in tr.y)
        assert rows == list(range(132))
        assert sum(len(tr.z) for tr in heat) == 132
        assert label in fig.layout.title.text and "132 SMs" in fig.layout.title.text
        assert all(0 <= v <= 1 for tr in heat for row in tr.z for v in row)
    util_fig = partition_utilization_figure(sm.sm_utilization(green_run(), 0, 0, bins=40))
    assert len(util_fig.data) == 3  # device + two partitions
    assert "measured" in util_fig.layout.title.text


def test_lanes_figure_compact_and_escaped_title():
    grid = sm.sm_grid(green_run(), 0, 0, bins=120)
    hostile = msgspec.structs.replace(grid, device_label="rank 0 device 0 · <b onmouseover=x>GPU</b> & co")
    title = sm_lanes_figure(hostile).layout.title.text
    assert "<b" not in title and "&lt;b onmouseover=x&gt;GPU&lt;/b&gt; &amp; co" in title
    full = [tr for tr in sm_lanes_figure(grid).data if tr.type == "heatmap"]
    small = [tr for tr in sm_lanes_figure(grid, compact=True).data if tr.type == "heatmap"]
    assert all(tr.text is not None for tr in full) and all(tr.text is None for tr in small)
    assert all("%{text}" not in tr.hovertemplate for tr in small)
    for a, b in zip(full, small):  # the same cells, as integer percent
        assert np.asarray(b.z).dtype == np.uint8 and (b.zmin, b.zmax) == (0, 100)
        assert np.array_equal(
            np.asarray(b.z), np.clip(np.round(np.asarray(a.z) * 100), 0, 100).astype(np.uint8)
        )
    assert len(sm_lanes_figure(grid, compact=True).to_json()) < len(sm_lanes_figure(grid).to_json()) / 2


def test_green_context_explanation():
    seq = Trace()
    for i in range(4):
        seq.kernel("sm90_xmma_gemm_bf16", i * 500_000, 450_000, grid=264, threads=384, regs=168, smem=200_000)
    for i in range(8):
        seq.kernel("sigmoid_kernel", 2_000_000 + i * 20_000, 18_000, grid=16384, regs=24)
    seq_tl = seq.build(variant="sequential")
    var = Trace()
    for i in range(4):  # 264 tiles: 2 waves on 132 SMs, 3 waves on 116 -> 1.5x longer
        var.kernel(
            "sm90_xmma_gemm_bf16", i * 700_000, 675_000, LARGE, grid=264, threads=384, regs=168, smem=200_000
        )
    for i in range(8):  # sigmoids on 16 SMs, done early: the small partition idles
        var.kernel("sigmoid_kernel", i * 100_000, 90_000, SMALL, grid=16384, regs=24, stream=9)
    var_tl = var.build(GREEN)
    ex = sm.green_context_explanation(var_tl, seq_tl)
    assert ex.verdict == "slowdown" and ex.ratio == pytest.approx(2_775_000 / 2_158_000)
    assert ex.matmul_name == "sm90_xmma_gemm_bf16"
    assert ex.matmul_ns_variant == 4 * 675_000 and ex.matmul_ns_sequential == 4 * 450_000
    assert ex.matmul_ratio == pytest.approx(1.5)
    assert (ex.matmul_sms_variant, ex.matmul_sms_sequential) == (116, 132)
    assert ex.sm_ratio == pytest.approx(116 / 132)
    assert (ex.matmul_waves_variant, ex.matmul_waves_sequential) == (3, 2)
    assert ex.starving_green_context == LARGE and ex.small_green_context == SMALL
    assert ex.small_sm_count == 16
    assert ex.small_busy_fraction == pytest.approx(8 * 90_000 / 2_775_000, rel=1e-6)
    assert ex.small_idle_sm_ns == pytest.approx(16 * 2_775_000 - 16 * 8 * 90_000, abs=1)
    for text in ("1.29x", "116 SMs instead of 132", "3 wave(s)", "16-SM partition"):
        assert text in green_context_message(ex)


def test_only_probed_launches_count_as_measured():
    t = Trace()
    for i in range(6):  # the workload probes every other launch of the same kernel
        t.kernel(
            "sigmoid_kernel",
            i * 100_000,
            50_000,
            SMALL,
            grid=16384,
            regs=24,
            probe_ids=SMALL_IDS if i % 2 == 0 else None,
        )
    tl = t.build(GREEN)
    lanes, src = sm.sm_lanes(tl, 0, 0)
    assert src == "measured"
    est = lanes[~lanes["measured"]]
    assert sorted(set(est["start"].tolist())) == [100_000, 300_000, 500_000]
    assert set(sm.expand_lanes(est)["sm"].tolist()) == set(SMALL_IDS.tolist())
    assert estimate_agreement(tl, 0, 0).kernels == 3
    # measured and estimated launches together keep the partition busy 6 x 50 us of its span
    part = {p.green_context: p for p in sm.sm_summary(tl, 0, 0).partitions}[SMALL]
    assert part.busy_fraction == pytest.approx(6 * 50_000 / 550_000, rel=0.01)


def test_green_context_explanation_when_the_small_partition_starves():
    """Memory-bound sigmoids confined to 16 SMs take far longer than on 132: the small partition
    sets the pace and the large one idles."""
    seq = Trace()
    seq.kernel("sm90_xmma_gemm_bf16", 0, 400_000, grid=264, threads=384, regs=168, smem=200_000)
    for i in range(8):
        seq.kernel("sigmoid_kernel", 400_000 + i * 20_000, 20_000, grid=16384, regs=24)
    seq.kernel("tl_probe_small_partition", 560_000, 3_000, grid=528, threads=32)
    seq_tl = seq.build(variant="sequential")
    var = Trace()
    var.kernel("sm90_xmma_gemm_bf16", 0, 460_000, LARGE, grid=264, threads=384, regs=168, smem=200_000)
    for i in range(8):
        var.kernel("sigmoid_kernel", i * 120_000, 120_000, SMALL, grid=16384, regs=24, stream=9)
    var.kernel("tl_probe_small_partition", 960_000, 3_000, SMALL, grid=528, threads=32, stream=9)
    ex = sm.green_context_explanation(var.build(GREEN), seq_tl)
    assert ex.verdict == "slowdown"
    assert ex.starving_green_context == SMALL and ex.starving_sm_count == 16
    assert ex.elementwise_ns_variant == 8 * 120_000 and ex.elementwise_ns_sequential == 8 * 20_000
    assert ex.elementwise_ratio == pytest.approx(6.0)
    assert ex.large_green_context == LARGE and ex.large_sm_count == 116
    # 264 blocks at 1 block/SM: 3 waves on 116 SMs (2 on 132); all 116 SMs busy while it runs
    assert ex.matmul_waves_variant == 3 and ex.matmul_waves_sequential == 2
    assert ex.large_busy_fraction == pytest.approx(460_000 / 963_000, rel=1e-9)
    assert ex.large_idle_sm_ns == 116 * (963_000 - 460_000)
    assert "16-SM partition 1 sets the pace" in green_context_message(ex) and "(6.00x)" in green_context_message(ex)


def test_random_traces_are_consistent():
    """Invariants on random kernels: the binned utilization integrates to the summary's SM-time, the
    per-SM grid to the lanes' SM-time, and SM-time never exceeds SMs x kernel time."""
    rng = np.random.default_rng(11)
    t = Trace()
    for i in range(400):
        start = int(rng.integers(0, 2_000_000))
        gc = int(rng.choice([-1, SMALL, LARGE]))
        t.kernel(
            f"k{i % 7}",
            start,
            int(rng.integers(100, 50_000)),
            gc,
            grid=int(rng.integers(1, 3000)),
            threads=int(rng.choice([64, 256, 1024])),
            regs=int(rng.integers(16, 128)),
            stream=int(rng.integers(0, 4)),
        )
    tl = t.build(GREEN)
    s = sm.sm_summary(tl, 0, 0)
    util = sm.sm_utilization(tl, 0, 0, bins=97)
    dev = util[util.scope == "device"]
    span = dev["end"].max() - dev["start"].min()
    assert dev["busy_sm_ns"].sum() / (132 * span) == pytest.approx(s.busy_fraction, rel=1e-5)
    for p in s.partitions:
        rows = util[
            (util.scope == "partition")
            & (util.green_context == (-1 if p.green_context is None else p.green_context))
        ]
        assert rows["busy_sm_ns"].sum() / (p.sm_count * span) == pytest.approx(
            p.busy_fraction, rel=1e-5, abs=1e-9
        )
        assert 0 <= p.busy_fraction <= 1
    # partition -1 holds no SMs of its own here (16 + 116 = 132): its work may use the whole device
    # and counts in the device's busy fraction; the listed partitions are disjoint
    assert {p.green_context: p.sm_count for p in s.partitions} == {SMALL: 16, LARGE: 116}
    assert set(util[util.scope == "partition"]["green_context"]) == {SMALL, LARGE, -1}
    k = tl.events[tl.events.kind == int(EventKind.KERNEL)]
    assert s.busy_fraction * 132 * span <= 132 * (k["end"] - k["start"]).sum()
    lanes, _ = sm.sm_lanes(tl, 0, 0)
    grid = sm.sm_grid(tl, 0, 0, bins=50)
    widths = np.diff(grid.edges)
    lane_time = ((lanes["sm_last"] - lanes["sm_first"] + 1) * (lanes["end"] - lanes["start"])).sum()
    assert (grid.busy * widths[None, :]).sum() <= lane_time + 1


CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")
@pytest.mark.parametrize(
    "name, sms",
    [
        ("nvfuser/report1.sqlite", 132),
        ("pipit/perlmutter-cloverleaf-cuda.sqlite", 108),
        ("tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 132),
        ("hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz", 108),
    ],
)
def test_estimates_on_real_traces(name, sms):
    from tracelab.io import load_trace

    tl = load_trace(CORPUS / name)
    d = next(d for d in tl.devices if len(tl.events[(tl.events.kind == 0) & (tl.events.device == d.device)]))
    s = sm.sm_summary(tl, d.rank, d.device)
    assert s.source == "estimated" and s.partitions == ()
    k = tl.events[(tl.events.kind == int(EventKind.KERNEL)) & (tl.events.device == d.device)]
    g = tl.gpu_events()
    g = g[g.device == d.device]
    span = g["end"].max() - g["start"].min()
    # SM-time <= SMs x kernel time, and every kernel occupies at least one SM
    assert 0 < s.busy_fraction <= (k["end"] - k["start"]).sum() / span + 1e-9
    # ... and >= 1 SM x the union of kernel intervals (some SM is busy whenever a kernel runs)
    iv = k.sort_values("start")[["start", "end"]].to_numpy()
    union, cur_s, cur_e = 0, iv[0][0], iv[0][1]
    for a, z in iv[1:]:
        if a > cur_e:
            union, cur_s, cur_e = union + cur_e - cur_s, a, z
        else:
            cur_e = max(cur_e, z)
    union += cur_e - cur_s
    assert s.busy_fraction * sms * span >= union * (1 - 1e-6)
    lanes, src = sm.sm_lanes(tl, d.rank, d.device)
    assert src == "estimated" and lanes["sm_last"].max() < sms and set(lanes["kernel"]) == set(k.index)
    fig = sm_lanes_figure(sm.sm_grid(tl, d.rank, d.device, bins=100))
    assert sum(len(tr.z) for tr in fig.data) == sms


def _blocks_of(tl, spec):
    """sm_blocks for `spec` = [(kernel name, SM ids, start offset, end offset)], each block running
    on its SM from the kernel's start + start offset to its end - end offset; column `kernel` = the
    kernel's row in tl.events."""
    ev = tl.events
    frames = []
    for name, ids, lo, hi in spec:
        row = int(np.flatnonzero(tl.names(ev["name"]) == name)[0])
        k = ev.iloc[row]
        frames.append(
            pd.DataFrame(
                {
                    "rank": 0,
                    "device": 0,
                    "green_context": int(k["green_context"]),
                    "sm": np.asarray(ids, dtype=np.int32),
                    "start": int(k["start"]) + lo,
                    "end": int(k["end"]) - hi,
                    "name": int(k["name"]),
                    "kernel": row,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_kernel_agreement_exact_where_concurrent_kernels_stack_on_shared_sms():
    """Two 16-block kernels at the same time, each on 16 distinct SMs, both on SMs 0-15 (how the
    H200 packed overlap/concurrent_kernels): kernel by kernel the estimate (16 SMs x duration) is
    exact, while the union of busy SMs is half of what the estimate stacks."""
    t = Trace()
    t.kernel("a", 1_000, 100_000, grid=16, threads=128)
    t.kernel("b", 1_010, 100_000, grid=16, threads=128, stream=8)
    tl = t.build()
    tl = dataclasses.replace(tl, sm_blocks=_blocks_of(tl, [("a", range(16), 0, 0), ("b", range(16), 0, 0)]))
    k = kernel_sm_agreement(tl, 0, 0)
    assert k is not None and k.kernels == 2
    assert k.measured_sm_ns == k.estimated_sm_ns == 2 * 16 * 100_000
    assert k.relative_error == 0.0 and k.worst_relative_error == 0.0
    assert k.shared_estimated_sm_ns == k.estimated_sm_ns and k.contended_kernels == 0  # 32 of 132 SMs
    u = estimate_agreement(tl, 0, 0)
    assert u.measured_sm_ns == 16 * 100_010  # union over SMs 0-15
    assert u.relative_error == pytest.approx(2 * 100_000 / 100_010 - 1)  # ~ +100%
    # blocks are clipped to their kernel; blocks of unknown kernels and timelines without the
    # column do not count
    b = _blocks_of(tl, [("a", range(16), -50, 0), ("b", range(8), 0, 40_000)])
    b.loc[b.index[-1], "kernel"] = -1
    k2 = kernel_sm_agreement(dataclasses.replace(tl, sm_blocks=b), 0, 0)
    assert k2.measured_sm_ns == 16 * 100_000 + 7 * 60_000
    assert k2.worst_kernel == int(np.flatnonzero(tl.names(tl.events["name"]) == "b")[0])
    assert k2.worst_relative_error == pytest.approx(16 * 100_000 / (7 * 60_000) - 1)
    assert kernel_sm_agreement(dataclasses.replace(tl, sm_blocks=b.drop(columns="kernel")), 0, 0) is None


def test_kernel_agreement_shares_a_contended_partition():
    """A multi-wave kernel (every SM wanted) beside a 132-block kernel: alone each would take all 132
    SMs, together the hardware splits them (here 66 + 66). The plain per-kernel estimate is 2x the
    measurement; with the partition's proportional share it is exact."""
    t = Trace()
    t.kernel("waves", 0, 10_000, grid=132 * 8, threads=256)
    t.kernel("gemm", 0, 10_000, grid=132, threads=256, stream=8)  # uninstrumented
    tl = t.build()
    tl = dataclasses.replace(tl, sm_blocks=_blocks_of(tl, [("waves", range(66), 0, 0)]))
    k = kernel_sm_agreement(tl, 0, 0)
    assert k.kernels == 1 and k.contended_kernels == 1
    assert k.measured_sm_ns == 66 * 10_000 and k.estimated_sm_ns == 132 * 10_000
    assert k.relative_error == pytest.approx(1.0)
    assert k.shared_estimated_sm_ns == pytest.approx(66 * 10_000) and abs(k.shared_relative_error) < 1e-9


@pytest.mark.parametrize("probe", [False, True])
def test_sm_time_after_the_lanes_equals_sm_time_alone(probe):
    """The dashboard's SM lanes leave their estimate in the run's analysis context for the analysis's
    SM time (AnalysisContext.put / take): the summary is the one computed from scratch on another copy of
    the timeline without any context, and the estimate is taken once (not kept for the context's life)."""
    from tracelab.analyses.core.memo import AnalysisContext

    first, alone = green_run(probe=probe), green_run(probe=probe)
    for tl in (first, alone):
        assert tl.devices
    d = first.devices[0]
    key = ("kept", ("sm_estimated", d.rank, d.device, "auto"))
    ctx = AnalysisContext(first)
    with ctx.active():
        lanes, src = sm.sm_lanes(first, d.rank, d.device)
        assert src == ("measured" if probe else "estimated")
        assert len(lanes) and (key in ctx._values) == (src == "estimated")
        assert sm.sm_summary(first, d.rank, d.device) == sm.sm_summary(alone, d.rank, d.device)
        assert key not in ctx._values
        # lanes asked for after the SM time leave nothing behind
        sm.sm_lanes(first, d.rank, d.device)
        assert key not in ctx._values
    # the other order (SM time first, then the lanes) gives the same summary
    other = green_run(probe=probe)
    with AnalysisContext(other).active():
        summary = sm.sm_summary(other, d.rank, d.device)
        sm.sm_lanes(other, d.rank, d.device)
        assert sm.sm_summary(other, d.rank, d.device) == summary == sm.sm_summary(alone, d.rank, d.device)
