"""launch_bound: stretches of tiny kernels with the GPU idle between launches."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.intervals import covered_length
from tracelab.analyses.core.rows import device_union
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import (
    FindingContext,
    Prose,
    Rule,
    Window,
    fired,
    join_places,
    string_ids,
    window,
)
from tracelab.model import EventKind, Flag
from tracelab.text_format import fmt_ns

GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)


class DeviceStretches(TypedDict):
    rank: int
    device: int
    stretches: int
    kernels: int
    idle_ns: int


class Stretch(TypedDict):
    rank: int
    device: int
    start_ns: int
    end_ns: int
    kernels: int
    idle_ns: int


class LaunchBoundData(Window):
    stretches: list[Stretch]  # the 20 with the most idle time
    n_stretches: int
    devices: list[DeviceStretches]
    tiny_kernel_ns: int


def _graph_kernels(ctx: FindingContext, rows: np.ndarray, rank: int) -> np.ndarray:
    graph = (ctx.col("flags")[rows] & Flag.GRAPH) != 0
    host = ctx.hosts.get(rank)
    if host is not None and host.api_name.size:
        gids = string_ids(ctx.timeline.strings, GRAPH_LAUNCH)
        if gids.size:
            li = host.launch_index(ctx.col("correlation")[rows])
            graph |= (li >= 0) & np.isin(host.api_name[np.maximum(li, 0)], gids)
    return graph


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    tiny_ns, max_gap = int(opt["tiny_kernel_ns"]), int(opt["max_launch_gap_ns"])
    min_kernels, idle_frac = int(opt["min_stretch_kernels"]), float(opt["stretch_idle_fraction"])
    count = wasted = kernels_in = 0
    devices: list[DeviceStretches] = []
    stretches: list[Stretch] = []
    for dr, dev in zip(ctx.rows, ctx.devices):
        rows = dr.rows[ctx.col("kind")[dr.rows] == int(EventKind.KERNEL)]
        rows = rows[~_graph_kernels(ctx, rows, dr.rank)]
        if rows.size < min_kernels:
            continue
        s, e = ctx.col("start")[rows], ctx.col("end")[rows]
        reach = np.maximum.accumulate(e)
        gap = s[1:] - reach[:-1]  # device idle before each next kernel (<= 0: overlapping)
        tiny = (e - s) < tiny_ns
        link = tiny[:-1] & tiny[1:] & (gap <= max_gap)
        # runs of linked kernels: run r covers kernels [first[r], last[r]]
        brk = np.flatnonzero(~link)
        first = np.concatenate([[0], brk + 1])
        last = np.concatenate([brk, [rows.size - 1]])
        n_k = last - first + 1
        cand = n_k >= min_kernels
        if not cand.any():
            continue
        first, last, n_k = first[cand], last[cand], n_k[cand]
        # device idle inside each run (any GPU activity, copies included, counts as busy)
        du, de, _ = device_union(ctx.timeline, dr)
        span = reach[last] - s[first]
        idle = span - covered_length(du, de, s[first], reach[last])
        ok = idle >= idle_frac * np.maximum(span, 1)
        if not ok.any():
            continue
        idle_ok = int(idle[ok].sum())
        if idle_ok < float(opt["min_span_fraction"]) * dev.span_ns:
            continue
        count += int(ok.sum())
        wasted += idle_ok
        kernels_in += int(n_k[ok].sum())
        devices.append({"rank": dr.rank, "device": dr.device, "stretches": int(ok.sum()),
                        "kernels": int(n_k[ok].sum()), "idle_ns": idle_ok})
        stretches += [{"rank": dr.rank, "device": dr.device, "start_ns": int(s[f]), "end_ns": int(reach[l_]),
                       "kernels": int(k), "idle_ns": int(i_)}
                      for f, l_, k, i_ in zip(first[ok].tolist(), last[ok].tolist(), n_k[ok].tolist(), idle[ok].tolist())]
    if not count:
        return None
    worst = sorted(stretches, key=lambda x: -x["idle_ns"])[:20]
    data: LaunchBoundData = {"stretches": worst, "n_stretches": count, "devices": devices, "tiny_kernel_ns": tiny_ns,
                             **window(worst[0]["start_ns"], worst[0]["end_ns"])}
    return fired(RULE.id, ctx, kernels_in, wasted, data, "warning")


def describe(f: Finding) -> Prose:
    d = cast(LaunchBoundData, f.data)
    msg = (
        f"{d['n_stretches']} stretches of {f.count} tiny kernels (< {fmt_ns(d['tiny_kernel_ns'])} "
        f"each) with the GPU idle {fmt_ns(f.wasted_ns)} between launches: the host cannot launch fast enough. "
        "Capture them in a CUDA graph (torch.cuda.graphs, torch.compile mode='reduce-overhead') or fuse them."
    )
    where = join_places([
        f"rank {x['rank']} device {x['device']}: {x['stretches']} stretches, {x['kernels']} kernels, "
        f"{fmt_ns(x['idle_ns'])} idle"
        for x in d["devices"]
    ])
    return msg, where


RULE = Rule(
    id="launch_bound", title="stretches of tiny kernels with the GPU idle between launches",
    evaluate=evaluate, describe=describe, data=LaunchBoundData,
    fires_when=(
        "runs of ≥ min_stretch_kernels tiny kernels (< tiny_kernel_ns, not from a graph, ≤ max_launch_gap_ns "
        "apart) with the GPU idle ≥ stretch_idle_fraction of the run, idle ≥ min_span_fraction of the span"
    ),
    severity="critical / warning by the share of the span wasted, else warning",
    counts="kernels / idle inside the runs",
    options={"tiny_kernel_ns": 10_000, "max_launch_gap_ns": 100_000, "min_stretch_kernels": 32,
             "stretch_idle_fraction": 0.5, "min_span_fraction": 0.02},
    source='CUDA C++ Programming Guide, "CUDA Graphs" (launch overhead a graph removes)',
)
