"""pdl: a chain of dependent kernels, with and without Programmatic Dependent Launch.

Each step runs `chain` Triton kernels on one stream, each reading the previous one's output.
Without PDL a kernel starts only after the previous one has fully finished and been retired: the
GPU idles for about a microsecond between kernels. With PDL (`launch_pdl=True`, Triton's
`gdc_wait` / `gdc_launch_dependents`) the next kernel is launched while the previous one runs; its
preamble (index math, loading its own weights) overlaps the previous kernel's tail and it waits in
`gdc_wait` only for the data. In the trace the next kernel starts *before* the previous one ends on
the same stream: a negative kernel-to-kernel gap.
Where the trigger sits matters: released right after reading its input (first recording, H200,
1M elements, 1000 FMAs per element), the next kernel's programs sat resident in `gdc_wait` beside
the running ones for the whole kernel and the chain ran 60 µs per kernel instead of 39 µs without
PDL; released after the compute (this version), only the store and the next preamble overlap.
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="Programmatic Dependent Launch: dependent kernels whose preamble overlaps the previous tail",
    variants=(
        Variant("no_pdl", "dependent Triton kernels launched one after another (full serialization)"),
        Variant("pdl", "the same kernels with launch_pdl=True and gdc_wait/gdc_launch_dependents"),
    ),
)


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    n = p["elements"]
    block = 1024
    programs = (n + block - 1) // block
    use_pdl = variant == "pdl"
    torch.manual_seed(ctx.seed)
    bufs = [torch.randn(n, device="cuda"), torch.empty(n, device="cuda")]
    w = torch.rand(n, device="cuda") * 0.5
    for _step, _m in ctx.loop():
        with phase("chain"):
            for k in range(p["chain"]):
                K.launch(
                    ctx.recorder,
                    K.chain_kernel,
                    programs,
                    bufs[k % 2],
                    w,
                    bufs[(k + 1) % 2],
                    n,
                    p["iters"],
                    BLOCK=block,
                    USE_PDL=use_pdl,
                    num_warps=4,
                    launch_pdl=use_pdl,
                )
    return {
        "pdl": use_pdl,
        "pdl_kernels": ["chain_kernel"] if use_pdl else [],
        "programs": programs,
        "kernels_per_step": p["chain"],
    }
