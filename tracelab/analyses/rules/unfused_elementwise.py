"""unfused_elementwise: chains of elementwise kernels that one fused kernel would replace.

A chain is a run of ≥ `min_chain` consecutive kernels on one stream that are all elementwise (PyTorch's
`elementwise_kernel` / `vectorized_elementwise_kernel` / `unrolled_elementwise_kernel`, Inductor's
`triton_poi_*`), all launched with the same grid and block (the same number of elements: the trace
carries no tensor addresses, equal launch shapes stand for "the same tensors") and each starting at
most `max_gap_ns` after the previous one ends. Its pattern is the shortest period p (2 ≤ p ≤
`max_period`) of the chain's kernel names: the chain is L/p repetitions of p different ops (one step
of an eager GeLU is 8); chains whose kernels are all the same op (p = 1: the same update applied to
many tensors) or without a period are left out. Each repetition could be one fused kernel that reads
the input once and writes the output once: at the bandwidth the chain's own kernels reach, that moves
the bytes of the chain's lightest kernel (a unary op: read one tensor, write one), so it takes about
as long as the chain's shortest kernel. Time saved = Σ durations − repetitions × shortest duration.
Fires when the saving is ≥ `min_fraction` of the device's span. Source: CUDA C++ Best Practices
Guide, "Memory Optimizations" (minimize data transfer between global memory and the SMs; a kernel
bound by memory bandwidth runs as long as its bytes take) and CS336 lecture 6 (kernel fusion).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.names import short_name
from tracelab.analyses.core.rows import names_matching
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, join_places, window
from tracelab.model import EventKind
from tracelab.text_format import fmt_ns

OPTIONS: dict[str, Any] = {"min_chain": 3, "max_period": 16, "max_gap_ns": 100_000, "min_fraction": 0.01,
                           "warning_fraction": 0.05}
ELEMENTWISE = re.compile(r"(?:vectorized_|unrolled_)?elementwise_kernel|^triton_poi_")
_KERNEL_CUDA = re.compile(r"(\w+?)_kernel_(?:cuda|impl)\b")
_FUNCTOR = re.compile(r"[A-Za-z_]*Functor[A-Za-z_]*")
_WRAPPERS = {"AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor", "UnaryFunctor"}


class Chain(TypedDict):
    rank: int
    device: int
    stream: int
    rows: int  # kernels in the chain
    period: int  # ops per repetition
    repetitions: int
    kernels_ns: int
    fused_kernel_ns: int  # the estimate of one fused kernel: the chain's shortest kernel
    saved_ns: int
    ops: list[str]  # one repetition's ops
    grid: list[int]
    block: list[int]
    start_ns: int


class UnfusedElementwiseData(Window):
    chains: list[Chain]  # the 20 that save most, most first
    n_chains: int
    kernels_ns: int


@functools.lru_cache(maxsize=4096)
def op_label(name: str) -> str:
    """A short label for an elementwise kernel: `tanh` for `tanh_kernel_cuda`, `pow_tensor_scalar` for `pow_tensor_scalar_kernel_impl`, `Mul` for an ATen
    `MulFunctor`, `add` for `CUDAFunctorOnSelf_add`; else the shortened kernel name."""
    if not name.startswith("triton_"):
        m = _KERNEL_CUDA.search(name)
        if m:
            return m.group(1).rsplit("::", 1)[-1]
        functors = [f for f in _FUNCTOR.findall(name) if f not in _WRAPPERS]
        if functors:
            label = re.sub(r"^CUDAFunctor(?:OnSelf|OnOther)?_", "", functors[-1]).replace("Functor", "")
            return label or functors[-1]
    return short_name(name, 40)


def periods(codes: np.ndarray, first: np.ndarray, length: np.ndarray, max_period: int) -> np.ndarray:
    """The period of every chain codes[first:first + length]: the shortest p in 1..max_period with
    chain[p:] == chain[:-p] (and length ≥ 2p), 0 if none. All chains at once (they do not overlap): one pass over
    all the codes per candidate p, not a comparison per chain and p (a big trace has tens of thousands
    of chains). A chain has period p when none of its positions i < length - p differs from i + p."""
    out = np.zeros(first.size, dtype=np.int64)
    for p in range(1, max_period + 1):
        todo = np.flatnonzero((out == 0) & (length >= 2 * p))
        if todo.size == 0:
            if not (length >= 2 * p).any():
                break
            continue
        # mismatches before each position: differs[i] counts j < i with codes[j] != codes[j + p]
        differs = np.zeros(codes.size - p + 1, dtype=np.int64)
        np.cumsum(codes[p:] != codes[:-p], out=differs[1:])
        lo = first[todo]
        hi = lo + length[todo] - p
        out[todo[differs[hi] == differs[lo]]] = p
    return out


def find_chains(ctx: FindingContext, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every qualifying chain: rank, device, stream, rows (event positions), period, saving."""
    strings = ctx.timeline.strings
    is_ew = names_matching(ctx.timeline, ELEMENTWISE)  # per string id, once per timeline
    if not is_ew.any():
        return []
    kind, name, stream = ctx.col("kind"), ctx.col("name"), ctx.col("stream")
    start, end = ctx.col("start"), ctx.col("end")
    out: list[dict[str, Any]] = []
    for dr in ctx.rows:  # one per device
        rows = dr.rows[kind[dr.rows] == int(EventKind.KERNEL)]
        rows = rows[np.lexsort((start[rows], stream[rows]))]
        if rows.size < options["min_chain"]:
            continue
        shape = np.stack([ctx.col(c)[rows] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")],
                         axis=1)  # the launch shape of each of these kernels (not of every event)
        ew = is_ew[name[rows]]
        same = ((stream[rows][1:] == stream[rows][:-1]) & (shape[1:] == shape[:-1]).all(axis=1)
                & (start[rows][1:] - end[rows][:-1] <= options["max_gap_ns"]) & ew[1:] & ew[:-1])
        chain_id = np.concatenate([[0], np.cumsum(~same)])
        bounds = np.flatnonzero(np.r_[True, chain_id[1:] != chain_id[:-1], True])
        lengths = np.diff(bounds)
        firsts = bounds[:-1]
        keep = (lengths >= options["min_chain"]) & ew[firsts]
        # every chain's period, duration sum and shortest kernel, vectorized; a dict only for those that save
        per = periods(name[rows], firsts[keep], lengths[keep], int(options["max_period"]))
        dur = end[rows] - start[rows]
        total = np.add.reduceat(dur, firsts)[keep]
        shortest = np.minimum.reduceat(dur, firsts)[keep]
        reps = -(-lengths[keep] // np.maximum(per, 1))
        saved_ns = total - reps * shortest
        good = (per >= 2) & (saved_ns > 0)
        for lo, n, p, r, fused, saved, kernels_ns in zip(
            *(x[good].tolist() for x in (firsts[keep], lengths[keep], per, reps, shortest, saved_ns, total)), strict=True
        ):  # one per chain that saves
            crow = rows[lo : lo + n]
            out.append({"rank": dr.rank, "device": dr.device, "stream": int(stream[crow[0]]), "rows": crow, "period": p,
                        "repetitions": r, "kernels_ns": kernels_ns, "fused_kernel_ns": fused, "saved_ns": saved,
                        "ops": [op_label(strings[int(i)]) for i in name[crow[:p]]], "grid": shape[lo, :3].tolist(),
                        "block": shape[lo, 3:].tolist()})
    return out


def evaluate(ctx: FindingContext, options: Mapping[str, Any]) -> Finding | None:
    opts = {**OPTIONS, **dict(options or {})}
    chains = find_chains(ctx, opts)
    if not chains:
        return None
    span = ctx.span_ns()
    saved = sum(c["saved_ns"] for c in chains)
    if span <= 0 or saved < opts["min_fraction"] * span:
        return None
    kernels = sum(c["rows"].size for c in chains)
    chains.sort(key=lambda c: -c["saved_ns"])
    best = chains[0]
    start = ctx.col("start")
    places = [f"r{c['rank']} GPU {c['device']} stream {c['stream']}" for c in chains]
    data: UnfusedElementwiseData = {
        "chains": [cast(Chain, {k: (v if k != "rows" else int(v.size)) for k, v in c.items()}
                        | {"start_ns": int(start[c["rows"][0]])}) for c in chains[:20]],
        "n_chains": len(chains),
        "kernels_ns": int(sum(c["kernels_ns"] for c in chains)),
        **window(int(start[best["rows"][0]]), int(ctx.col("end")[best["rows"][best["period"] - 1]])),
    }
    return Finding(rule=RULE.id, severity="warning" if saved >= opts["warning_fraction"] * span else "info",
                   count=kernels, wasted_ns=int(saved), where=join_places(sorted(set(places))), data=dict(data))


def describe(f: Finding) -> Prose:
    d = cast(UnfusedElementwiseData, f.data)
    best = d["chains"][0]
    ops = " → ".join(best["ops"])
    msg = (
        f"{f.count} elementwise kernels in {d['n_chains']} chain(s) run {fmt_ns(d['kernels_ns'])}; "
        f"the largest repeats {best['period']} ops ({ops}) {best['repetitions']}× on stream "
        f"{best['stream']} with grid {tuple(best['grid'])} × block {tuple(best['block'])}. "
        f"Each repetition could be one fused kernel that reads the input once and writes the output once: at "
        f"the chain's own bandwidth it moves the bytes of the chain's lightest kernel, ≈ "
        f"{fmt_ns(best['fused_kernel_ns'])}, saving ≈ {fmt_ns(f.wasted_ns)} in all (torch.compile, a "
        "fused op such as F.gelu, or a Triton / CUDA kernel)."
    )
    return msg, f.where


RULE = Rule(
    id="unfused_elementwise", title="chains of elementwise kernels that one fused kernel would replace",
    evaluate=evaluate, describe=describe, data=UnfusedElementwiseData,
    fires_when=(
        "chains of ≥ min_chain elementwise kernels on one stream, same grid and block, ≤ max_gap_ns apart, whose "
        "names repeat with a period of 2..max_period ops, saving ≥ min_fraction of the span (module docstring)"
    ),
    severity="warning when the saving is ≥ warning_fraction of the span, else info",
    counts="kernels in the chains / Σ durations − repetitions × shortest duration",
    options=OPTIONS,
    source='CUDA C++ Best Practices Guide, "Memory Optimizations"; Stanford CS336 lecture 6 (kernel fusion)',
)
