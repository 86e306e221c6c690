"""Kernel-fusion figures of a run: kernels per step, kernel time per step, bytes moved per step and
the bandwidth that implies; and the speedup of one run over another.

- steps: the top-level step ranges of rank 0 (`steps.marked_steps`: ProfilerStep#N or NVTX/record_function
  `step N`), else the `steps` argument, else 1.
- kernels: all kernels of the run (the workloads' profiler window holds only the measured loop).
- kernel_ns_per_step: sum of the kernels' durations / steps (not their union: the fusion workload
  runs one stream, where both agree).
- bytes_per_step: given by the caller from the tensor sizes (the fusion workload writes it into
  meta.json's facts as `bytes_per_step`); None when unknown. bandwidth = bytes / kernel time.
- speedup(base, other) = base kernel time per step / other kernel time per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracelab.analyses.core.names import short_name
from tracelab.analyses.steps.infer import marked_steps
from tracelab.model import EventKind, Timeline


@dataclass(frozen=True)
class FusionFigures:
    steps: int
    kernels: int
    kernels_per_step: float
    kernel_ns_per_step: float
    bytes_per_step: int | None
    bandwidth_gb_s: float | None  # bytes_per_step / kernel time per step, 1e9 B/s
    kernel_names: tuple[tuple[str, int], ...]  # (short name, count), most frequent first


def run_facts(timeline: Timeline) -> Mapping[str, Any]:
    """The `facts` a workload wrote into meta.json ({} for other traces)."""
    run = timeline.meta.extra.get("run") if timeline.meta.extra else None
    facts = run.get("facts") if isinstance(run, Mapping) else None
    return facts if isinstance(facts, Mapping) else {}


def fusion_figures(
    timeline: Timeline, bytes_per_step: int | None = None, steps: int | None = None
) -> FusionFigures:
    """Figures of one run; `bytes_per_step` and `steps` default to the run's meta.json facts."""
    facts = run_facts(timeline)
    if bytes_per_step is None and isinstance(facts.get("bytes_per_step"), int):
        bytes_per_step = int(facts["bytes_per_step"])
    s_start, _s_end = marked_steps(timeline, 0)
    n_steps = int(s_start.size) or int(steps or 0) or 1
    ev = timeline.events
    k = np.flatnonzero(ev["kind"].to_numpy() == int(EventKind.KERNEL))
    dur = ev["end"].to_numpy()[k] - ev["start"].to_numpy()[k]
    per_step = float(dur.sum()) / n_steps
    names, counts = np.unique(ev["name"].to_numpy()[k], return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return FusionFigures(
        steps=n_steps,
        kernels=int(k.size),
        kernels_per_step=k.size / n_steps,
        kernel_ns_per_step=per_step,
        bytes_per_step=bytes_per_step,
        bandwidth_gb_s=(bytes_per_step / per_step) if bytes_per_step and per_step > 0 else None,
        kernel_names=tuple((short_name(timeline.name(int(names[i]))), int(counts[i])) for i in order),
    )


def speedup(base: FusionFigures, other: FusionFigures) -> float:
    """How many times faster `other`'s kernels do one step than `base`'s."""
    return base.kernel_ns_per_step / other.kernel_ns_per_step if other.kernel_ns_per_step > 0 else float("nan")
