"""overlap: copies and compute on one stream vs. separate streams, pinned vs. pageable host memory.

Each step moves `chunks` chunks through host→device copy, a compute kernel (Triton `busy_kernel`,
probed) and device→host copy. On one stream (`serial`) nothing overlaps. With a copy stream per
direction and pinned memory (`streams_pinned`) chunk k+1's upload and chunk k-1's download run while
chunk k computes. With pageable memory (`streams_pageable`) the same code serializes: the driver
stages pageable copies through its own pinned buffer and the host call returns only once the
data is staged, so the copy engine never runs beside the kernels. `concurrent_kernels` launches
independent small kernels on several streams; each uses few SMs, so they share the GPU at once.
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="copy/compute overlap: one stream vs. copy streams with pinned or pageable memory; concurrent kernels",
    variants=(
        Variant("serial", "H2D copy, kernel, D2H copy per chunk, all on one stream: nothing overlaps"),
        Variant("streams_pinned", "copies on their own streams from pinned memory: copies overlap compute"),
        Variant("streams_pageable", "the same with pageable host memory: copies serialize with compute"),
        Variant("concurrent_kernels", "independent small kernels on several streams share the SMs"),
    ),
)


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    if variant == "concurrent_kernels":
        return _concurrent(ctx)
    return _copies(ctx, variant)


def _copies(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    n = p["chunk_mb"] * (1 << 20) // 4
    chunks = p["chunks"]
    pinned = variant != "streams_pageable"
    host_in = [torch.randn(n).pin_memory() if pinned else torch.randn(n) for _ in range(chunks)]
    host_out = [torch.empty(n, pin_memory=pinned) for _ in range(chunks)]
    dev_in = [torch.empty(n, device="cuda") for _ in range(chunks)]
    dev_out = [torch.empty(n, device="cuda") for _ in range(chunks)]
    block = 1024
    programs = (n + block - 1) // block
    main = torch.cuda.current_stream()
    if variant == "serial":
        h2d = d2h = comp = main
    else:
        h2d, comp, d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    uploaded = [torch.cuda.Event() for _ in range(chunks)]
    computed = [torch.cuda.Event() for _ in range(chunks)]
    downloaded = [torch.cuda.Event() for _ in range(chunks)]
    for e in downloaded:
        e.record(main)
    for _step, _measured in ctx.loop():
        for k in range(chunks):
            with torch.cuda.stream(h2d), phase(f"h2d {k}"):
                h2d.wait_event(computed[k])  # dev_in[k] free again (no-op before the first record)
                dev_in[k].copy_(host_in[k], non_blocking=True)
                uploaded[k].record(h2d)
            with torch.cuda.stream(comp), phase(f"compute {k}"):
                comp.wait_event(uploaded[k])
                comp.wait_event(downloaded[k])  # dev_out[k] read by the last download
                K.launch(
                    ctx.recorder,
                    K.busy_kernel,
                    programs,
                    dev_in[k],
                    dev_out[k],
                    n,
                    p["iters"],
                    1.0001,
                    0.0001,
                    BLOCK=block,
                    num_warps=4,
                )
                computed[k].record(comp)
            with torch.cuda.stream(d2h), phase(f"d2h {k}"):
                d2h.wait_event(computed[k])
                host_out[k].copy_(dev_out[k], non_blocking=True)
                downloaded[k].record(d2h)
        for e in downloaded:
            main.wait_event(e)
    return {
        "pinned": pinned,
        "bytes_per_copy": n * 4,
        "copies_per_step": 2 * chunks,
        "streams": "one" if variant == "serial" else "h2d, compute, d2h",
    }


def _concurrent(ctx: RunContext) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    block = 256
    programs = p["small_programs"]
    n = programs * block
    streams = [torch.cuda.Stream() for _ in range(p["streams"])]
    xs = [torch.randn(n, device="cuda") for _ in streams]
    ys = [torch.empty(n, device="cuda") for _ in streams]
    main = torch.cuda.current_stream()
    for _step, _m in ctx.loop():
        start = torch.cuda.Event()
        start.record(main)
        for i, s in enumerate(streams):
            with torch.cuda.stream(s), phase(f"stream {i}"):
                s.wait_event(start)
                for _ in range(4):
                    K.launch(
                        ctx.recorder,
                        K.busy_kernel,
                        programs,
                        xs[i],
                        ys[i],
                        n,
                        p["small_iters"],
                        1.0001,
                        0.0001,
                        BLOCK=block,
                        num_warps=4,
                    )
        for s in streams:
            main.wait_stream(s)
    return {"streams": p["streams"], "programs_per_kernel": programs, "kernels_per_stream_per_step": 4}
