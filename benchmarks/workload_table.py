"""Build the README workload table.

    python benchmarks/workload_table.py CACHE_DIR [--runs DIR ...] [--save FILE] [--load FILE ...]

Rows come from `tracelab analyze --json` (the real CLI, one subprocess per run) on every bundled demo
run (unpacked into CACHE_DIR) and on every run directory under each `--runs DIR`, plus step times
from meta.json and figures computed from the same Timeline (median kernel→kernel gap, fusion figures,
queue delays, graph overlap). `--save` writes the rows as JSON (the compact summary of runs that are
not bundled, e.g. the H100 re-recordings); `--load` adds rows saved earlier. Prints the Markdown table,
rows sorted by workload, variant, backend, GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tracelab.analyses.device.fusion import fusion_figures
from tracelab.analyses.device.queue_delay import graph_overlap, kernel_latency, stream_delays
from tracelab.demo import demo_run_paths
from tracelab.io.detect import load_run_dir
from tracelab.model import EventKind

ORDER = ["overlap", "sync_pitfalls", "pdl", "graphs", "green_contexts", "fusion", "default_stream", "priorities", "input_pipeline", "comm_overlap"]


def us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def k2k_gap(tl) -> float:
    ev = tl.events
    k = ev[ev.kind == int(EventKind.KERNEL)]
    gaps = []
    for _, s in k.groupby("stream"):
        s = s.sort_values("start")
        gaps.append(s.start.to_numpy()[1:] - s.end.to_numpy()[:-1])
    g = np.concatenate(gaps) if gaps else np.zeros(0)
    return float(np.median(g)) if len(g) else float("nan")


def headline(w: str, v: str, doc: dict, tl, fig: dict) -> str:
    d = doc["devices"][0]
    f = {x["rule"]: x for x in doc["findings"]}
    busy = d["busy_ns"] / d["span_ns"]
    ov = d["overlap"]
    cc = f"kernels on ≥2 streams {100 * ov['compute_compute_ns'] / max(1, d['kernel_ns']):.0f}% of kernel time"
    if w == "overlap" and v != "concurrent_kernels":
        head = f"copy/compute overlap {100 * ov['compute_copy_ns'] / max(1, d['memcpy_ns']):.0f}% of copy time ({ms(ov['compute_copy_ns'])} of {ms(d['memcpy_ns'])})"
        if "pageable_memcpy" in f:
            head += f"; pageable_memcpy ×{f['pageable_memcpy']['count']}"
        return head
    if w == "overlap":
        return cc
    if w == "input_pipeline":  # issue 29
        ib = f.get("input_bound")
        iw = [g for g in doc["gaps"] if g["cause"] == "input_wait"]
        idle = max(sum(g["duration_ns"] for g in doc["gaps"]), 1)
        return (f"input_bound ×{ib['count']} of {ib['data']['total_steps']} steps" if ib else "no input_bound") + (
            f"; input_wait gaps {len(iw)} = {ms(sum(g['duration_ns'] for g in iw))} "
            f"({100 * sum(g['duration_ns'] for g in iw) / idle:.0f}% of gap time)"
        )
    if w == "sync_pitfalls":
        s = f.get("sync_per_iteration")
        hs = [g for g in doc["gaps"] if g["cause"] == "host_sync"]
        return (f"sync_per_iteration ×{s['count']}, stall {ms(s['wasted_ns'])}" if s else "no sync_per_iteration") + (
            f"; host_sync gaps {len(hs)} = {ms(sum(g['duration_ns'] for g in hs))}"
        )
    if w == "pdl":
        head = f"median kernel→kernel gap {k2k_gap(tl) / 1000:+.2f} µs"
        if "pdl" in f:
            head += f"; pdl ×{f['pdl']['count']}: " + f["pdl"]["message"].split(": ", 1)[1]
        return head
    if w == "graphs" and v.startswith("multi_stream"):
        go = graph_overlap(tl)
        if go.kernels:
            fig["graph_overlap"] = go.overlap_fraction
            return (
                f"{go.kernels} graph kernels on {go.streams} streams, ≥2 at once {ms(go.concurrent_ns)} "
                f"of {ms(go.union_ns)} ({100 * go.concurrent_ns / max(1, go.union_ns):.0f}%); {cc}"
            )
        return cc
    if w == "graphs":
        lb = f.get("launch_bound")
        return f"idle {100 * (1 - busy):.0f}%, median kernel→kernel gap {k2k_gap(tl) / 1000:.2f} µs" + (
            f"; launch_bound ×{lb['count']}" if lb else ""
        )
    if w == "fusion":
        ff = fusion_figures(tl)
        fig["kernel_ns_per_step"] = ff.kernel_ns_per_step
        head = (
            f"{ff.kernels_per_step:.0f} kernel(s)/step, kernel time {us(ff.kernel_ns_per_step)}/step, "
            f"{ff.bytes_per_step / 1e6:.0f} MB/step at {ff.bandwidth_gb_s / 1000:.2f} TB/s"
        )
        u = f.get("unfused_elementwise")
        return head + (f"; unfused_elementwise ×{u['count']}, saves ≈ {ms(u['wasted_ns'])}" if u else "")
    if w == "default_stream":
        i = f.get("implicit_default_stream_sync")
        return cc + (f"; implicit_default_stream_sync ×{i['count']}, held {ms(i['wasted_ns'])}" if i else "")
    if w == "priorities":
        lat = kernel_latency(tl, "latency_kernel")
        big = max(stream_delays(tl), key=lambda s: s.stats.count)
        fig["latency_median_ns"] = lat.delay.median_ns
        return (
            f"latency_kernel launch→start median {us(lat.delay.median_ns)}, p90 {us(lat.delay.p90_ns)}, "
            f"max {us(lat.delay.max_ns)} (n={lat.delay.count}); long kernels' queue median {ms(big.stats.median_ns)}"
        )
    parts = d["sm"]["partitions"]
    return f"SM busy ({d['sm']['source']}) {100 * d['sm']['busy_fraction']:.0f}%" + (
        "; partitions " + ", ".join(f"{q['sm_count']} SMs {100 * q['busy_fraction']:.0f}%" for q in parts) if parts else ""
    )


def row(p: Path) -> dict:
    meta = json.loads((p / "meta.json").read_text())
    env = dict(os.environ, PYTHONPATH=".")
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tracelab", "analyze", str(p), "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    tl = load_run_dir(p)
    d = doc["devices"][0]
    w, v, b = meta["workload"], meta["variant"], meta["backend"]
    extra = "-".join(f"{k}={val}" for k, val in meta["params"].items() if k == "matmul" and val != "cublas")
    fig: dict = {}
    head = headline(w, v, doc, tl, fig)
    return {
        "workload": w,
        "variant": v + (f" ({extra})" if extra else ""),
        "backend": b,
        "gpu": d["name"],
        "step_ms": meta["mean_step_ms"],
        "busy_pct": 100 * d["busy_ns"] / d["span_ns"],
        "headline": head,
        "figures": fig,
        "findings": {x["rule"]: [x["count"], x["wasted_ns"]] for x in doc["findings"]},
        "recorded": meta.get("created", ""),
    }


def add_speedups(rows: list[dict]) -> None:
    """fusion: kernel time per step of eager_ops (same backend and GPU) / this variant's."""
    base = {
        (r["backend"], r["gpu"]): r["figures"]["kernel_ns_per_step"]
        for r in rows
        if r["workload"] == "fusion" and r["variant"] == "eager_ops"
    }
    for r in rows:
        b = base.get((r["backend"], r["gpu"]))
        if r["workload"] == "fusion" and r["variant"] != "eager_ops" and b and "; speedup" not in r["headline"]:
            r["headline"] += f"; {b / r['figures']['kernel_ns_per_step']:.1f}× faster kernels than eager_ops"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cache")
    ap.add_argument("--runs", action="append", default=[], type=Path)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--load", action="append", default=[], type=Path)
    ap.add_argument("--no-demo", action="store_true")
    a = ap.parse_args()
    paths = [] if a.no_demo else list(demo_run_paths(a.cache))
    for d in a.runs:
        paths += sorted(q for q in d.iterdir() if (q / "meta.json").is_file())
    rows = [row(p) for p in paths]
    add_speedups(rows)
    if a.save:
        a.save.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    for f in a.load:
        rows += json.loads(f.read_text())
    order = {n: i for i, n in enumerate(ORDER)}
    rows.sort(key=lambda r: (order.get(r["workload"], 99), r["variant"], r["backend"], r["gpu"]))
    out = [
        "| workload | variant | backend | GPU | step time | GPU busy | headline |",
        "|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        gpu = r["gpu"].replace("NVIDIA ", "").replace(" 80GB HBM3", "")
        out.append(
            f"| {r['workload']} | {r['variant']} | {r['backend']} | {gpu} | {r['step_ms']:.3f} ms | {r['busy_pct']:.1f}% | {r['headline']} |"
        )
    print("\n".join(out))


if __name__ == "__main__":
    main()
