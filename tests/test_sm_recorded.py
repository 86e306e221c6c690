"""Per-SM analysis on runs recorded on a real GPU (engineer G's run directories under
tracelab/demo_runs/ and tests/data/, plus any directory named by TRACELAB_SM_RUNS). Skipped until
recordings with probe data exist.

Acceptance (issue 5): on `green_contexts/green_ctx` the measured lanes show exactly the partition
sizes (their sum = the device's SMs) and the partition busy fractions come from the data; the
estimate agrees with the measurement within 10% of SM-time on the instrumented workloads — every
run's figure is printed (`pytest -s`).

The estimate assumes a kernel's blocks spread over min(grid, SMs) SMs. That holds for a kernel
running alone on its partition, and the 10% bound is asserted there. When kernels of one partition
run at the same time (PDL chains, kernels on several streams) the hardware packs their blocks onto
shared SMs, which the estimate cannot know: there the figure is printed and the estimate is only
checked to be an upper bound. Measured on an H200 (the bundled demo runs, 2026-11-22): alone
+0.7% (green_ctx, cuBLAS) to +8.9% (sequential); concurrent: green_contexts/streams +9.3% / +9.5%,
overlap/concurrent_kernels (8 streams of 16-block kernels, packed 4 blocks per SM onto 32-64 SMs)
+219% (nsys) / +253% (torch).

Kernel by kernel (`kernel_sm_agreement`, `test_estimate_agrees_kernel_by_kernel`): each kernel's
blocks per SM against its estimated SMs x its duration, no union across concurrent kernels. Measured
on the same runs (nsys / torch): green_ctx +0.72% / +0.69%, green_ctx matmul=triton +2.48% / +2.51%,
sequential +8.95% / +8.90%, overlap/concurrent_kernels +0.09% / +0.10%, serial +4.60% / +4.91%,
streams_pageable +4.50% / +4.35%, streams_pinned +4.82% / +4.55%, pdl/no_pdl +5.69% / +5.74%,
pdl/pdl +6.03% / +6.12%: within 10%. Not within 10%: green_contexts/streams +23.1% / +23.0%. There the
instrumented kernels (sigmoid_kernel, 4096 blocks = several waves over all 132 SMs, and the probe
markers) run beside the uninstrumented cuBLAS GEMM on the other stream: together they want more SMs
than the GPU has and the hardware splits them, which min(grid, SMs) x duration does not model. With
each kernel's proportional share of its partition while it is oversubscribed (the clipping
`sm_summary` does; `shared_relative_error`) it is +9.40% / +9.20%, and pdl/pdl +4.66% / +4.64%
(PDL overlaps each kernel with the tail of the previous one); the other runs never oversubscribe a
partition, so their two figures are the same. The plain figure is asserted within 10% where no
instrumented kernel shared an oversubscribed partition, the shared one on every run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sm_agreement import estimate_agreement, kernel_sm_agreement

from tracelab.analyses.sm import summary as sm
from tracelab.errors import TracelabError
from tracelab.render.figures.sm import sm_lanes_figure
from tracelab.render.text.green import green_context_message

ROOT = Path(__file__).resolve().parents[1]
SEARCH = (ROOT / "tracelab" / "demo_runs", ROOT / "tests" / "data")


def _run_dirs() -> list[Path]:
    found: set[Path] = set()
    try:  # G's bundled demo runs (may be unpacked from archives)
        from tracelab.demo import demo_run_paths

        found.update(Path(p) for p in demo_run_paths() if (Path(p) / "meta.json").is_file())
    except (ImportError, OSError, TracelabError):  # not there yet: the directories below still count
        found.update(())
    extra = os.environ.get("TRACELAB_SM_RUNS")
    for base in (*SEARCH, *(Path(x) for x in (extra.split(os.pathsep) if extra else ()))):
        if base.is_dir():
            found.update(m.parent for m in base.rglob("meta.json"))
    return sorted(found)


def _meta(d: Path) -> dict:
    try:
        return json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


RUNS = [(d, _meta(d)) for d in _run_dirs()]
PROBED = [(d, m) for d, m in RUNS if (m.get("probe") or {}).get("rows", 1) and (d / "sm_probe.npz").is_file()]
GREEN = [
    (d, m) for d, m in PROBED if m.get("workload") == "green_contexts" and m.get("variant") == "green_ctx"
]


def _load(d: Path):
    from tracelab.io.detect import load_run_dir

    return load_run_dir(d)


def _id(p) -> str:
    _d, m = p
    return f"{m.get('workload')}/{m.get('variant')}/{m.get('backend')}"


@pytest.mark.skipif(not GREEN, reason="no recorded green_contexts/green_ctx run with probe data yet")
@pytest.mark.parametrize("run", GREEN, ids=[_id(p) for p in GREEN])
def test_measured_lanes_show_the_partition_sizes(run):
    d, meta = run
    tl = _load(d)
    assert tl.sm_blocks is not None and len(tl.sm_blocks)
    rank, device = int(tl.sm_blocks["rank"].iloc[0]), int(tl.sm_blocks["device"].iloc[0])
    info = tl.device_info(rank, device)
    lanes, source = sm.sm_lanes(tl, rank, device)
    assert source == "measured"
    measured = lanes[lanes["measured"]]
    per_gc = measured.groupby("green_context")["sm_first"].nunique().to_dict()
    sizes = {c.green_context: c.sm_count for c in tl.contexts if c.is_green and c.device == device}
    expected = sorted(p["sm_count"] for p in meta["partitions"] if p.get("green"))
    print(f"\n{_id(run)}: measured SMs per green context {per_gc}; configured {sizes}; meta {expected}")
    assert sorted(per_gc.values()) == expected
    assert {g: n for g, n in per_gc.items()} == {g: sizes[g] for g in per_gc}
    assert sum(per_gc.values()) == info.sm_count == meta["gpu"]["sm_count"]
    # partitions never share an SM
    owners = measured.groupby("sm_first")["green_context"].nunique()
    assert (owners == 1).all()

    summary = sm.sm_summary(tl, rank, device)
    assert summary.source == "measured"
    parts = {p.green_context: p for p in summary.partitions if p.green_context is not None}
    assert {g: p.sm_count for g, p in parts.items()} == {g: sizes[g] for g in parts}
    # busy fractions come out of the data: the binned utilization integrates to the same SM-time
    util = sm.sm_utilization(tl, rank, device, bins=500)
    for g, p in parts.items():
        rows = util[(util.scope == "partition") & (util.green_context == g)]
        span = rows["end"].max() - rows["start"].min()
        assert rows["busy_sm_ns"].sum() / (p.sm_count * span) == pytest.approx(p.busy_fraction, rel=1e-4)
        assert 0.0 < p.busy_fraction <= 1.0
        print(f"  green context {g}: {p.sm_count} SMs, busy {p.busy_fraction:.1%}")
    # the figure draws every SM of the device, one row each, partitions in their own colours
    fig = sm_lanes_figure(sm.sm_grid(tl, rank, device, bins=200))
    heat = [tr for tr in fig.data if tr.type == "heatmap"]
    assert sum(len(tr.z) for tr in heat) == info.sm_count and len(heat) == len(per_gc)
    assert "measured" in fig.layout.title.text
    findings = sm.idle_partition_findings(tl)
    idle = {f.data["green_context"] for f in findings}
    # a partition under 3/4 busy is reported: a warning under 1/2, else info (issue 28: green_ctx's
    # 116-SM partition, ~70% busy, leaves a quarter of the GPU's SM-time idle)
    assert idle == {g for g, p in parts.items() if p.busy_fraction < sm.IDLE_PARTITION_INFO}
    for f in findings:
        frac = parts[f.data["green_context"]].busy_fraction
        assert f.severity == ("info" if frac >= sm.IDLE_PARTITION_THRESHOLD else "warning" if frac >= 0.1 else "critical")


def kernel_concurrency(tl, rank: int, device: int) -> float:
    """Kernel time / union of kernel intervals - 1, per green-context partition: 0 when the kernels
    of a partition never run at the same time."""
    ev = tl.events
    k = ev[(ev["kind"] == 0) & (ev["rank"] == rank) & (ev["device"] == device)]
    total = union = 0
    for _, g in k.groupby("green_context"):
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
        run = np.maximum.accumulate(e)
        first = np.flatnonzero(np.r_[True, s[1:] > run[:-1]])
        union += int((np.maximum.reduceat(e, first) - s[first]).sum())
        total += int((e - s).sum())
    return total / union - 1 if union else 0.0


CONCURRENT = 0.05  # kernels overlapping more than 5% of their union time


@pytest.mark.skipif(not PROBED, reason="no recorded run with probe data yet")
@pytest.mark.parametrize("run", PROBED, ids=[_id(p) for p in PROBED])
def test_estimate_agrees_with_measurement(run):
    d, _ = run
    tl = _load(d)
    if tl.sm_blocks is None or not len(tl.sm_blocks):
        pytest.skip("probe file present but no block could be aligned to the trace")
    keys = tl.sm_blocks[["rank", "device"]].drop_duplicates().to_numpy()
    for rank, device in keys:
        agree = estimate_agreement(tl, int(rank), int(device))
        conc = kernel_concurrency(tl, int(rank), int(device))
        assert agree is not None and agree.kernels > 0
        print(
            f"\n{_id(run)} r{rank}d{device}: measured {agree.measured_sm_ns / 1e6:.3f} SM-ms, estimated "
            f"{agree.estimated_sm_ns / 1e6:.3f} SM-ms over {agree.kernels} instrumented kernels: "
            f"{agree.relative_error:+.1%} (kernel concurrency {conc:.0%})"
        )
        if conc <= CONCURRENT:
            assert abs(agree.relative_error) < 0.10
        else:  # blocks of concurrent kernels share SMs: the estimate is an upper bound
            assert agree.relative_error > -0.10


def _pairs():
    """(label, green_ctx dir, sequential dir) recorded in the same session with the same backend."""
    groups: dict[tuple[str, str, str], dict[str, Path]] = {}
    for d, m in RUNS:
        if m.get("workload") == "green_contexts":
            matmul = str((m.get("params") or {}).get("matmul", ""))
            key = (str(d.parent), str(m.get("backend")), matmul if m.get("variant") == "green_ctx" else "")
            groups.setdefault(key, {})[str(m.get("variant"))] = d
    out = []
    for (parent, backend, matmul), v in sorted(groups.items()):
        seq = groups.get((parent, backend, ""), {}).get("sequential")
        if "green_ctx" in v and seq is not None:
            out.append(
                (f"{Path(parent).name}/{backend}{'/' + matmul if matmul else ''}", v["green_ctx"], seq)
            )
    return out


PAIRS = _pairs()


@pytest.mark.skipif(not PAIRS, reason="no recorded green_ctx + sequential pair yet")
@pytest.mark.parametrize("pair", PAIRS, ids=[p[0] for p in PAIRS])
def test_green_context_explanation_on_recorded_runs(pair):
    backend, green_dir, seq_dir = pair
    var, seq = _load(green_dir), _load(seq_dir)
    ex = sm.green_context_explanation(var, seq)
    print(f"\n[{backend}] {green_context_message(ex)}")
    meta = _meta(green_dir)
    large = max(p["sm_count"] for p in meta["partitions"] if p.get("green"))
    small = min(p["sm_count"] for p in meta["partitions"] if p.get("green"))
    assert ex.matmul_sms_variant == large and ex.small_sm_count == small
    assert ex.matmul_sms_sequential == meta["gpu"]["sm_count"]
    assert ex.matmul_ns_variant > 0 and ex.matmul_ns_sequential > 0
    assert ex.ratio == pytest.approx(ex.variant_span_ns / ex.sequential_span_ns)
    assert 0.0 <= ex.small_busy_fraction <= 1.0
    assert ex.small_idle_sm_ns == pytest.approx(
        ex.small_sm_count * ex.variant_span_ns * (1 - ex.small_busy_fraction), rel=1e-6, abs=2
    )
    assert np.isfinite(ex.matmul_ratio) and ex.verdict in ("slowdown", "speedup", "same")


@pytest.mark.skipif(not PROBED, reason="no recorded run with probe data yet")
@pytest.mark.parametrize("run", PROBED, ids=[_id(p) for p in PROBED])
def test_estimate_agrees_kernel_by_kernel(run):
    d, _ = run
    tl = _load(d)
    if tl.sm_blocks is None or not len(tl.sm_blocks):
        pytest.skip("probe file present but no block could be aligned to the trace")
    b = tl.sm_blocks
    # every block names the kernel event it belongs to: a kernel of its name, rank and device,
    # whose trace interval holds the block
    ev = tl.events.iloc[b["kernel"].to_numpy()]
    assert (b["kernel"].to_numpy() >= 0).all()
    assert (ev["kind"].to_numpy() == 0).all()
    for col in ("name", "rank", "device", "green_context"):
        assert (ev[col].to_numpy() == b[col].to_numpy()).all(), col
    assert (b["start"].to_numpy() >= ev["start"].to_numpy()).all()
    assert (b["end"].to_numpy() <= ev["end"].to_numpy()).all()
    for rank, device in b[["rank", "device"]].drop_duplicates().to_numpy():
        k = kernel_sm_agreement(tl, int(rank), int(device))
        on = (b["rank"] == rank) & (b["device"] == device)
        assert k is not None and k.kernels == b.loc[on, "kernel"].nunique() > 0
        worst = tl.name(int(tl.events["name"].iloc[k.worst_kernel]))
        print(
            f"\n{_id(run)} r{rank}d{device}: measured {k.measured_sm_ns / 1e6:.3f} SM-ms over {k.kernels} "
            f"kernels; estimated {k.estimated_sm_ns / 1e6:.3f} SM-ms: {k.relative_error:+.2%}; with the "
            f"partition share {k.shared_estimated_sm_ns / 1e6:.3f} SM-ms: {k.shared_relative_error:+.2%} "
            f"({k.contended_kernels} kernels shared an oversubscribed partition); worst kernel {worst!r} "
            f"{k.worst_relative_error:+.0%}"
        )
        assert abs(k.shared_relative_error) < 0.10
        if k.contended_kernels == 0:
            assert k.estimated_sm_ns == pytest.approx(k.shared_estimated_sm_ns, rel=1e-9)
            assert abs(k.relative_error) < 0.10
        else:  # SMs taken by concurrent kernels: min(grid, SMs) x duration is an upper bound
            assert k.relative_error > k.shared_relative_error


CONCURRENT_RUNS = [(d, m) for d, m in PROBED if m.get("variant") == "concurrent_kernels"]


@pytest.mark.skipif(not CONCURRENT_RUNS, reason="no recorded overlap/concurrent_kernels run yet")
@pytest.mark.parametrize("run", CONCURRENT_RUNS, ids=[_id(p) for p in CONCURRENT_RUNS])
def test_block_kernels_survive_the_store(run, tmp_path):
    from tracelab.io import trace_fingerprint
    from tracelab.store import Store

    d, _ = run
    tl = _load(d)
    st = Store(tmp_path / "runs.db")
    back = st.load(st.import_timeline(tl, source_path=d, fingerprint=trace_fingerprint(d)))
    assert "kernel" in back.sm_blocks.columns
    pd.testing.assert_frame_equal(back.sm_blocks, tl.sm_blocks, check_exact=True)
    assert kernel_sm_agreement(back, 0, 0) == kernel_sm_agreement(tl, 0, 0)
