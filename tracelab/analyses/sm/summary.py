"""Per-SM lanes, SM utilization and green-context partitions (DESIGN.md, "Per-SM lanes").

Two sources, always labelled:

- **measured**: `Timeline.sm_blocks` (probe-instrumented kernels record `%smid` and `%globaltimer` per
  block). Blocks are merged into busy intervals per SM. Kernel events of the same device without
  probe blocks (opaque library kernels, launches the workload did not probe) are added as
  estimates (`measured` False on their lane rows).
- **estimated**: for every kernel, from its grid, the SM count of its partition and the occupancy
  calculation (`occupancy.py`): a kernel of G blocks on a partition of S SMs occupies min(G, S) SMs
  over its whole duration (the block scheduler spreads blocks over SMs before stacking them; a
  multi-wave kernel, G > B x S with B blocks per SM, keeps all S busy: wave tails are not modelled —
  persistent GEMMs hand out their tiles dynamically). Unknown grids occupy the whole partition.
  W = ceil(G / (B x S)) waves is reported by the green-context explanation. Kernels running at the same
  time on one partition share SMs in a way no trace records: there the estimate is an upper bound
  (tests/sm_agreement.py checks it against the probes).

Partitions: each green context of a device (SM count from `ContextInfo.sm_count`, else the distinct
SMs measured, else the SMs no other green context holds) plus partition -1, the work outside every
green context (the SMs no green context holds; when green contexts hold every SM, the whole device).

Measured lanes use the SM ids the probes recorded (a partition's ids need not be contiguous); estimates
of uninstrumented kernels in a measured run are placed on their partition's measured ids.
Estimated SM ids (no profiler says which SMs a kernel used): green contexts get contiguous ranges in
order of green-context id starting at SM 0, partition -1 the remaining ids. Within a partition a
kernel starts at the SM after those of the kernels already running there (wrapping around), so
concurrent kernels stack. SM-time is computed from levels, not from the drawn ids: at any moment a
partition's busy SMs = min(its SM count, sum of the SMs its running kernels occupy) and the device's
= min(device SMs, sum over partitions).

busy fraction = busy SM-time / (SM count x window), window = first start to last end of the device's GPU
activity (kernels, memcpys, memsets), as in `analyze`, less the device's leading peer wait on a multi-GPU
run (`sm_time.sm_excluded_wait`: its first collective waiting for the last rank to join, which depends on
when each rank's profiler started), left out of the busy SM-time too and named in the analysis notes.

Modules: `partitions` (with the probe blocks' lanes), `estimate`, `lanes` (lanes, SM-time, summary, findings),
`heatmap`, `green_explain`; this one is the public face.
"""

from __future__ import annotations

from tracelab.analyses.sm.green_explain import green_context_explanation
from tracelab.analyses.sm.heatmap import SmGrid, _range_bin_coverage, sm_grid
from tracelab.analyses.sm.lanes import (
    IDLE_PARTITION_INFO,
    IDLE_PARTITION_THRESHOLD,
    _sm_time,
    expand_lanes,
    idle_partition_findings,
    sm_lanes,
    sm_summary,
    sm_utilization,
)

__all__ = [
    "IDLE_PARTITION_INFO", "IDLE_PARTITION_THRESHOLD", "SmGrid", "_range_bin_coverage", "_sm_time", "expand_lanes",
    "green_context_explanation", "idle_partition_findings", "sm_grid", "sm_lanes", "sm_summary", "sm_utilization",
]
