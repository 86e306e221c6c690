"""Findings: rules over a Timeline (plus its gaps) that name a problem, with evidence, a count and
the GPU time it cost. One Finding per rule for the whole run (all ranks and devices); `where`
lists the places, `data` holds the details per place. A rule that finds nothing returns nothing.

Rules and their thresholds (chosen so that a clean trace fires none):

- sync_per_iteration: steps are the host ranges named `ProfilerStep#N` (torch.profiler), or else
  NVTX / record_function ranges named like `step 3`, `train_step`, `iteration 12` (top-level ones
  only). A step "syncs" when the host waits for the GPU inside it: a device-to-host copy into
  pageable memory (`.item()`, `.cpu()`, `print(loss)`: the copy call blocks), or a blocking call
  (cudaStreamSynchronize, cudaDeviceSynchronize / torch.cuda.synchronize(), cudaEventSynchronize,
  a synchronous cudaMemcpy), placed by the host time of its call. Fires when at least 3 steps
  exist and ≥ 80% of them sync. count = steps that sync; wasted_ns = GPU idle of the host_sync
  gaps that begin inside those steps (severity info when that is 0).
- pageable_memcpy: memcpys with a pageable host side of at least 64 KiB (smaller ones are staged
  through the command buffer and cost nothing extra; this keeps an occasional `.item()` out).
  count = such copies; wasted_ns = their duration minus the time the same bytes take at the
  bandwidth this trace's pinned copies of the same direction reached (the whole duration, an upper
  bound, when the trace has no pinned copies to compare with).
- sync_memcpy: synchronous memcpy / memset API calls (cudaMemcpy, cuMemcpyDtoH, cudaMemset ...).
  count = calls; wasted_ns = GPU idle (gaps of the same rank) while the host sat in those calls;
  data.host_blocked_ns = the calls' total duration.
- launch_bound: per device, a stretch is a run of ≥ 32 consecutive tiny kernels (< 10 µs each, not
  launched from a CUDA graph) separated by gaps of ≤ 100 µs, in which the GPU is idle for at least
  half of the stretch. Fires when the idle time in such stretches is ≥ 2% of the device span.
  count = kernels in such stretches (data.n_stretches = how many stretches); wasted_ns = idle time
  inside them (what a CUDA graph would mostly remove).
- serialized_copy_compute: a stream that runs both kernels and ≥ 3 host<->device copies (of at least
  64 KiB: smaller ones are latency-bound, there is nothing to hide), whose
  copies take ≥ 5% of the device span and overlap no compute for ≥ 80% of their time (copies
  queued in line with the kernels on one stream). count = copies on such streams that overlap no
  compute for most of their duration; wasted_ns = their non-overlapped time, capped by the device's
  compute time (what a side stream with pinned memory could hide).
- pdl: kernels launched with Programmatic Dependent Launch (Flag.PDL) or that start before the
  previous kernel on the same stream has ended, on NVIDIA devices of compute capability ≥ 9 (or
  unknown); without a PDL flag it takes at least 2 such overlaps (a single one, and any on older
  or AMD GPUs, which cannot do it, is a clock artefact). count = such kernels; data.overlap_ns =
  the measured overlap with their predecessors. Severity info, wasted_ns 0: PDL is a gain, the
  finding says how much it bought.
- idle_partition: from tracelab.analyses.sm (per-SM analysis).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..model import CopyKind, EventKind, Flag, MemKind, SyncKind, Timeline
from .devices import DeviceRows
from .gaps import HostView, short_name
from .intervals import covered_length, intersection_length, merge
from .results import DeviceSummary, Finding, Gap
from .sm import idle_partition_findings
from .units import fmt_bytes, fmt_ns

# ---- thresholds -----------------------------------------------------------------------------
MIN_STEPS = 3
SYNC_STEP_FRACTION = 0.8
PAGEABLE_MIN_BYTES = 64 * 1024
TINY_KERNEL_NS = 10_000
MAX_LAUNCH_GAP_NS = 100_000
MIN_STRETCH_KERNELS = 32
STRETCH_IDLE_FRACTION = 0.5
LAUNCH_BOUND_MIN_FRACTION = 0.02
SERIAL_MIN_COPIES = 3
SERIAL_MIN_FRACTION = 0.05
SERIAL_UNOVERLAPPED = 0.8
WARNING_FRACTION = 0.01  # wasted ≥ 1% of the span: warning (else info)
CRITICAL_FRACTION = 0.2  # wasted ≥ 20% of the span: critical

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
STEP_LIKE = re.compile(
    r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*$", re.IGNORECASE
)
GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)
AMD_GPU = re.compile(r"AMD|Instinct|Radeon|\bMI\d{3}", re.IGNORECASE)
HIP_API = re.compile(r"^hip[A-Z]")
PDL_MIN_OVERLAPS = 2


@dataclass(frozen=True)
class FindingContext:
    timeline: Timeline
    rows: list[DeviceRows]
    hosts: dict[int, HostView]
    devices: tuple[DeviceSummary, ...]
    gaps: tuple[Gap, ...]

    def span_ns(self, rank: int | None = None) -> int:
        return sum(d.span_ns for d in self.devices if rank is None or d.rank == rank)

    def col(self, name: str) -> np.ndarray:
        return self.timeline.events[name].to_numpy()

    @cached_property
    def steps(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Training steps per rank (find_steps), computed once."""
        return {rank: find_steps(self.timeline, rank) for rank in self.hosts}


def _severity(wasted: int, span: int, base: str = "info") -> str:
    if span > 0 and wasted >= CRITICAL_FRACTION * span:
        return "critical"
    if span > 0 and wasted >= WARNING_FRACTION * span:
        return "warning"
    return base


def _where(places: list[str], limit: int = 4) -> str:
    more = len(places) - limit
    return "; ".join(places[:limit]) + (f"; and {more} more" if more > 0 else "")


def _window(start: int, end: int) -> dict[str, int]:
    """The time window a finding points at (its first or worst occurrence), for `Finding.data`: the
    dashboard's "show in timeline" link opens it."""
    return {"start_ns": int(start), "end_ns": int(end)}


def _ids(strings: tuple[str, ...], pattern: re.Pattern[str]) -> np.ndarray:
    return np.fromiter((i for i, s in enumerate(strings) if pattern.search(s)), dtype=np.int64)


# ---- steps ----------------------------------------------------------------------------------
def find_steps(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-level training steps of a rank: (start, end, name id) sorted by start."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    host_range = np.isin(kind, [int(EventKind.CPU_OP), int(EventKind.NVTX_RANGE)]) & (
        ev["rank"].to_numpy() == rank
    )
    names = ev["name"].to_numpy()
    for pattern in (PROFILER_STEP, STEP_LIKE):
        ids = _ids(timeline.strings, pattern)
        if ids.size == 0:
            continue
        pos = np.flatnonzero(host_range & np.isin(names, ids))
        if pos.size == 0:
            continue
        s = ev["start"].to_numpy()[pos]
        e = ev["end"].to_numpy()[pos]
        # keep top-level ranges only (drop those inside an earlier one)
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        top = ~(e <= prev_max) | (np.arange(pos.size) == 0)
        top &= e > s
        return s[top], e[top], names[pos][top]
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty, empty


def _step_of(s_start: np.ndarray, s_end: np.ndarray, t: np.ndarray) -> np.ndarray:
    i = np.searchsorted(s_start, t, side="right") - 1
    ok = (i >= 0) & (t < s_end[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def sync_per_iteration(ctx: FindingContext) -> Finding | None:
    tl = ctx.timeline
    kind, rank_c = ctx.col("kind"), ctx.col("rank")
    total_steps = total_sync = wasted = 0
    places: list[str] = []
    example = ""
    window: dict[str, int] = {}
    per_rank: dict[int, dict[str, int]] = {}
    gaps_by_rank: dict[int, list[Gap]] = {}
    for g in ctx.gaps:
        if g.cause == "host_sync":
            gaps_by_rank.setdefault(g.rank, []).append(g)
    for rank, host in ctx.hosts.items():
        s_start, s_end, s_name = ctx.steps[rank]
        n_steps = s_start.size
        if n_steps < MIN_STEPS:
            continue
        # (a) device-to-host copies into pageable memory: the call blocks (.item(), .cpu())
        dtoh = np.flatnonzero(
            (kind == int(EventKind.MEMCPY))
            & (rank_c == rank)
            & (ctx.col("copy_kind") == int(CopyKind.DTOH))
            & (ctx.col("dst_mem") == int(MemKind.PAGEABLE))
        )
        li = host.launch_index(ctx.col("correlation")[dtoh])
        found = li >= 0
        lic = np.maximum(li, 0)
        t_copy = np.where(found, host.api_start[lic] if host.api_start.size else 0, ctx.col("start")[dtoh])
        step_copy = _step_of(s_start, s_end, t_copy)
        # (b) blocking calls: stream / device / event synchronize, synchronous memcpy
        blk = np.flatnonzero((host.api_flags & Flag.BLOCKING) != 0)
        step_blk = _step_of(s_start, s_end, host.api_start[blk])
        steps_with = np.unique(np.concatenate([step_copy[step_copy >= 0], step_blk[step_blk >= 0]]))
        if steps_with.size == 0 or steps_with.size < SYNC_STEP_FRACTION * n_steps:
            continue
        # GPU idle caused by host syncs that began inside those steps
        w = 0
        rank_gaps = gaps_by_rank.get(rank, [])
        if rank_gaps:
            g_start = np.array([g.start_ns for g in rank_gaps], dtype=np.int64)
            g_dur = np.array([g.duration_ns for g in rank_gaps], dtype=np.int64)
            in_step = _step_of(s_start, s_end, g_start)
            w = int(g_dur[np.isin(in_step, steps_with) & (in_step >= 0)].sum())
        total_steps += n_steps
        total_sync += int(steps_with.size)
        wasted += w
        n_copy = int(np.unique(step_copy[step_copy >= 0]).size)
        n_blk = int(np.unique(step_blk[step_blk >= 0]).size)
        per_rank[rank] = {
            "steps": int(n_steps),
            "steps_with_sync": int(steps_with.size),
            "wasted_ns": w,
            "steps_with_dtoh_copy": n_copy,
            "steps_with_sync_call": n_blk,
        }
        first = tl.name(int(s_name[steps_with[0]]))
        last = tl.name(int(s_name[steps_with[-1]]))
        places.append(f"rank {rank}: {steps_with.size} of {n_steps} steps ({first} … {last})")
        if not window:  # the first step that waits
            window = _window(s_start[steps_with[0]], s_end[steps_with[0]])
        if not example:
            hit = np.flatnonzero(step_copy >= 0)
            if hit.size:
                j = int(hit[0])
                call = tl.name(int(host.api_name[lic[j]])) if found[j] else "a copy"
                tid = f" on thread {int(host.api_tid[lic[j]])}" if found[j] else ""
                example = (
                    f"{call} device-to-host into pageable memory{tid} in {tl.name(int(s_name[step_copy[j]]))}"
                )
            else:
                j = int(np.flatnonzero(step_blk >= 0)[0])
                example = (
                    f"{tl.name(int(host.api_name[blk[j]]))} on thread {int(host.api_tid[blk[j]])} "
                    f"in {tl.name(int(s_name[step_blk[j]]))}"
                )
    if not total_sync:
        return None
    return Finding(
        rule="sync_per_iteration",
        severity=_severity(wasted, ctx.span_ns(), "warning" if wasted else "info"),
        count=total_sync,
        wasted_ns=wasted,
        message=(
            f"{total_sync} of {total_steps} steps make the host wait for the GPU (e.g. {example}); the GPU "
            f"queue drains every step ({fmt_ns(wasted)} idle after those waits). Typical causes: print(loss), "
            ".item(), .cpu() or torch.cuda.synchronize() every step; keep values on the GPU and read them back "
            "every N steps."
        ),
        where=_where(places),
        data={"ranks": per_rank, "steps": total_steps, **window},
    )


# ---- copies -----------------------------------------------------------------------------------
def pageable_memcpy(ctx: FindingContext) -> Finding | None:
    kind = ctx.col("kind")
    pageable = (ctx.col("src_mem") == int(MemKind.PAGEABLE)) | (ctx.col("dst_mem") == int(MemKind.PAGEABLE))
    pos = np.flatnonzero(
        (kind == int(EventKind.MEMCPY)) & pageable & (ctx.col("bytes") >= PAGEABLE_MIN_BYTES)
    )
    if pos.size == 0:
        return None
    dur = ctx.col("end")[pos] - ctx.col("start")[pos]
    ck = ctx.col("copy_kind")[pos]
    nb = ctx.col("bytes")[pos]
    wasted = _pageable_cost(ctx, dur, ck, nb)
    nbytes = int(nb.sum())
    places = _count_places(ctx, pos, "pageable copies")
    dirs = {k.name: int((ck == int(k)).sum()) for k in CopyKind if (ck == int(k)).any()}
    return Finding(
        rule="pageable_memcpy",
        severity=_severity(wasted, ctx.span_ns()),
        count=int(pos.size),
        wasted_ns=wasted,
        message=(
            f"{pos.size} memcpys ({fmt_bytes(nbytes)}, {fmt_ns(int(dur.sum()))}) use pageable host memory "
            f"({', '.join(f'{v} {k}' for k, v in dirs.items())}); pin it (pin_memory=True, "
            "cudaHostAlloc) so copies run at full speed and can overlap with compute."
        ),
        where=places,
        data={
            "bytes": nbytes,
            "by_kind": dirs,
            "copy_ns": int(dur.sum()),
            **_window(ctx.col("start")[pos[np.argmax(dur)]], ctx.col("end")[pos[np.argmax(dur)]]),  # longest
        },
    )


def _pageable_cost(ctx: FindingContext, dur: np.ndarray, ck: np.ndarray, nbytes: np.ndarray) -> int:
    """Time the pageable copies lose: per direction, their duration minus what the same bytes take at
    the bandwidth of this trace's pinned copies of that direction (when it has any, else the whole
    duration: an upper bound)."""
    kind = ctx.col("kind")
    pinned = (
        (kind == int(EventKind.MEMCPY))
        & ((ctx.col("src_mem") == int(MemKind.PINNED)) | (ctx.col("dst_mem") == int(MemKind.PINNED)))
        & (ctx.col("bytes") >= PAGEABLE_MIN_BYTES)
    )
    p_ck = ctx.col("copy_kind")[pinned]
    p_dur = (ctx.col("end") - ctx.col("start"))[pinned]
    p_bytes = ctx.col("bytes")[pinned]
    cost = 0
    for k in np.unique(ck).tolist():
        m = ck == k
        pm = p_ck == k
        t = int(dur[m].sum())
        if pm.any() and p_dur[pm].sum() > 0:
            bw = p_bytes[pm].sum() / p_dur[pm].sum()  # bytes per ns
            t = max(0, t - round(nbytes[m].sum() / bw))
        cost += t
    return cost


def sync_memcpy(ctx: FindingContext) -> Finding | None:
    kind = ctx.col("kind")
    pos = np.flatnonzero(
        np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER)])
        & (ctx.col("sync_kind") == int(SyncKind.MEMCPY))
    )
    if pos.size == 0:
        return None
    tl = ctx.timeline
    starts, ends = ctx.col("start")[pos], ctx.col("end")[pos]
    blocked = int((ends - starts).sum())
    # GPU time lost: idle gaps of the same rank while the host sat in one of these calls
    wasted = 0
    rank_of = ctx.col("rank")[pos]
    for rank in np.unique(rank_of).tolist():
        gaps = [g for g in ctx.gaps if g.rank == rank]
        if gaps:
            m = rank_of == rank
            wasted += intersection_length(
                starts[m],
                ends[m],
                np.array([g.start_ns for g in gaps], dtype=np.int64),
                np.array([g.end_ns for g in gaps], dtype=np.int64),
            )
    names, counts = np.unique(ctx.col("name")[pos], return_counts=True)
    top = sorted(zip(counts.tolist(), names.tolist()), reverse=True)[:3]
    calls = ", ".join(f"{c}× {tl.name(n)}" for c, n in top)
    ranks = np.unique(ctx.col("rank")[pos]).tolist()
    return Finding(
        rule="sync_memcpy",
        severity=_severity(wasted, ctx.span_ns()),
        count=int(pos.size),
        wasted_ns=wasted,
        message=(
            f"{pos.size} synchronous memcpy/memset calls ({calls}) block the host for {fmt_ns(blocked)}, "
            f"{fmt_ns(wasted)} of it with the GPU idle; use the Async variants with pinned memory on a stream "
            "and sync only where the data is needed."
        ),
        where=_where([f"rank {r}" for r in ranks]),
        data={
            "calls": {tl.name(n): c for c, n in top},
            "host_blocked_ns": blocked,
            **_window(starts[np.argmax(ends - starts)], ends[np.argmax(ends - starts)]),  # longest call
        },
    )


def _count_places(ctx: FindingContext, pos: np.ndarray, what: str) -> str:
    r = ctx.col("rank")[pos].astype(np.int64)
    d = ctx.col("device")[pos].astype(np.int64)
    s = ctx.col("stream")[pos]
    keys, counts = np.unique(np.stack([r, d, s]), axis=1, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return _where(
        [f"rank {keys[0, i]} device {keys[1, i]} stream {keys[2, i]}: {counts[i]} {what}" for i in order]
    )


# ---- launch-bound stretches ------------------------------------------------------------------
def _graph_kernels(ctx: FindingContext, rows: np.ndarray, rank: int) -> np.ndarray:
    graph = (ctx.col("flags")[rows] & Flag.GRAPH) != 0
    host = ctx.hosts.get(rank)
    if host is not None and host.api_name.size:
        gids = _ids(ctx.timeline.strings, GRAPH_LAUNCH)
        if gids.size:
            li = host.launch_index(ctx.col("correlation")[rows])
            graph |= (li >= 0) & np.isin(host.api_name[np.maximum(li, 0)], gids)
    return graph


def launch_bound(ctx: FindingContext) -> Finding | None:
    count = wasted = kernels_in = 0
    places: list[str] = []
    stretches: list[dict[str, int]] = []
    for dr, dev in zip(ctx.rows, ctx.devices):
        rows = dr.rows[ctx.col("kind")[dr.rows] == int(EventKind.KERNEL)]
        rows = rows[~_graph_kernels(ctx, rows, dr.rank)]
        if rows.size < MIN_STRETCH_KERNELS:
            continue
        s = ctx.col("start")[rows]
        e = ctx.col("end")[rows]
        reach = np.maximum.accumulate(e)
        gap = s[1:] - reach[:-1]  # device idle before each next kernel (<= 0: overlapping)
        tiny = (e - s) < TINY_KERNEL_NS
        link = tiny[:-1] & tiny[1:] & (gap <= MAX_LAUNCH_GAP_NS)
        # runs of linked kernels: run r covers kernels [first[r], last[r]]
        brk = np.flatnonzero(~link)
        first = np.concatenate([[0], brk + 1])
        last = np.concatenate([brk, [rows.size - 1]])
        n_k = last - first + 1
        cand = n_k >= MIN_STRETCH_KERNELS
        if not cand.any():
            continue
        first, last, n_k = first[cand], last[cand], n_k[cand]
        # device idle inside each run (any GPU activity, copies included, counts as busy)
        du, de = merge(ctx.col("start")[dr.rows], ctx.col("end")[dr.rows], assume_sorted=True)
        span = reach[last] - s[first]
        idle = span - covered_length(du, de, s[first], reach[last])
        ok = idle >= STRETCH_IDLE_FRACTION * np.maximum(span, 1)
        if not ok.any():
            continue
        idle_ok = int(idle[ok].sum())
        if idle_ok < LAUNCH_BOUND_MIN_FRACTION * dev.span_ns:
            continue
        count += int(ok.sum())
        wasted += idle_ok
        kernels_in += int(n_k[ok].sum())
        places.append(
            f"rank {dr.rank} device {dr.device}: {int(ok.sum())} stretches, {int(n_k[ok].sum())} kernels, "
            f"{fmt_ns(idle_ok)} idle"
        )
        for f, l_, k, i_ in zip(first[ok].tolist(), last[ok].tolist(), n_k[ok].tolist(), idle[ok].tolist()):
            stretches.append(
                {
                    "rank": dr.rank,
                    "device": dr.device,
                    "start_ns": int(s[f]),
                    "end_ns": int(reach[l_]),
                    "kernels": int(k),
                    "idle_ns": int(i_),
                }
            )
    if not count:
        return None
    worst = sorted(stretches, key=lambda x: -x["idle_ns"])[:20]
    return Finding(
        rule="launch_bound",
        severity=_severity(wasted, ctx.span_ns(), "warning"),
        count=kernels_in,
        wasted_ns=wasted,
        message=(
            f"{count} stretches of {kernels_in} tiny kernels (< {fmt_ns(TINY_KERNEL_NS)} each) with the GPU idle "
            f"{fmt_ns(wasted)} between launches: the host cannot launch fast enough. Capture them in a CUDA graph "
            "(torch.cuda.graphs, torch.compile mode='reduce-overhead') or fuse them."
        ),
        where=_where(places),
        data={"stretches": worst, "n_stretches": count, **_window(worst[0]["start_ns"], worst[0]["end_ns"])},
    )


# ---- copies serialized with compute ----------------------------------------------------------
def serialized_copy_compute(ctx: FindingContext) -> Finding | None:
    count = wasted = 0
    places: list[str] = []
    details: list[dict[str, int]] = []
    worst = (-1, 0, 0)  # (not-overlapped ns, start, end) of the worst copy
    for dr, dev in zip(ctx.rows, ctx.devices):
        rows = dr.rows
        kind = ctx.col("kind")[rows]
        s = ctx.col("start")[rows]
        e = ctx.col("end")[rows]
        lane = ctx.col("lane")[rows]
        is_k = kind == int(EventKind.KERNEL)
        hd = (
            (kind == int(EventKind.MEMCPY))
            & np.isin(ctx.col("copy_kind")[rows], [int(CopyKind.HTOD), int(CopyKind.DTOH)])
            & (ctx.col("bytes")[rows] >= PAGEABLE_MIN_BYTES)
        )
        if not hd.any() or not is_k.any():
            continue
        ku, ke = merge(s[is_k], e[is_k], assume_sorted=True)
        compute_ns = int((ke - ku).sum())
        cs, ce, cl = s[hd], e[hd], lane[hd]
        hidden = covered_length(ku, ke, cs, ce)
        alone = (ce - cs) - hidden
        lanes_with_k = np.unique(lane[is_k])
        dev_wasted = 0
        for ln in np.unique(cl).tolist():
            if ln not in lanes_with_k:
                continue
            m = cl == ln
            total = int((ce[m] - cs[m]).sum())
            unov = int(alone[m].sum())
            if (
                m.sum() < SERIAL_MIN_COPIES
                or total < SERIAL_MIN_FRACTION * dev.span_ns
                or unov < SERIAL_UNOVERLAPPED * total
            ):
                continue
            n_alone = int((alone[m] * 2 > (ce[m] - cs[m])).sum())
            j = int(np.argmax(alone[m]))
            if int(alone[m][j]) > worst[0]:
                worst = (int(alone[m][j]), int(cs[m][j]), int(ce[m][j]))
            stream = int(ctx.timeline.lanes["stream"].to_numpy()[ln])
            count += n_alone
            dev_wasted += unov
            places.append(
                f"rank {dr.rank} device {dr.device} stream {stream}: {int(m.sum())} copies, "
                f"{fmt_ns(unov)} not overlapped"
            )
            details.append(
                {
                    "rank": dr.rank,
                    "device": dr.device,
                    "stream": stream,
                    "copies": int(m.sum()),
                    "copy_ns": total,
                    "unoverlapped_ns": unov,
                }
            )
        wasted += min(dev_wasted, compute_ns)
    if not count:
        return None
    return Finding(
        rule="serialized_copy_compute",
        severity=_severity(wasted, ctx.span_ns(), "warning"),
        count=count,
        wasted_ns=wasted,
        message=(
            f"{count} host<->device copies run in line with the kernels of their stream and overlap no compute "
            f"({fmt_ns(wasted)}); issue them on a side stream from pinned memory (non_blocking=True) and prefetch "
            "the next batch while this one computes."
        ),
        where=_where(places),
        data={"streams": details, **_window(worst[1], worst[2])},
    )


# ---- programmatic dependent launch ----------------------------------------------------------
def _hip_rank(ctx: FindingContext, rank: int) -> bool:
    """AMD/HIP traces (HIP API names on the host): no PDL there."""
    host = ctx.hosts.get(rank)
    if host is None or host.api_name.size == 0:
        return False
    hip = _ids(ctx.timeline.strings, HIP_API)
    return bool(hip.size) and bool(np.isin(host.api_name, hip).any())


def pdl(ctx: FindingContext) -> Finding | None:
    total = flagged_total = pairs_total = overlap_total = 0
    places: list[str] = []
    window: dict[str, int] = {}
    best = 0  # largest overlap of two kernels seen so far
    for dr, dev in zip(ctx.rows, ctx.devices):
        info = ctx.timeline.device_info(dr.rank, dr.device)
        if info is not None and (0 < info.cc_major < 9 or AMD_GPU.search(info.name)):
            continue
        if _hip_rank(ctx, dr.rank):
            continue
        rows = dr.rows[ctx.col("kind")[dr.rows] == int(EventKind.KERNEL)]
        if rows.size == 0:
            continue
        lane = ctx.col("lane")[rows].astype(np.int64)
        order = np.lexsort((ctx.col("start")[rows], lane))
        rows, lane = rows[order], lane[order]
        s = ctx.col("start")[rows]
        e = ctx.col("end")[rows]
        same = np.concatenate([[False], lane[1:] == lane[:-1]])
        prev_end = np.concatenate([[0], e[:-1]])
        ov = np.where(same, np.minimum(prev_end, e) - s, 0)
        overlapping = same & (ov > 0)
        flagged = (ctx.col("flags")[rows] & Flag.PDL) != 0
        hit = overlapping | flagged
        if not flagged.any() and overlapping.sum() < PDL_MIN_OVERLAPS:
            continue
        n = int(hit.sum())
        o = int(ov[overlapping].sum())
        j = int(np.argmax(np.where(hit, ov, -1)))  # the pair that overlaps most (or a flagged kernel)
        if not window or int(ov[j]) > best:
            best = int(ov[j])
            window = _window(s[j - 1] if same[j] else s[j], e[j])
        total += n
        flagged_total += int(flagged.sum())
        pairs_total += int(overlapping.sum())
        overlap_total += o
        names, counts = np.unique(ctx.col("name")[rows][hit], return_counts=True)
        top = short_name(ctx.timeline.name(int(names[np.argmax(counts)])), 50)
        places.append(
            f"rank {dr.rank} device {dr.device}: {n} kernels (most often {top}), {fmt_ns(o)} overlap"
        )
    if not total:
        return None
    mean = overlap_total / pairs_total if pairs_total else 0
    return Finding(
        rule="pdl",
        severity="info",
        count=total,
        wasted_ns=0,
        message=(
            f"{total} kernels start before their predecessor on the same stream has finished "
            f"(Programmatic Dependent Launch; {flagged_total} flagged at launch): {pairs_total} overlaps bought "
            f"{fmt_ns(overlap_total)} in total ({fmt_ns(mean)} each on average)."
        ),
        where=_where(places),
        data={
            "kernels": total,
            "flagged": flagged_total,
            "overlapping_pairs": pairs_total,
            "overlap_ns": overlap_total,
            "mean_overlap_ns": int(mean),
            **window,
        },
    )


# ---- all rules --------------------------------------------------------------------------------
RULES = (sync_per_iteration, pageable_memcpy, sync_memcpy, launch_bound, serialized_copy_compute, pdl)
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def finding_notes(ctx: FindingContext) -> list[str]:
    """What the rules could not evaluate, in words (for Analysis.notes)."""
    out = []
    for rank, host in ctx.hosts.items():
        n_block = int(((host.api_flags & Flag.BLOCKING) != 0).sum())
        n_steps = ctx.steps[rank][0].size
        if n_steps >= MIN_STEPS or n_block < MIN_STEPS:
            continue
        if n_steps:
            out.append(
                f"rank {rank}: only {n_steps} training step(s) in the trace (at least {MIN_STEPS} needed): "
                "sync_per_iteration was not evaluated"
            )
        else:
            out.append(
                f"rank {rank}: {n_block} blocking host syncs but no training steps marked (ProfilerStep#N, or "
                "NVTX / record_function ranges named like 'step 3'): sync_per_iteration was not evaluated"
            )
    return out


def find_all(ctx: FindingContext) -> tuple[Finding, ...]:
    """Every rule that fires, most severe first, then by GPU time wasted."""
    found = [f for rule in RULES if (f := rule(ctx)) is not None]
    found.extend(idle_partition_findings(ctx.timeline))
    return tuple(sorted(found, key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), -f.wasted_ns, f.rule)))
