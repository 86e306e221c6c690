"""Build the README table: `tracelab analyze --json` (the real CLI, one subprocess per run) on every
bundled demo run, plus step times from meta.json and the median kernel-to-kernel gap from the Timeline."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tracelab.demo import demo_run_paths
from tracelab.model import EventKind
from tracelab.parsers import load_trace


def us(ns): return f"{ns/1000:.1f} µs"
def ms(ns): return f"{ns/1e6:.2f} ms"

def k2k_gap(path):
    tl = load_trace(path); ev = tl.events
    k = ev[ev.kind == int(EventKind.KERNEL)]
    gaps = []
    for _, s in k.groupby("stream"):
        s = s.sort_values("start"); gaps.append(s.start.to_numpy()[1:] - s.end.to_numpy()[:-1])
    g = np.concatenate(gaps) if gaps else np.zeros(0)
    return float(np.median(g)) if len(g) else float("nan")

rows = []
env = dict(os.environ, PYTHONPATH=".")
cache = Path(sys.argv[1])
for p in demo_run_paths(cache):
    meta = json.loads((p / "meta.json").read_text())
    doc = json.loads(subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(p), "--json"], env=env,
                                    capture_output=True, text=True, check=True).stdout)
    d = doc["devices"][0]
    f = {x["rule"]: x for x in doc["findings"]}
    w, v, b = meta["workload"], meta["variant"], meta["backend"]
    extra = "-".join(f"{k}={val}" for k, val in meta["params"].items() if k == "matmul" and val != "cublas")
    busy = d["busy_ns"] / d["span_ns"]
    ov = d["overlap"]
    if w == "overlap" and v != "concurrent_kernels":
        head = f"copy/compute overlap {100*ov['compute_copy_ns']/max(1,d['memcpy_ns']):.0f}% of copy time ({ms(ov['compute_copy_ns'])} of {ms(d['memcpy_ns'])})"
        if "pageable_memcpy" in f: head += f"; pageable_memcpy ×{f['pageable_memcpy']['count']}"
    elif w == "overlap":
        head = f"kernels on ≥2 streams {100*ov['compute_compute_ns']/max(1,d['kernel_ns']):.0f}% of kernel time"
    elif w == "sync_pitfalls":
        s = f.get("sync_per_iteration")
        hs = [g for g in doc["gaps"] if g["cause"] == "host_sync"]
        head = (f"sync_per_iteration ×{s['count']}, stall {ms(s['wasted_ns'])}" if s else "no sync_per_iteration") + \
               f"; host_sync gaps {len(hs)} = {ms(sum(g['duration_ns'] for g in hs))}"
    elif w == "pdl":
        g = k2k_gap(p)
        head = f"median kernel→kernel gap {g/1000:+.2f} µs"
        if "pdl" in f:
            head += f"; pdl ×{f['pdl']['count']}: " + f["pdl"]["message"].split(": ", 1)[1]
    elif w == "graphs":
        g = k2k_gap(p)
        lb = f.get("launch_bound")
        head = f"idle {100*(1-busy):.0f}%, median kernel→kernel gap {g/1000:.2f} µs" + (f"; launch_bound ×{lb['count']}" if lb else "")
    else:
        parts = d["sm"]["partitions"]
        head = f"SM busy ({d['sm']['source']}) {100*d['sm']['busy_fraction']:.0f}%" + (
            "; partitions " + ", ".join(f"{q['sm_count']} SMs {100*q['busy_fraction']:.0f}%" for q in parts) if parts else "")
    rows.append((w, v + (f" ({extra})" if extra else ""), b, d["name"], meta["mean_step_ms"], 100 * busy, head))

order = {n: i for i, n in enumerate(["overlap", "sync_pitfalls", "pdl", "graphs", "green_contexts"])}
rows.sort(key=lambda r: (order[r[0]], r[1], r[2]))
out = ["| workload | variant | backend | GPU | step time | GPU busy | headline |", "|---|---|---|---|---:|---:|---|"]
for w, v, b, gpu, st, busy, head in rows:
    out.append(f"| {w} | {v} | {b} | {gpu} | {st:.3f} ms | {busy:.1f}% | {head} |")
print("\n".join(out))
