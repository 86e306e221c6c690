"""default_stream: the legacy default stream's implicit synchronization with blocking streams.

Each step stream A starts one long kernel (`pairs` × the length of B's kernels) and stream B runs
`pairs` kernels, each followed by one small op on the legacy default stream (stream 0, PyTorch's
default). The kernels leave most SMs free, so A's long kernel and B's kernels can run side by side.
`legacy_blocking` creates A and B *blocking* (`cudaStreamCreateWithFlags(..., cudaStreamDefault)`
through `cuda.bindings`, wrapped with `torch.cuda.get_stream_from_external`): an operation on the
legacy default stream waits for all earlier work of blocking streams and blocking streams wait for it
(CUDA Programming Guide, "Default Stream" and "Implicit Synchronization"), so the first small op
waits for A's long kernel and B's remaining kernels run only after it: B serializes behind A and the
step takes ~(2·pairs − 1) kernel lengths instead of `pairs`. `nonblocking` creates the same streams
with `cudaStreamNonBlocking`: no implicit synchronization, B runs beside A. `per_thread_default`
keeps blocking streams but puts the small op on the per-thread default stream
(`cudaStreamPerThread`), which synchronizes only with the legacy default stream: B runs beside A.
A first design (A and B alternating equal kernels, a small op between them) showed almost no loss:
the barrier kept A and B in lock-step, still overlapping (92% vs 98% of kernel time on two streams).
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="implicit synchronization through the legacy default stream: blocking vs. non-blocking streams",
    variants=(
        Variant(
            "legacy_blocking",
            "blocking worker streams + a small op on the legacy default stream: the workers serialize",
        ),
        Variant("nonblocking", "the same with non-blocking worker streams: the workers overlap"),
        Variant(
            "per_thread_default",
            "blocking worker streams, small op on the per-thread default stream: the workers overlap",
        ),
    ),
)

CUDA_STREAM_PER_THREAD = 0x2  # cudaStreamPerThread / CU_STREAM_PER_THREAD


def _stream(blocking: bool) -> tuple[Any, Any]:
    """A worker stream created through cuda.bindings; returns (torch stream, raw handle)."""
    import torch
    from cuda.bindings import runtime as cudart

    flags = cudart.cudaStreamDefault if blocking else cudart.cudaStreamNonBlocking
    err, raw = cudart.cudaStreamCreateWithFlags(flags)
    if int(err) != 0:
        raise RuntimeError(f"cudaStreamCreateWithFlags({flags}) failed: {err}")
    return torch.cuda.get_stream_from_external(int(raw), torch.cuda.current_device()), raw


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context exists before cuda.bindings creates streams
    blocking = variant != "nonblocking"
    (sa, raw_a), (sb, raw_b) = _stream(blocking), _stream(blocking)
    if variant == "per_thread_default":
        side = torch.cuda.get_stream_from_external(CUDA_STREAM_PER_THREAD, torch.cuda.current_device())
    else:
        side = torch.cuda.default_stream()
    block = 256
    programs = int(p["programs"])
    n = programs * block
    xa, xb = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    ya, yb = torch.empty_like(xa), torch.empty_like(xb)
    tiny = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()

    def busy(s: Any, x: Any, y: Any, label: str) -> None:
        with torch.cuda.stream(s), phase(label):
            K.launch(ctx.recorder, K.busy_kernel, programs, x, y, n, p["iters"], 1.0001, 0.0001, BLOCK=block, num_warps=4)

    for _s, _m in ctx.loop():
        with torch.cuda.stream(sa), phase("worker A (long)"):
            K.launch(
                ctx.recorder, K.busy_kernel, programs, xa, ya, n, p["iters"] * p["pairs"], 1.0001, 0.0001,
                BLOCK=block, num_warps=4,
            )
        for _ in range(p["pairs"]):
            busy(sb, xb, yb, "worker B")
            with torch.cuda.stream(side), phase("small op"):
                tiny.add_(1.0)
    torch.cuda.synchronize()
    return {
        "worker_streams": "blocking" if blocking else "non-blocking",
        "worker_stream_handles": [int(raw_a), int(raw_b)],
        "small_op_stream": {
            "legacy_blocking": "legacy default (0)",
            "nonblocking": "legacy default (0)",
            "per_thread_default": "per-thread default (cudaStreamPerThread)",
        }[variant],
        "kernels_per_step": 1 + 2 * p["pairs"],
    }
