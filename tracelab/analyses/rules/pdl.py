"""pdl: kernels that start before their predecessor on the same stream ends (Programmatic Dependent
Launch). Informational: PDL is a gain; the finding says how much it bought."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.names import short_name
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, join_places, string_ids, window
from tracelab.model import EventKind, Flag
from tracelab.text_format import fmt_ns

AMD_GPU = re.compile(r"AMD|Instinct|Radeon|\bMI\d{3}", re.IGNORECASE)
HIP_API = re.compile(r"^hip[A-Z]")


class DevicePdl(TypedDict):
    rank: int
    device: int
    kernels: int
    overlap_ns: int
    most_often: str  # the kernel name seen most often among them


class PdlData(Window):
    kernels: int
    flagged: int  # flagged PDL at launch
    overlapping_pairs: int
    overlap_ns: int
    mean_overlap_ns: int
    devices: list[DevicePdl]


def _hip_rank(ctx: FindingContext, rank: int) -> bool:
    """AMD/HIP traces (HIP API names on the host): no PDL there."""
    host = ctx.hosts.get(rank)
    if host is None or host.api_name.size == 0:
        return False
    hip = string_ids(ctx.timeline.strings, HIP_API)
    return bool(hip.size) and bool(np.isin(host.api_name, hip).any())


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    total = flagged_total = pairs_total = overlap_total = 0
    devices: list[DevicePdl] = []
    win: dict[str, int] = {}
    best = 0  # largest overlap of two kernels seen so far
    for dr in ctx.rows:
        info = ctx.timeline.device_info(dr.rank, dr.device)
        if info is not None and (0 < info.cc_major < int(opt["min_cc_major"]) or AMD_GPU.search(info.name)):
            continue
        if _hip_rank(ctx, dr.rank):
            continue
        rows = dr.rows[ctx.col("kind")[dr.rows] == int(EventKind.KERNEL)]
        if rows.size == 0:
            continue
        lane = ctx.col("lane")[rows].astype(np.int64)
        order = np.lexsort((ctx.col("start")[rows], lane))
        rows, lane = rows[order], lane[order]
        s, e = ctx.col("start")[rows], ctx.col("end")[rows]
        same = np.concatenate([[False], lane[1:] == lane[:-1]])
        prev_end = np.concatenate([[0], e[:-1]])
        ov = np.where(same, np.minimum(prev_end, e) - s, 0)
        overlapping = same & (ov > 0)
        flagged = (ctx.col("flags")[rows] & Flag.PDL) != 0
        hit = overlapping | flagged
        if not flagged.any() and overlapping.sum() < int(opt["min_overlaps"]):
            continue
        n = int(hit.sum())
        o = int(ov[overlapping].sum())
        j = int(np.argmax(np.where(hit, ov, -1)))  # the pair that overlaps most (or a flagged kernel)
        if not win or int(ov[j]) > best:
            best = int(ov[j])
            win = window(s[j - 1] if same[j] else s[j], e[j])
        total += n
        flagged_total += int(flagged.sum())
        pairs_total += int(overlapping.sum())
        overlap_total += o
        names, counts = np.unique(ctx.col("name")[rows][hit], return_counts=True)
        devices.append({"rank": dr.rank, "device": dr.device, "kernels": n, "overlap_ns": o,
                        "most_often": ctx.timeline.name(int(names[np.argmax(counts)]))})
    if not total:
        return None
    mean = overlap_total / pairs_total if pairs_total else 0
    data: PdlData = {"kernels": total, "flagged": flagged_total, "overlapping_pairs": pairs_total,
                     "overlap_ns": overlap_total, "mean_overlap_ns": int(mean), "devices": devices,
                     "start_ns": win["start_ns"], "end_ns": win["end_ns"]}
    return Finding(rule=RULE.id, severity="info", count=total, wasted_ns=0, data=dict(data))


def describe(f: Finding) -> Prose:
    d = cast(PdlData, f.data)
    msg = (f"{f.count} kernels start before their predecessor on the same stream has finished "
           f"(Programmatic Dependent Launch; {d['flagged']} flagged at launch): {d['overlapping_pairs']} "
           f"overlaps bought {fmt_ns(d['overlap_ns'])} in total ({fmt_ns(d['mean_overlap_ns'])} each on "
           "average).")
    return msg, join_places([f"rank {x['rank']} device {x['device']}: {x['kernels']} kernels (most often "
                             f"{short_name(x['most_often'], 50)}), {fmt_ns(x['overlap_ns'])} overlap" for x in d["devices"]])


RULE = Rule(
    id="pdl", title="kernels overlap their predecessor on the same stream (Programmatic Dependent Launch)",
    evaluate=evaluate, describe=describe, data=PdlData,
    fires_when=("kernels flagged PDL, or ≥ min_overlaps starting before their predecessor on the stream ends "
                "(cc ≥ min_cc_major, not AMD)"),
    severity="info (PDL is a gain: the finding says how much it bought)",
    counts="kernels / 0",
    options={"min_overlaps": 2, "min_cc_major": 9},
    source='CUDA C++ Programming Guide, "Programmatic Dependent Launch and Synchronization" (compute capability 9.0+)',
)
