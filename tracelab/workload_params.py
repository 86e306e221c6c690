"""The built-in workloads' parameters: each one's full size (fills an H100/H200) and its --quick
overrides. The workloads (tracelab/workloads/) declare them from here, and the run directory reader
(tracelab/io/rundir) reads them to name a run recorded with other parameters than its workload's
defaults, without importing the workloads (a layer above it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec


class WorkloadParams(msgspec.Struct, frozen=True):
    full: Mapping[str, Any]  # full size
    quick: Mapping[str, Any]  # --quick overrides

    def defaults(self, quick: bool) -> dict[str, Any]:
        """The parameters a run uses without overrides: full size, then the --quick ones."""
        p = dict(self.full)
        if quick:
            p.update(self.quick)
        return p


WORKLOAD_PARAMS: dict[str, WorkloadParams] = {
    # small kernels must outlast the host's launch cost (~20 µs a Triton launch) or nothing overlaps;
    # 8 MB chunks were host-bound under nsys
    "overlap": WorkloadParams(
        full={"chunk_mb": 64, "chunks": 8, "iters": 2000, "steps": 10, "streams": 8, "small_programs": 16,
              "small_iters": 400000},
        quick={"chunk_mb": 32, "chunks": 4, "steps": 6, "small_iters": 200000},
    ),
    "sync_pitfalls": WorkloadParams(
        full={"batch": 8192, "width": 4096, "layers": 4, "classes": 1000, "steps": 30, "log_every": 10, "batches": 4},
        quick={"batch": 2048, "width": 1024, "steps": 20},
    ),
    "pdl": WorkloadParams(
        full={"elements": 1 << 20, "chain": 32, "iters": 1000, "steps": 20},
        quick={"chain": 16, "steps": 10},
    ),
    "graphs": WorkloadParams(
        # branch_iters: ~0.35 ms a kernel on an H100, longer than a Triton launch under a profiler, so the
        # eager version overlaps too
        full={"elements": 4096, "ops": 200, "steps": 20, "branch_kernels": 4, "branch_programs": 16,
              "branch_iters": 100000},
        quick={"ops": 100, "steps": 10},
    ),
    "green_contexts": WorkloadParams(
        full={"size": 8192, "matmuls": 4, "elements": 1 << 26, "elementwise": 16, "small_sms": 16, "steps": 5,
              "matmul": "cublas"},
        quick={"steps": 3},  # the effect needs the full sizes; quick only runs fewer steps
    ),
    "fusion": WorkloadParams(
        full={"elements": 1 << 26, "steps": 20},
        quick={"elements": 1 << 24, "steps": 10},
    ),
    "default_stream": WorkloadParams(
        # each worker kernel (~1.8 ms on an H100) must outlast the host's launches (~0.1-0.3 ms a Triton
        # launch under a profiler) or the host, not the streams, serializes them
        full={"pairs": 4, "programs": 16, "iters": 500000, "steps": 20},
        quick={"steps": 6},
    ),
    "priorities": WorkloadParams(
        full={"big_kernels": 4, "waves": 8, "iters": 1500, "small_iters": 200, "steps": 20},
        quick={"steps": 10},
    ),
    "comm_overlap": WorkloadParams(
        # comm_elements 0: sized on the recording GPUs so that one all-reduce takes about as long as the
        # matmuls (size_all_reduce; meta.json's facts say the size and both durations); dist_backend "gloo"
        # runs the plumbing with two ranks on one GPU (no NCCL kernels)
        full={"size": 8192, "matmuls": 4, "comm_elements": 0, "comm_sms": 24, "steps": 5, "dist_backend": "nccl"},
        quick={"steps": 3},
    ),
    "input_pipeline": WorkloadParams(
        full={"batch": 8, "sample_ms": 5.0, "sample_rows": 64, "width": 1024, "layers": 4, "gpu_step_ms": 4.0,
              "slow_workers": 2, "fast_workers": 12, "prefetch_factor": 4, "steps": 24},
        quick={"steps": 12},
    ),
}
