"""fusion: a tanh-approximate GeLU as separate torch ops vs. one fused kernel (CS336 lecture 6).

`eager_ops` writes gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) as eight torch ops: eight
elementwise kernels per step, each reading its inputs from and writing its output to GPU memory, so
the step moves ~9x the bytes a single pass needs and pays eight launches. `torch_fused` calls
`F.gelu(approximate="tanh")` (one ATen kernel), `compiled` lets `torch.compile` fuse the same eight
ops into one Triton kernel, `triton` is a hand-written Triton kernel and `cuda` a CUDA C++ kernel
built with `torch.utils.cpp_extension.load_inline`. All four fused versions read x once and write y
once. In the trace: kernels per step (8 vs 1), kernel time per step, and bytes moved (from sizes).
"""

from __future__ import annotations

import math
import os
from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="kernel fusion: a GeLU as 8 separate torch ops vs. one fused kernel (ATen, torch.compile, Triton, CUDA C++)",
    variants=(
        Variant("eager_ops", "tanh-approximate GeLU written as 8 separate torch ops (8 elementwise kernels)"),
        Variant("torch_fused", 'F.gelu(x, approximate="tanh"): one ATen kernel'),
        Variant("compiled", "torch.compile of the eager_ops function: one generated Triton kernel"),
        Variant("triton", "a hand-written Triton GeLU kernel"),
        Variant("cuda", "a CUDA C++ GeLU kernel built with torch.utils.cpp_extension.load_inline"),
    ),
)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

# the eager chain, op by op: (name, tensors read, tensors written), each of `elements` float32
EAGER_OPS: tuple[tuple[str, int, int], ...] = (
    ("pow(x, 3)", 1, 1),
    ("mul 0.044715", 1, 1),
    ("add x", 2, 1),
    ("mul sqrt(2/pi)", 1, 1),
    ("tanh", 1, 1),
    ("add 1", 1, 1),
    ("mul x", 2, 1),
    ("mul 0.5", 1, 1),
)
FUSED_TENSOR_PASSES = 2  # read x, write y


def bytes_per_step(variant: str, elements: int, itemsize: int = 4) -> int:
    """Bytes the variant's kernels read and write per step, from the tensor sizes."""
    if variant == "eager_ops":
        return sum(r + w for _, r, w in EAGER_OPS) * elements * itemsize
    return FUSED_TENSOR_PASSES * elements * itemsize


def gelu_eager(x: Any) -> Any:
    """Eight separate elementwise ops (one kernel each in eager mode)."""
    t = x.pow(3)
    t = t * 0.044715
    t = x + t
    t = t * SQRT_2_OVER_PI
    t = t.tanh()
    t = t + 1.0
    t = x * t
    return t * 0.5


CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void tl_gelu_tanh(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  long stride = (long)gridDim.x * blockDim.x;
  for (; i < n; i += stride) {
    float v = x[i];
    float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    y[i] = 0.5f * v * (1.0f + tanhf(u));
  }
}

void gelu(torch::Tensor x, torch::Tensor y) {
  long n = x.numel();
  int block = 256;
  int grid = (int)std::min<long>((n + block - 1) / block, 65535L * 8);
  tl_gelu_tanh<<<grid, block, 0, c10::cuda::getCurrentCUDAStream().stream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
}
"""
CPP_SRC = "void gelu(torch::Tensor x, torch::Tensor y);"


def cuda_extension() -> Any:
    """Compile (once per machine; cached in TORCH_EXTENSIONS_DIR) the CUDA C++ GeLU."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name="tracelab_fusion_gelu",
        cpp_sources=CPP_SRC,
        cuda_sources=CUDA_SRC,
        functions=["gelu"],
        extra_cuda_cflags=["-O3", "--use_fast_math", "-arch=sm_90"],
        verbose=bool(os.environ.get("TRACELAB_VERBOSE")),
    )


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from .ranges import phase

    p = ctx.params
    n = int(p["elements"])
    torch.manual_seed(ctx.seed)
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    if variant == "eager_ops":
        fn = gelu_eager
    elif variant == "torch_fused":
        def fn(t: Any) -> Any:
            return F.gelu(t, approximate="tanh")
    elif variant == "compiled":
        fn = torch.compile(gelu_eager)
    elif variant == "triton":
        from .fusion_kernels import gelu_triton as fn
    else:
        ext = cuda_extension()

        def fn(t: Any) -> Any:
            ext.gelu(t, y)
            return y

    ref = F.gelu(x, approximate="tanh")
    out = fn(x)
    err = float((out - ref).abs().max())
    for _s, _m in ctx.loop():
        with phase(f"gelu {variant}"):
            fn(x)
    return {
        "elements": n,
        "bytes_per_step": bytes_per_step(variant, n),
        "min_bytes_per_step": bytes_per_step("torch_fused", n),
        "kernels_per_step_expected": len(EAGER_OPS) if variant == "eager_ops" else 1,
        "max_abs_error_vs_F_gelu": err,
    }
