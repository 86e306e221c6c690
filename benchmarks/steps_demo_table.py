"""Steps inferred with the markers ignored, against the marked steps, on every bundled demo run (and
the corpus traces that carry ProfilerStep markers), for this version and the previous one
(--peer-ref, read with `git show` as in bench_steps.py). Prints a Markdown table:

    python benchmarks/steps_demo_table.py [--peer-ref 3233203] [--corpus ../shared/corpus]

Columns: marked steps; inferred by the previous and by this version; the median distance from each
marked step's start to the nearest inferred start, in % of the median marked step (previous /
this); the share of marked starts within 5% of one, and the share of the others with no host event
recorded between the two times (the boundary lies in unrecorded host time)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_steps import Infer, peer_infer

from tracelab.analyses.steps.infer import infer_steps, marked_steps
from tracelab.demo import demo_run_paths
from tracelab.io import load_trace
from tracelab.io.detect import load_run_dir
from tracelab.model import EventKind, Timeline

CORPUS_MARKED = [
    "hta/df_index_resolver__df_index_resolver.json.gz",
    "hta/nccl_parser_config__nccl_data.json.gz",
    "hta/negative_queue_length_values_check__rank0.json.gz",
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/trace_diff__control__control.json.gz",
    "hta/trace_diff__test__test.json.gz",
    "kineto_tb_plugin/samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "kineto_tb_plugin/samples__resnet50_num_workers_0__worker0.1623143566756.pt.trace.json.gz",
    "kineto_tb_plugin/samples__resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz",
    "kineto_tb_plugin/samples__resnet50_num_workers_4__worker0.1623213129365.pt.trace.json.gz",
    "tracelens/mi300__resnet_act_checkpoint.json.gz",
]
NEAR = 0.05


def host_activity(tl: Timeline, rank: int, markers: set[int]) -> np.ndarray:
    ev = tl.events
    kinds = [int(k) for k in (EventKind.RUNTIME, EventKind.DRIVER, EventKind.CPU_OP, EventKind.NVTX_RANGE)]
    keep = np.isin(ev["kind"].to_numpy(), kinds) & (ev["rank"].to_numpy() == rank)
    keep &= ~np.isin(ev["name"].to_numpy(), list(markers))
    return np.sort(ev["start"].to_numpy()[keep])


def offsets(s: np.ndarray, ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    if s.size == 0:
        return np.full(ms.size, np.inf)
    j = np.clip(np.searchsorted(s, ms), 1, max(s.size - 1, 1))
    j = np.minimum(j, s.size - 1)
    lo = np.maximum(j - 1, 0)
    near = np.where(np.abs(s[lo] - ms) <= np.abs(s[j] - ms), s[lo], s[j])
    return near


def line(name: str, tl: Timeline, peer: Infer | None) -> str:
    rank = next(int(r) for r in np.unique(tl.events["rank"].to_numpy()) if marked_steps(tl, int(r))[0].size)
    ms, me = marked_steps(tl, rank)
    med = float(np.median(me - ms))
    s, _, _ = infer_steps(tl, rank)
    near = offsets(s, ms, me)
    d = np.abs(near - ms) / med
    markers = {i for i, t in enumerate(tl.strings) if t.startswith(("ProfilerStep#", "step "))}
    act = host_activity(tl, rank, markers)
    lo, hi = np.minimum(near, ms), np.maximum(near, ms)
    blind = (np.searchsorted(act, hi, "left") - np.searchsorted(act, lo, "left")) == 0
    far = d > NEAR
    cells = [name, str(ms.size)]
    if peer is not None:
        ps, _, _ = peer(tl, rank)
        pd_ = np.abs(offsets(ps, ms, me) - ms) / med if ps.size else np.array([np.inf])
        cells.append(str(ps.size))
    cells.append(str(s.size))
    if peer is not None:
        cells.append("–" if not np.isfinite(pd_).all() else f"{np.median(pd_):.1%}")
    cells.append(f"{np.median(d):.1%}")
    cells.append(f"{np.mean(~far):.0%}")
    cells.append(f"{np.mean(blind[far]):.0%}" if far.any() else "–")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-ref", default="3233203")
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus"))
    args = ap.parse_args()
    peer = peer_infer(args.peer_ref)
    head = ["run", "marked"] + (["inferred before"] if peer else []) + ["inferred after"]
    head += (["start off before"] if peer else []) + ["start off after", "starts ≤5%", "others unrecorded"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for p in demo_run_paths():
        print(line(p.name.rsplit("-", 1)[0], load_run_dir(p), peer), flush=True)
    for rel in CORPUS_MARKED:
        path = Path(args.corpus) / rel
        if path.exists():
            print(line("corpus: " + rel.split("/")[-1][:40], load_trace(path), peer), flush=True)


if __name__ == "__main__":
    main()
