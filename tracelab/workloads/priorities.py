"""priorities: a latency-critical small kernel next to a queue of long kernels, with and without priority.

Each step queues `big_kernels` long kernels on a low-priority stream (each many waves of short
programs, so SMs free up every few tens of microseconds), then launches one small kernel on a
second stream. Without priority (`same_priority`, both streams priority 0) the block scheduler
serves the older, already-queued work first and the small kernel waits behind the big kernels'
remaining programs. With `high_priority` the second stream is created with the greatest priority
(`torch.cuda.Stream(priority=-1)`, CUDA Programming Guide "Stream Priorities"): pending programs of
the high-priority stream are dispatched first as soon as SMs free up (no preemption of running
programs), so the small kernel's queue delay (launch → start) drops to about one program's length.
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="stream priorities: a small latency-critical kernel beside long low-priority kernels",
    variants=(
        Variant("same_priority", "small kernel on a second stream of the same priority: waits behind the queue"),
        Variant("high_priority", "small kernel on a high-priority stream: dispatched as soon as SMs free up"),
    ),
)


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    lo_pri, hi_pri = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") else (0, -1)
    low = torch.cuda.Stream(priority=0)
    high = torch.cuda.Stream(priority=-1 if variant == "high_priority" else 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block = 1024
    # 128 threads a program, 16 resident per SM: `waves` waves of programs per big kernel
    big_programs = sms * 16 * int(p["waves"])
    n = big_programs * block
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    small_programs = sms
    sx, sy = torch.randn(small_programs * block, device="cuda"), torch.empty(small_programs * block, device="cuda")
    torch.cuda.synchronize()
    for _s, _m in ctx.loop():
        with torch.cuda.stream(low), phase("big kernels"):
            for _ in range(p["big_kernels"]):
                K.launch(ctx.recorder, K.busy_kernel, big_programs, x, y, n, p["iters"], 1.0001, 0.0001, BLOCK=block, num_warps=4)
        with torch.cuda.stream(high), phase("latency-critical"):
            K.launch(
                ctx.recorder, K.latency_kernel, small_programs, sx, sy, small_programs * block, p["small_iters"],
                1.0001, 0.0001, BLOCK=block, num_warps=4,
            )
    return {
        "low_stream_priority": low.priority,
        "high_stream_priority": high.priority,
        "priority_range_reported": [lo_pri, hi_pri],
        "big_programs": big_programs,
        "small_programs": small_programs,
        "small_kernel": "latency_kernel",
    }
