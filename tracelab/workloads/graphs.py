"""graphs: hundreds of tiny kernels launched one by one, as one CUDA graph, and looping on the device.

`eager` launches `ops` tiny elementwise kernels per step from Python: each costs a few microseconds
of host launch overhead, more than the kernel itself, so the GPU waits for the host between kernels
(launch-bound). `graph` captures the same kernels once (`torch.cuda.CUDAGraph`) and replays them with
one launch per step: the kernels run back to back. `conditional` builds a graph (CUDA C++ through
`torch.utils.cpp_extension.load_inline`) with a conditional WHILE node whose body runs a kernel and
then a kernel that calls `cudaGraphSetConditional` — the loop runs `ops` times on the device without
returning to the host — followed by an IF node whose body runs only when the data says so.
`multi_stream_capture` captures one graph across two streams: the capturing stream records an event,
a second stream waits on it (fork), both run `branch_kernels` kernels that each leave most SMs free,
and the capturing stream waits on the second stream's event (join) — CUDA Programming Guide
"Cross-stream Dependencies and Events" under stream capture. The graph keeps the two branches as
parallel paths, so replaying it overlaps them like `multi_stream_eager`, the same two-stream loop
launched eagerly; under nsys (`--cuda-graph-trace=node`) each kernel carries its graph node id.
"""

from __future__ import annotations

import os
from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="launch overhead: eager tiny kernels vs. one CUDA graph replay vs. a device-side WHILE/IF graph",
    variants=(
        Variant("eager", "tiny kernels launched one by one from Python (launch-bound)"),
        Variant("graph", "the same kernels captured once and replayed as a CUDA graph"),
        Variant(
            "conditional", "a graph with a conditional WHILE node looping on the device, then an IF node"
        ),
        Variant("multi_stream_eager", "two streams forked and joined with events, launched eagerly"),
        Variant(
            "multi_stream_capture",
            "the same two-stream fork/join captured as one CUDA graph and replayed: the branches still overlap",
        ),
    ),
)

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

__global__ void tl_loop_body(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 0.0001f;
}
__global__ void tl_loop_condition(unsigned int* counter, unsigned int iters, cudaGraphConditionalHandle h) {
  unsigned int c = ++(*counter);
  cudaGraphSetConditional(h, c < iters ? 1u : 0u);
}
__global__ void tl_loop_reset(unsigned int* counter) { *counter = 0; }
__global__ void tl_if_condition(const float* x, cudaGraphConditionalHandle h) {
  cudaGraphSetConditional(h, x[0] == x[0] ? 1u : 0u);  // true unless NaN: the IF body runs
}
__global__ void tl_if_body(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f;
}

#define CK(x) do { cudaError_t e = (x); TORCH_CHECK(e == cudaSuccess, #x ": ", cudaGetErrorString(e)); } while (0)

struct CondGraph { cudaGraph_t graph; cudaGraphExec_t exec; };
static std::vector<CondGraph> graphs;

static cudaGraphNode_t add_kernel(cudaGraph_t g, cudaGraphNode_t* deps, size_t ndeps, void* fn,
                                  dim3 grid, dim3 block, void** args) {
  cudaKernelNodeParams kp = {};
  kp.func = fn; kp.gridDim = grid; kp.blockDim = block; kp.sharedMemBytes = 0; kp.kernelParams = args;
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, deps, ndeps, &kp));
  return node;
}

static cudaGraphNode_t add_conditional(cudaGraph_t g, cudaGraphNode_t* deps, size_t ndeps,
                                       cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type,
                                       cudaGraph_t* body) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = 1;
  cudaGraphNode_t node;
  CK(cudaGraphAddNode(&node, g, deps, nullptr, ndeps, &p));
  *body = p.conditional.phGraph_out[0];
  return node;
}

int64_t build(torch::Tensor x, torch::Tensor counter, int64_t iters) {
  static float* xp; static int n; static unsigned int* cp; static unsigned int it;
  xp = x.data_ptr<float>(); n = (int)x.numel(); cp = (unsigned int*)counter.data_ptr<int>(); it = (unsigned int)iters;
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle wh, ih;
  CK(cudaGraphConditionalHandleCreate(&wh, g, 1, cudaGraphCondAssignDefault));
  CK(cudaGraphConditionalHandleCreate(&ih, g, 0, cudaGraphCondAssignDefault));
  dim3 blk(256), grd((n + 255) / 256), one(1);
  static cudaGraphConditionalHandle swh, sih; swh = wh; sih = ih;
  void* reset_args[] = {&cp};
  cudaGraphNode_t reset = add_kernel(g, nullptr, 0, (void*)tl_loop_reset, one, one, reset_args);
  cudaGraph_t wbody;
  cudaGraphNode_t wnode = add_conditional(g, &reset, 1, wh, cudaGraphCondTypeWhile, &wbody);
  void* body_args[] = {&xp, &n};
  cudaGraphNode_t b = add_kernel(wbody, nullptr, 0, (void*)tl_loop_body, grd, blk, body_args);
  void* cond_args[] = {&cp, &it, &swh};
  add_kernel(wbody, &b, 1, (void*)tl_loop_condition, one, one, cond_args);
  void* ifc_args[] = {&xp, &sih};
  cudaGraphNode_t ifc = add_kernel(g, &wnode, 1, (void*)tl_if_condition, one, one, ifc_args);
  cudaGraph_t ibody;
  add_conditional(g, &ifc, 1, ih, cudaGraphCondTypeIf, &ibody);
  add_kernel(ibody, nullptr, 0, (void*)tl_if_body, grd, blk, body_args);
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  graphs.push_back({g, exec});
  return (int64_t)graphs.size() - 1;
}

void launch(int64_t id) {
  CK(cudaGraphLaunch(graphs.at(id).exec, c10::cuda::getCurrentCUDAStream().stream()));
}
"""

CPP_SRC = "int64_t build(torch::Tensor x, torch::Tensor counter, int64_t iters);\nvoid launch(int64_t id);"


def conditional_extension() -> Any:
    """Compile (once per machine; cached in TORCH_EXTENSIONS_DIR) the WHILE/IF graph extension."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name="tracelab_conditional_graph",
        cpp_sources=CPP_SRC,
        cuda_sources=CUDA_SRC,
        functions=["build", "launch"],
        extra_cuda_cflags=["-O2", "-arch=sm_90"],
        verbose=bool(os.environ.get("TRACELAB_VERBOSE")),
    )


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from .ranges import phase

    p = ctx.params
    torch.manual_seed(ctx.seed)
    x = torch.randn(p["elements"], device="cuda")
    ops = p["ops"]
    if variant.startswith("multi_stream"):
        return _multi_stream(ctx, variant)

    def body() -> None:
        for _ in range(ops // 2):
            x.mul_(1.0001)
            x.add_(0.0001)

    if variant == "eager":
        for _s, _m in ctx.loop():
            with phase("eager ops"):
                body()
        return {"kernels_per_step": 2 * (ops // 2), "launches_per_step": 2 * (ops // 2)}
    if variant == "graph":
        g = torch.cuda.CUDAGraph()

        def capture() -> None:
            # inside the profiler window, so both profilers see the graph built (capturing runs no
            # GPU work; the warm-up steps already ran the body eagerly; in-place ops allocate nothing)
            with phase("capture"), torch.cuda.graph(g):
                body()

        for _s, measured in ctx.loop(setup=capture):
            if measured:
                with phase("graph replay"):
                    g.replay()
            else:
                body()
        return {"kernels_per_step": 2 * (ops // 2), "launches_per_step": 1}
    ext = conditional_extension()
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    built: list[int] = []

    def build() -> None:
        with phase("build conditional graph"):
            built.append(ext.build(x, counter, ops))

    for _s, measured in ctx.loop(setup=build):
        if measured:
            with phase("conditional graph launch"):
                ext.launch(built[0])
        else:
            body()
    return {
        "while_iterations": ops,
        "kernels_per_step": 2 * ops + 3,
        "launches_per_step": 1,
        "nodes": "reset -> WHILE{body, condition} -> if_condition -> IF{if_body}",
    }


def _multi_stream(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from . import kernels as K
    from .ranges import phase

    p = ctx.params
    block = 256
    programs = int(p["branch_programs"])
    n = programs * block
    side = torch.cuda.Stream()
    bufs = [[torch.randn(n, device="cuda"), torch.empty(n, device="cuda")] for _ in range(2)]

    def branch(k: int) -> None:
        x, y = bufs[k]
        for _ in range(p["branch_kernels"]):
            K.launch(ctx.recorder, K.busy_kernel, programs, x, y, n, p["branch_iters"], 1.0001, 0.0001, BLOCK=block, num_warps=4)

    def fork_join() -> None:
        main = torch.cuda.current_stream()
        forked, joined = torch.cuda.Event(), torch.cuda.Event()
        forked.record(main)
        side.wait_event(forked)  # fork: the side stream joins the capture here
        with phase("branch main"):
            branch(0)
        with torch.cuda.stream(side), phase("branch side"):
            branch(1)
            joined.record(side)
        main.wait_event(joined)  # join: the capture ends on the main stream only

    facts = {"branches": 2, "kernels_per_branch": p["branch_kernels"], "programs_per_kernel": programs}
    if variant == "multi_stream_eager":
        for _s, _m in ctx.loop():
            fork_join()
        return {**facts, "launches_per_step": 2 * p["branch_kernels"]}
    g = torch.cuda.CUDAGraph()

    def capture() -> None:
        with phase("capture"), torch.cuda.graph(g):
            fork_join()

    for _s, measured in ctx.loop(setup=capture):
        if measured:
            with phase("graph replay"):
                g.replay()
        else:
            fork_join()
    return {**facts, "launches_per_step": 1, "nodes": "fork -> {main: busy x k, side: busy x k} -> join"}
