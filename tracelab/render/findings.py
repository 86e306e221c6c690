"""Finding prose: one renderer per rule turns a Finding's structured `data` into the message and the
`where` line people read; rules without a renderer get the generic one (their title, count, GPU time
wasted and the data's scalar values). Pure: Finding in, strings out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tracelab.text_format import fmt_bytes, fmt_ns

from ..analyses.names import short_name
from ..analyses.results import Analysis, Finding
from ..analyses.rules import RULES
from .findings_workloads import RENDERERS as WORKLOAD_RENDERERS

Prose = tuple[str, str]  # (message, where)


def _places(items: list[str], limit: int = 4) -> str:
    more = len(items) - limit
    return "; ".join(items[:limit]) + (f"; and {more} more" if more > 0 else "")


def _step(i: int) -> str:
    return f"step {i}"


def _sync_per_iteration(f: Finding) -> Prose:
    d = f.data
    ex = d.get("example", {})
    if ex.get("what") == "dtoh_pageable_copy":
        call = ex.get("call") or "a copy"
        tid = f" on thread {ex['tid']}" if ex.get("tid", -1) >= 0 else ""
        example = f"{call} device-to-host into pageable memory{tid} in {_step(ex.get('step', 0))}"
    elif ex:
        example = f"{ex.get('call')} on thread {ex.get('tid')} in {_step(ex.get('step', 0))}"
    else:
        example = "a blocking call"
    msg = (
        f"{f.count} of {d.get('steps', 0)} steps make the host wait for the GPU (e.g. {example}); the GPU "
        f"queue drains every step ({fmt_ns(f.wasted_ns)} idle after those waits). Typical causes: print(loss), "
        ".item(), .cpu() or torch.cuda.synchronize() every step; keep values on the GPU and read them back "
        "every N steps."
    )
    where = _places(
        [
            f"rank {v['rank']}: {v['steps_with_sync']} of {v['steps']} steps ({_step(v['first_step'])} … "
            f"{_step(v['last_step'])})"
            for v in d.get("ranks", [])
        ]
    )
    return msg, where


def _pageable_memcpy(f: Finding) -> Prose:
    d = f.data
    dirs = ", ".join(f"{v} {k}" for k, v in d.get("by_kind", {}).items())
    msg = (
        f"{f.count} memcpys ({fmt_bytes(d.get('bytes', 0))}, {fmt_ns(d.get('copy_ns', 0))}) use pageable host memory "
        f"({dirs}); pin it (pin_memory=True, cudaHostAlloc) so copies run at full speed and can overlap with compute."
    )
    where = _places(
        [f"rank {p['rank']} device {p['device']} stream {p['stream']}: {p['copies']} pageable copies" for p in d.get("places", [])]
    )
    return msg, where


def _sync_memcpy(f: Finding) -> Prose:
    d = f.data
    calls = ", ".join(f"{c}× {n}" for n, c in list(d.get("calls", {}).items())[:3])
    excluded = d.get("non_blocking_excluded", 0)
    note = (
        f" ({excluded} device-to-device or device-memset calls that do not block the host are not counted)"
        if excluded
        else ""
    )
    msg = (
        f"{f.count} synchronous memcpy calls ({calls}) block the host for {fmt_ns(d.get('host_blocked_ns', 0))}, "
        f"{fmt_ns(f.wasted_ns)} of it with the GPU idle{note}; use the Async variants with pinned memory on a "
        "stream and sync only where the data is needed."
    )
    return msg, _places([f"rank {r}" for r in d.get("ranks", [])])


def _launch_bound(f: Finding) -> Prose:
    d = f.data
    msg = (
        f"{d.get('n_stretches', 0)} stretches of {f.count} tiny kernels (< {fmt_ns(d.get('tiny_kernel_ns', 10_000))} "
        f"each) with the GPU idle {fmt_ns(f.wasted_ns)} between launches: the host cannot launch fast enough. "
        "Capture them in a CUDA graph (torch.cuda.graphs, torch.compile mode='reduce-overhead') or fuse them."
    )
    where = _places(
        [
            f"rank {x['rank']} device {x['device']}: {x['stretches']} stretches, {x['kernels']} kernels, "
            f"{fmt_ns(x['idle_ns'])} idle"
            for x in d.get("devices", [])
        ]
    )
    return msg, where


def _serialized_copy_compute(f: Finding) -> Prose:
    msg = (
        f"{f.count} host<->device copies run in line with the kernels of their stream and overlap no compute "
        f"({fmt_ns(f.wasted_ns)}); issue them on a side stream from pinned memory (non_blocking=True) and prefetch "
        "the next batch while this one computes."
    )
    where = _places(
        [
            f"rank {x['rank']} device {x['device']} stream {x['stream']}: {x['copies']} copies, "
            f"{fmt_ns(x['unoverlapped_ns'])} not overlapped"
            for x in f.data.get("streams", [])
        ]
    )
    return msg, where


def _pdl(f: Finding) -> Prose:
    d = f.data
    msg = (
        f"{f.count} kernels start before their predecessor on the same stream has finished "
        f"(Programmatic Dependent Launch; {d.get('flagged', 0)} flagged at launch): {d.get('overlapping_pairs', 0)} "
        f"overlaps bought {fmt_ns(d.get('overlap_ns', 0))} in total ({fmt_ns(d.get('mean_overlap_ns', 0))} each on "
        "average)."
    )
    where = _places(
        [
            f"rank {x['rank']} device {x['device']}: {x['kernels']} kernels (most often "
            f"{short_name(x['most_often'], 50)}), {fmt_ns(x['overlap_ns'])} overlap"
            for x in d.get("devices", [])
        ]
    )
    return msg, where


def _input_bound(f: Finding) -> Prose:
    d = f.data
    ops = d.get("loader_ops", {})
    top = next(iter(ops), "")
    by = (f" (the launching thread in {short_name(top, 70)}, {ops[top]['count']}×)" if top else
          " (the launching thread blocked in OS waits for data)")
    msg = (
        f"the GPU waited {fmt_ns(f.wasted_ns)} for input data in {d.get('input_bound_steps', f.count)} of "
        f"{d.get('total_steps', 0)} steps (≥ {d.get('step_share', 0.1):.0%} of each step){by}: the data pipeline "
        "cannot keep up with the GPU. Give the DataLoader more num_workers, use pin_memory=True with "
        ".to(device, non_blocking=True), raise prefetch_factor, keep workers alive with persistent_workers=True, "
        "and move decoding / augmentation to the GPU (e.g. DALI, torchvision.io.decode_jpeg on cuda)."
    )
    where = _places([
        f"rank {s['rank']} " + (f"step {s['step']}" if s["step"] >= 0 else "(whole run)")
        + f": {fmt_ns(s['input_wait_ns'])} ({s['share']:.0%})" for s in d.get("steps", [])
    ])
    return msg, where


def _idle_partition(f: Finding) -> Prose:
    parts = f.data.get("partitions", [])
    texts = []
    for p in parts:
        span = max(p["span_ns"], 1)
        dev_sms = max(p["device_sm_count"], 1)
        texts.append(
            f"green-context partition {p['green_context']} ({p['sm_count']} of {p['device_sm_count']} SMs) is busy "
            f"{p['busy_fraction']:.0%} of the {fmt_ns(span)} span ({p['source']}): "
            f"{p['idle_sm_ns'] / 1e6:,.1f} SM-ms idle, {p['idle_sm_ns'] / (dev_sms * span):.0%} of the device's "
            "SM-time"
        )
    msg = "; ".join(texts) + ". Give it fewer SMs or more work."
    where = _places([f"green context {p['green_context']}" for p in parts])
    return msg, where


RENDERERS: dict[str, Callable[[Finding], Prose]] = {
    "sync_per_iteration": _sync_per_iteration,
    "pageable_memcpy": _pageable_memcpy,
    "sync_memcpy": _sync_memcpy,
    "launch_bound": _launch_bound,
    "serialized_copy_compute": _serialized_copy_compute,
    "pdl": _pdl,
    "idle_partition": _idle_partition,
    "input_bound": _input_bound,
}  # a rule without an entry (e.g. excessive_sync) gets `generic`
RENDERERS.update(WORKLOAD_RENDERERS)  # issue 14's rules (tracelab/render/findings_workloads.py)
_TITLES = {r.id: r.title for r in RULES}


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str)) and not isinstance(v, bool)


def _value(key: str, v: Any) -> str:
    return fmt_ns(v) if key.endswith("_ns") and isinstance(v, (int, float)) else str(v)


def generic(f: Finding) -> Prose:
    """A rule without its own renderer: its title, count, GPU time and the data's scalar values; where =
    the ranks / devices its data lists."""
    title = _TITLES.get(f.rule, f.rule)
    facts = ", ".join(f"{k} {_value(k, v)}" for k, v in f.data.items() if _scalar(v) and k not in ("start_ns", "end_ns"))
    msg = f"{title}: {f.count} occurrences, {fmt_ns(f.wasted_ns)} of GPU time" + (f" ({facts})" if facts else "")
    places = []
    for v in f.data.values():
        if isinstance(v, list):
            for item in v:
                if isinstance(item, dict) and "rank" in item:
                    extra = ", ".join(f"{k.removesuffix('_ns')} {_value(k, x)}" for k, x in item.items()
                                      if k != "rank" and _scalar(x))
                    places.append(f"rank {item['rank']}" + (f": {extra}" if extra else ""))
    return msg + ".", _places(places)


def describe(f: Finding) -> Prose:
    """(message, where) of a finding."""
    return RENDERERS.get(f.rule, generic)(f)


def with_prose(analysis: Analysis) -> Analysis:
    """The analysis with every finding's message and where filled in (those already set are kept)."""
    out = []
    for f in analysis.findings:
        if f.message:
            out.append(f)
            continue
        msg, where = describe(f)
        if f.scope == "setup":
            msg = f"In the set-up, before the first step (not counted in the steps' figures): {msg}"
        out.append(replace(f, message=msg, where=f.where or where))
    return replace(analysis, findings=tuple(out))
