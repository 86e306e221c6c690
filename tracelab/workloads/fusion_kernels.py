"""The fusion workload's hand-written Triton GeLU (imported only when the variant runs: needs triton)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _tanh(u):
    # tanh(u) = 1 - 2 / (exp(2u) + 1), stable for large |u|
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def gelu_tanh_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    tl.store(y + offs, 0.5 * v * (1.0 + _tanh(u)), mask=mask)


def gelu_triton(x: Any) -> Any:
    import torch

    y = torch.empty_like(x)
    n = x.numel()
    block = 1024
    gelu_tanh_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, num_warps=4)
    return y
