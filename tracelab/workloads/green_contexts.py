"""green_contexts: a large matmul and a stream of elementwise work, split across SM partitions.

Per step: `matmuls` bf16 matmuls of size `size`³ and `elementwise` sigmoid kernels over `elements`
floats. `sequential` runs them one after the other on one stream. `streams` puts them on two
ordinary streams: the hardware scheduler lets the sigmoids take any SM the matmul leaves free.
`green_ctx` splits the SMs with green contexts (`cuDevSmResourceSplitByCount`): the matmul runs in
the large partition (all SMs but `small_sms`) and the sigmoids in the small one. The matmul then
has fewer SMs (cuBLAS picks its tiling and persistent grid for the whole device: a grid sized for
132 SMs on 116 runs in more waves), and the memory-bound sigmoids, confined to a few SMs, cannot
reach full memory bandwidth — so they take many times longer than on the whole GPU and the step
ends when the slower partition ends, while the other partition sits idle.
Bracket probes (`tl_probe_large_partition` / `tl_probe_small_partition`, tiny probe-only kernels
launched on the matmul / sigmoid stream before and after each phase) record which SMs each
stream can use; the Triton sigmoid kernel is probed directly. `matmul=triton` swaps cuBLAS for an
instrumented Triton matmul so the matmul's own blocks are measured too.
"""

from __future__ import annotations

from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="SM partitions with green contexts: matmul + elementwise sequential, on streams, on partitions",
    variants=(
        Variant("sequential", "matmul, then the sigmoid kernels, on one stream"),
        Variant("streams", "matmul and sigmoids on two ordinary streams, sharing all SMs"),
        Variant(
            "green_ctx", "matmul on the large green-context partition, sigmoids on a small_sms partition"
        ),
    ),
)


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    if isinstance(result, tuple) and len(result) > 1:
        return result[1] if len(result) == 2 else result[1:]
    return None


def make_partitions(small_sms: int) -> dict[str, Any]:
    """Two green contexts on device 0: `small_sms` SMs and the rest. Returns streams and facts."""
    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(torch.cuda.current_device()), "cuDeviceGet")
    sm_res = _check(
        cu.cuDeviceGetDevResource(dev, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource"
    )
    groups, _n, remaining = _check(
        cu.cuDevSmResourceSplitByCount(1, sm_res, 0, small_sms), "cuDevSmResourceSplitByCount"
    )
    small = groups[0] if isinstance(groups, (list, tuple)) else groups
    out: dict[str, Any] = {"device_sms": int(sm_res.sm.smCount), "partitions": []}
    for name, res, marker in (
        ("large", remaining, "tl_probe_large_partition"),
        ("small", small, "tl_probe_small_partition"),
    ):
        desc = _check(cu.cuDevResourceGenerateDesc([res], 1), "cuDevResourceGenerateDesc")
        gctx = _check(
            cu.cuGreenCtxCreate(desc, dev, cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM),
            "cuGreenCtxCreate",
        )
        raw = _check(
            cu.cuGreenCtxStreamCreate(gctx, cu.CUstream_flags.CU_STREAM_NON_BLOCKING, 0),
            "cuGreenCtxStreamCreate",
        )
        ctx_id = -1
        try:
            cctx = _check(cu.cuCtxFromGreenCtx(gctx), "cuCtxFromGreenCtx")
            ctx_id = int(_check(cu.cuCtxGetId(cctx), "cuCtxGetId"))
        except Exception as e:  # noqa: BLE001 - an id is nice to have, not needed
            out.setdefault("notes", []).append(f"context id of {name}: {e}")
        stream = torch.cuda.get_stream_from_external(int(raw), torch.cuda.current_device())
        out["partitions"].append(
            {
                "name": name,
                "sm_count": int(res.sm.smCount),
                "marker": marker,
                "green": True,
                "context_id": ctx_id,
                "_stream": stream,
                "_keep": (gctx, raw),
            }
        )
    return out


def _streams(variant: str, small_sms: int, sms: int, main: Any) -> tuple[Any, Any, dict[str, Any]]:
    """The matmul and elementwise streams of a variant and the facts about its partitions: two green
    contexts (green_ctx), two plain streams (streams), or the one current stream (sequential)."""
    import torch

    facts: dict[str, Any] = {"device_sms": sms}
    if variant == "green_ctx":
        parts = make_partitions(small_sms)
        mm_stream, ew_stream = parts["partitions"][0]["_stream"], parts["partitions"][1]["_stream"]
        facts.update({k: v for k, v in parts.items() if k != "partitions"})
        facts["partitions"] = [
            {k: v for k, v in d.items() if not k.startswith("_")} for d in parts["partitions"]
        ]
    elif variant == "streams":
        mm_stream, ew_stream = torch.cuda.Stream(), torch.cuda.Stream()
        facts["partitions"] = [
            {"name": "matmul stream", "sm_count": sms, "marker": "tl_probe_large_partition", "green": False},
            {
                "name": "elementwise stream",
                "sm_count": sms,
                "marker": "tl_probe_small_partition",
                "green": False,
            },
        ]
    else:
        mm_stream = ew_stream = main
        facts["partitions"] = [
            {"name": "one stream", "sm_count": sms, "marker": "tl_probe_large_partition", "green": False},
        ]
    for part in facts["partitions"]:
        part["stream_role"] = "matmul" if part["marker"] == "tl_probe_large_partition" else "elementwise"
    return mm_stream, ew_stream, facts


def _matmul_phase(ctx: RunContext, stream: Any, main: Any, a: Any, b: Any, c: Any, bracket_n: int) -> None:
    """The matmuls on their stream (partition 0), bracketed by probes."""
    import torch

    from . import kernels as K
    from .probes import bracket_probe
    from .ranges import phase

    p = ctx.params
    with torch.cuda.stream(stream), phase("matmul"):
        stream.wait_stream(main)
        bracket_probe(ctx.recorder, "tl_probe_large_partition", bracket_n, partition=0)
        for _ in range(p["matmuls"]):
            if p["matmul"] == "triton":
                K.matmul(ctx.recorder, a, b, c, partition=0)
            else:
                torch.matmul(a, b, out=c)
        bracket_probe(ctx.recorder, "tl_probe_large_partition", bracket_n, partition=0)


def _elementwise_phase(
    ctx: RunContext, stream: Any, main: Any, x: Any, y: Any, part: int, bracket_n: int, block: int
) -> None:
    """The elementwise kernels (sigmoid, x -> y -> x ...) on their stream, bracketed by probes."""
    import torch

    from . import kernels as K
    from .probes import bracket_probe
    from .ranges import phase

    p = ctx.params
    programs = (p["elements"] + block - 1) // block
    with torch.cuda.stream(stream), phase("elementwise"):
        stream.wait_stream(main)
        bracket_probe(ctx.recorder, "tl_probe_small_partition", bracket_n, partition=part)
        for i in range(p["elementwise"]):
            src, dst = (x, y) if i % 2 == 0 else (y, x)
            K.launch(
                ctx.recorder,
                K.sigmoid_kernel,
                programs,
                src,
                dst,
                p["elements"],
                BLOCK=block,
                num_warps=8,
                partition=part,
            )
        bracket_probe(ctx.recorder, "tl_probe_small_partition", bracket_n, partition=part)


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    p = ctx.params
    torch.manual_seed(ctx.seed)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.randn(p["size"], p["size"], device="cuda", dtype=torch.bfloat16)
    b = torch.randn(p["size"], p["size"], device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    x = torch.randn(p["elements"], device="cuda")
    y = torch.empty_like(x)
    main = torch.cuda.current_stream()
    mm_stream, ew_stream, facts = _streams(variant, p["small_sms"], sms, main)
    bracket_n = 4 * sms
    ew_part = 1 if variant != "sequential" else 0
    for _s, _m in ctx.loop():
        _matmul_phase(ctx, mm_stream, main, a, b, c, bracket_n)
        _elementwise_phase(ctx, ew_stream, main, x, y, ew_part, bracket_n, block=16384)
        main.wait_stream(mm_stream)
        main.wait_stream(ew_stream)
    facts["matmul_impl"] = (
        "triton-instrumented" if p["matmul"] == "triton" else "cublas (bracketed by probes)"
    )
    facts["flops_per_step"] = 2 * p["size"] ** 3 * p["matmuls"]
    facts["bytes_elementwise_per_step"] = 8 * p["elements"] * p["elementwise"]
    return facts
