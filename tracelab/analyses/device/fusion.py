"""Kernel-fusion figures of a run: kernels per step, kernel time per step, bytes moved per step and
the bandwidth that implies.

- steps: the top-level step ranges of rank 0 (`steps.marked_steps`: ProfilerStep#N or NVTX/record_function
  `step N`), else 1.
- kernels: all kernels of the run (the workloads' profiler window holds only the measured loop).
- kernel_ns_per_step: sum of the kernels' durations / steps (not their union: the fusion workload
  runs one stream, where both agree).
- bytes_per_step: from the tensor sizes (the fusion workload writes it into meta.json's facts as
  `bytes_per_step`); None when unknown. bandwidth = bytes / kernel time.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np

from tracelab.analyses.core.names import short_name
from tracelab.analyses.steps.infer import marked_steps
from tracelab.model import EventKind, Timeline


class FusionFigures(msgspec.Struct, frozen=True):
    steps: int
    kernels: int
    kernels_per_step: float
    kernel_ns_per_step: float
    bytes_per_step: int | None
    bandwidth_gb_s: float | None  # bytes_per_step / kernel time per step, 1e9 B/s
    kernel_names: tuple[tuple[str, int], ...]  # (short name, count), most frequent first


def fusion_figures(timeline: Timeline) -> FusionFigures:
    """Figures of one run (`bytes_per_step` from the facts the workload wrote into meta.json)."""
    run = timeline.meta.extra.get("run") if timeline.meta.extra else None
    facts = run.get("facts") if isinstance(run, Mapping) else None
    value = facts.get("bytes_per_step") if isinstance(facts, Mapping) else None
    bytes_per_step = int(value) if isinstance(value, int) else None
    n_steps = int(marked_steps(timeline, 0)[0].size) or 1
    ev = timeline.events
    k = np.flatnonzero(ev["kind"].to_numpy() == int(EventKind.KERNEL))
    dur = ev["end"].to_numpy()[k] - ev["start"].to_numpy()[k]
    per_step = float(dur.sum()) / n_steps
    names, counts = np.unique(ev["name"].to_numpy()[k], return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return FusionFigures(n_steps, int(k.size), k.size / n_steps, per_step, bytes_per_step,
                         (bytes_per_step / per_step) if bytes_per_step and per_step > 0 else None,
                         tuple((short_name(timeline.name(int(names[i]))), int(counts[i])) for i in order))
