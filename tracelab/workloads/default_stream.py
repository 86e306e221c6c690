"""default_stream: the legacy default stream's implicit synchronization with blocking streams.

Two worker streams each run a long kernel that leaves most SMs free, so the two can run side by side.
Between them, one small op per pair goes to the legacy default stream (stream 0, PyTorch's default).
`legacy_blocking` creates the worker streams *blocking* (`cudaStreamCreateWithFlags(...Default)`
through `cuda.bindings`, wrapped with `torch.cuda.get_stream_from_external`): the legacy default
stream waits for all earlier work on blocking streams and blocking streams wait for it (CUDA
Programming Guide, "Default Stream" and "Implicit Synchronization"), so stream B's kernel, launched
after the small op, cannot start before stream A's kernel has finished: the two worker streams
serialize. `nonblocking` creates the same streams with `cudaStreamNonBlocking`: no implicit
synchronization, the kernels overlap. `per_thread_default` keeps blocking worker streams but puts the
small op on the per-thread default stream (`cudaStreamPerThread`), which synchronizes only with the
legacy default stream: the kernels overlap again.
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, Workload

WORKLOAD = Workload(
    name="default_stream",
    description="implicit synchronization through the legacy default stream: blocking vs. non-blocking streams",
    effect=__doc__.split("\n\n", 1)[1].strip(),
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
    module="tracelab.workloads.default_stream",
    # each worker kernel must outlast the host's launches (~0.1-0.3 ms a Triton launch under a
    # profiler) or the host, not the streams, serializes them: 50k iterations (~0.18 ms on an H100,
    # first recording) left the GPU waiting for launches in every variant; 500k run ~1.8 ms
    params={"pairs": 4, "programs": 16, "iters": 500000, "steps": 20},
    quick={"steps": 6},
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
        for _ in range(p["pairs"]):
            busy(sa, xa, ya, "worker A")
            with torch.cuda.stream(side), phase("small op"):
                tiny.add_(1.0)
            busy(sb, xb, yb, "worker B")
    torch.cuda.synchronize()
    return {
        "worker_streams": "blocking" if blocking else "non-blocking",
        "worker_stream_handles": [int(raw_a), int(raw_b)],
        "small_op_stream": {
            "legacy_blocking": "legacy default (0)",
            "nonblocking": "legacy default (0)",
            "per_thread_default": "per-thread default (cudaStreamPerThread)",
        }[variant],
        "kernels_per_step": 3 * p["pairs"],
    }
