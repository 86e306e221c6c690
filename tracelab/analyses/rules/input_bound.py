"""input_bound: training steps whose GPU waits for input data (gap cause `input_wait`) for more than a
share of the step: the DataLoader (or a user's loading code) cannot keep up with the GPU.

Per rank, per step (its host range; without steps, the rank's GPU span as one window): the GPU idle time
of cause `input_wait` (every idle interval, whatever the display threshold) that ends inside the step (the
step whose work waited for the data: the interval may have begun at the end of the previous step's GPU
work), and its share of the step's length (at most 1). The rule fires on the steps whose share is at least `step_share` when their input
wait adds up to at least `min_wait_ns`. Its data names the loader's ops (the data-loading ranges the
launching threads were in: tracelab.analyses.gaps.input_wait) so the text can say what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.intervals import merge, step_of
from tracelab.analyses.core.names import short_name
from tracelab.analyses.results import CAUSES, Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, fired, join_places, window
from tracelab.text_format import fmt_ns

INPUT_WAIT = CAUSES.index("input_wait")
MAX_STEPS_LISTED = 20


class InputStep(TypedDict):
    rank: int
    step: int  # -1: the rank has no steps (its GPU span is the window)
    start_ns: int
    end_ns: int
    input_wait_ns: int
    share: float


class RankInput(TypedDict):
    rank: int
    steps: int
    input_bound_steps: int
    input_wait_ns: int
    mean_share: float
    scoped_to_steps: bool


class LoaderOp(TypedDict):
    count: int
    total_ns: int


class InputBoundData(Window):
    steps: list[InputStep]  # the worst MAX_STEPS_LISTED, by rank and start
    input_bound_steps: int
    total_steps: int
    ranks: list[RankInput]
    loader_ops: dict[str, LoaderOp]  # the loader's ranges the launching threads were in, most time first
    step_share: float


def _input_idle(by_rank: dict[int, list[Any]], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of the rank's GPU idle intervals of cause input_wait (all its devices), sorted."""
    idle = by_rank.get(rank, ())
    if not idle:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    return merge(*(np.concatenate([getattr(x, k)[x.cause == INPUT_WAIT] for x in idle]) for k in ("start", "end")))


def _idle_by_rank(ctx: FindingContext) -> dict[int, list[Any]]:
    """The devices' idle intervals (those with any) grouped by rank, in ctx.idle's order: one pass over
    the devices, not one per rank."""
    by_rank: dict[int, list[Any]] = {}
    for (r, _), idle in ctx.idle.items():
        if idle.start.size:
            by_rank.setdefault(r, []).append(idle)
    return by_rank


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    share_min, min_wait = float(opt["step_share"]), int(opt["min_wait_ns"])
    steps: list[InputStep] = []
    ranks: list[RankInput] = []
    loader_ops: dict[str, LoaderOp] = {}
    total_steps = wasted = 0
    idle_by_rank = _idle_by_rank(ctx)
    for rank, host in ctx.hosts.items():
        us, ue = _input_idle(idle_by_rank, rank)
        if us.size == 0:
            continue
        s_start, s_end = ctx.step_bounds(rank)
        scoped = s_start.size > 0
        if not scoped:  # no steps: the rank's GPU span is the one window
            devs = [d for d in ctx.devices if d.rank == rank]
            s_start = np.array([min(d.start_ns for d in devs)], dtype=np.int64)
            s_end = np.array([max(d.end_ns for d in devs)], dtype=np.int64)
        # each interval to the step its end lies in
        k = step_of(s_start, s_end, ue - 1)
        ok = k >= 0
        wait = np.bincount(k[ok], weights=(ue - us)[ok].astype(np.float64), minlength=s_start.size).astype(np.int64)
        length = np.maximum(s_end - s_start, 1)
        share = np.minimum(wait / length, 1.0)
        hit = np.flatnonzero(share >= share_min)
        total_steps += int(s_start.size)
        if hit.size == 0 or int(wait[hit].sum()) < min_wait:
            continue
        w = int(wait[hit].sum())
        wasted += w
        ranks.append({"rank": rank, "steps": int(s_start.size), "input_bound_steps": int(hit.size), "input_wait_ns": w,
                      "mean_share": round(float(share[hit].mean()), 4), "scoped_to_steps": scoped})
        for i in hit.tolist():
            steps.append({"rank": rank, "step": i if scoped else -1, "start_ns": int(s_start[i]),
                          "end_ns": int(s_end[i]), "input_wait_ns": int(wait[i]), "share": round(float(share[i]), 4)})
        for name, (count, total) in host.input_ops().items():
            op = loader_ops.setdefault(ctx.timeline.name(name), {"count": 0, "total_ns": 0})
            op["count"] += count
            op["total_ns"] += total
    if not steps:
        return None
    worst = sorted(steps, key=lambda s: -s["input_wait_ns"])
    data: InputBoundData = {
        "steps": sorted(worst[:MAX_STEPS_LISTED], key=lambda s: (s["rank"], s["start_ns"])),
        "input_bound_steps": len(steps), "total_steps": total_steps, "ranks": ranks,
        "loader_ops": dict(sorted(loader_ops.items(), key=lambda kv: -kv[1]["total_ns"])[:10]),
        "step_share": share_min, **window(worst[0]["start_ns"], worst[0]["end_ns"]),
    }
    return fired(RULE.id, ctx, len(steps), wasted, data, "warning")


def describe(f: Finding) -> Prose:
    d = cast(InputBoundData, f.data)
    ops = d["loader_ops"]
    top = next(iter(ops), "")
    by = (f" (the launching thread in {short_name(top, 70)}, {ops[top]['count']}×)" if top else
          " (the launching thread blocked in OS waits for data)")
    msg = (
        f"the GPU waited {fmt_ns(f.wasted_ns)} for input data in {d['input_bound_steps']} of "
        f"{d['total_steps']} steps (≥ {d['step_share']:.0%} of each step){by}: the data pipeline "
        "cannot keep up with the GPU. Give the DataLoader more num_workers, use pin_memory=True with "
        ".to(device, non_blocking=True), raise prefetch_factor, keep workers alive with persistent_workers=True, "
        "and move decoding / augmentation to the GPU (e.g. DALI, torchvision.io.decode_jpeg on cuda)."
    )
    where = join_places([f"rank {s['rank']} " + (f"step {s['step']}" if s["step"] >= 0 else "(whole run)")
                         + f": {fmt_ns(s['input_wait_ns'])} ({s['share']:.0%})" for s in d["steps"]])
    return msg, where


RULE = Rule(
    id="input_bound", title="training steps whose GPU waits for input data",
    evaluate=evaluate, describe=describe, data=InputBoundData,
    fires_when=(
        "steps whose GPU idle of cause input_wait is ≥ step_share of the step, adding up to ≥ min_wait_ns on "
        "a rank (without steps: the rank's GPU span as one window)"
    ),
    severity="critical / warning by the share of the span wasted, else warning",
    counts="input-bound steps / their input_wait idle",
    options={"step_share": 0.1, "min_wait_ns": 100_000},
    long=True,
    source=("PyTorch docs, torch.utils.data (num_workers, pin_memory, prefetch_factor, persistent_workers); "
            "gap cause input_wait: tracelab.analyses.gaps.input_wait"),
)
