"""comm_overlap: compute and an all-reduce per step on two GPUs, sequential, on streams, on SM partitions.

Two ranks, one process per GPU (`torch.distributed` with NCCL). Per step each rank runs `matmuls`
bf16 matmuls of size `size`³ (the compute phase) and all-reduces a bf16 buffer of `comm_elements`
values (a gradient bucket of the previous step, so it does not depend on this step's compute).
`sequential` runs both on one stream: the all-reduce waits for the matmuls. `streams` issues the
all-reduce on a second stream: NCCL's kernels and the matmuls share every SM, so the GEMM loses the
SMs NCCL's channels occupy while both run. `green_ctx` is DeepSeek V3's two-batch-overlap split:
compute on a green context of all SMs but `comm_sms` (108 of 132 on an H100/H200) and NCCL on a
green context of `comm_sms` SMs, its CTAs capped at `comm_sms` (communicator `max_ctas`). Whether the
partition pays for itself depends on which side sets the pace: the matmul on fewer SMs runs longer
(more waves), the all-reduce on 24 SMs may not reach the link's bandwidth.

The collective is issued with `async_op=False` inside `torch.cuda.stream(s)`: PyTorch ≥ 2.8 launches
it on the current stream (pytorch/pytorch#150398), so NCCL's kernels run on the chosen stream and
green context. NVLink multicast (NVLS) is always off: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are set before the communicator exists and
inherited by every child process.
"""

from __future__ import annotations

import os
from typing import Any

from .base import RunContext, Variant, declare

NO_MULTICAST_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

WORKLOAD = declare(
    __name__, __doc__,
    description="two GPUs: matmuls + all-reduce per step, sequential, on streams, on SM partitions",
    variants=(
        Variant("sequential", "matmuls, then the all-reduce, on one stream"),
        Variant("streams", "all-reduce on a second stream, sharing all SMs with the matmuls"),
        Variant("green_ctx", "matmuls on all SMs but comm_sms, NCCL on a comm_sms green context"),
    ),
    world_size=2,
)


def set_no_multicast_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Force NVLink multicast off in `env` (os.environ by default) and return it."""
    target = os.environ if env is None else env
    target.update(NO_MULTICAST_ENV)
    return target  # type: ignore[return-value]


def init_distributed(params: dict[str, Any], variant: str) -> tuple[int, int]:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK), one GPU per rank;
    in `green_ctx` NCCL's CTAs are capped at `comm_sms`. Returns (rank, world size)."""
    import torch
    import torch.distributed as dist

    set_no_multicast_env()
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    backend = str(params.get("dist_backend", "nccl"))
    kw: dict[str, Any] = {}
    if backend == "nccl":
        kw["device_id"] = torch.device("cuda", torch.cuda.current_device())
        if variant == "green_ctx":
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.max_ctas = int(params["comm_sms"])
            opts.config.min_ctas = 1
            kw["pg_options"] = opts
    dist.init_process_group(backend, **kw)
    return dist.get_rank(), dist.get_world_size()


def warm_up_communicator() -> None:
    """One small collective and a barrier: NCCL builds its communicator and channels on the first
    collective; done here, none of that lands in a measured step."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1024, device="cuda"))
    dist.barrier()
    torch.cuda.synchronize()


def _time_ms(fn, reps: int = 3) -> float:
    """Mean wall time of `fn` on the GPU (CUDA events, after one untimed call), in ms."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


PROBE_ELEMENTS = 1 << 26  # 128 MiB of bf16: large enough for the all-reduce to be bandwidth-bound
GRAIN = 1 << 22  # sizes are rounded to 8 MiB, so that every variant's process picks the same one


def size_all_reduce(compute, elements: int, dist_backend: str) -> dict[str, Any]:
    """The all-reduce's element count: `elements` when given (> 0), else sized on these GPUs so that
    one all-reduce takes about as long as one compute phase (the trade the workload exists to show).
    Every rank takes the largest rank's choice. Returns the count and both measured durations (ms)."""
    import torch
    import torch.distributed as dist

    compute_ms = _time_ms(compute)
    probe_ms = 0.0
    if elements <= 0 and dist_backend != "nccl":
        elements = GRAIN  # gloo all-reduces through host memory: sized for the plumbing, not the trade
    if elements <= 0:
        # on a communicator of NCCL's default settings: green_ctx caps its own at comm_sms CTAs, and
        # every variant must pick the same size for their step times to compare
        ref = dist.new_group(pg_options=dist.ProcessGroupNCCL.Options())
        probe = torch.ones(PROBE_ELEMENTS, device="cuda", dtype=torch.bfloat16)
        probe_ms = _time_ms(lambda: dist.all_reduce(probe, group=ref))
        del probe
        want = PROBE_ELEMENTS * compute_ms / max(probe_ms, 1e-3)
        elements = int(min(max(round(want / GRAIN), 1), 256)) * GRAIN
        agreed = torch.tensor([elements], device="cuda", dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=ref)
        dist.destroy_process_group(ref)
        elements, how = int(agreed.item()), "sized: one all-reduce about as long as the compute phase"
    else:
        how = "given"
    sized = torch.ones(elements, device="cuda", dtype=torch.bfloat16)
    comm_ms = _time_ms(lambda: dist.all_reduce(sized))

    return {
        "comm_elements": elements,
        "how": how,
        "compute_ms": round(compute_ms, 4),
        "probe_all_reduce_ms": round(probe_ms, 4) if how.startswith("sized") else None,
        "probe_elements": PROBE_ELEMENTS if how.startswith("sized") else None,
        "all_reduce_ms": round(comm_ms, 4),
        "measured_on": torch.cuda.get_device_name(torch.cuda.current_device()),
    }


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from .probes import bracket_probe
    from .ranges import phase

    p = ctx.params
    rank, world = init_distributed(p, variant)
    torch.manual_seed(ctx.seed + rank)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    a = torch.randn(p["size"], p["size"], device="cuda", dtype=torch.bfloat16)
    b = torch.randn(p["size"], p["size"], device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    warm_up_communicator()
    sizing = size_all_reduce(lambda: [torch.matmul(a, b, out=c) for _ in range(p["matmuls"])],
                             int(p["comm_elements"]), str(p.get("dist_backend", "nccl")))
    bucket = torch.ones(sizing["comm_elements"], device="cuda", dtype=torch.bfloat16)
    main = torch.cuda.current_stream()
    facts: dict[str, Any] = {"device_sms": sms, "rank": rank, "world_size": world, "sizing": sizing}
    if variant == "green_ctx":
        from .green_contexts import make_partitions

        parts = make_partitions(int(p["comm_sms"]))
        mm_stream, comm_stream = parts["partitions"][0]["_stream"], parts["partitions"][1]["_stream"]
        facts["partitions"] = [
            {k: v for k, v in d.items() if not k.startswith("_")} for d in parts["partitions"]
        ]
    elif variant == "streams":
        mm_stream, comm_stream = torch.cuda.Stream(), torch.cuda.Stream()
        facts["partitions"] = [
            {"name": "compute stream", "sm_count": sms, "marker": "tl_probe_large_partition", "green": False},
            {"name": "comm stream", "sm_count": sms, "marker": "tl_probe_small_partition", "green": False},
        ]
    else:
        mm_stream = comm_stream = main
        facts["partitions"] = [
            {"name": "one stream", "sm_count": sms, "marker": "tl_probe_large_partition", "green": False},
        ]
    for part in facts["partitions"]:
        part["stream_role"] = "compute" if part["marker"] == "tl_probe_large_partition" else "comm"
    bracket_n = 4 * sms
    comm_part = 1 if variant != "sequential" else 0

    def compute_phase() -> None:
        with torch.cuda.stream(mm_stream), phase("compute"):
            mm_stream.wait_stream(main)
            bracket_probe(ctx.recorder, "tl_probe_large_partition", bracket_n, partition=0)
            for _ in range(p["matmuls"]):
                torch.matmul(a, b, out=c)
            bracket_probe(ctx.recorder, "tl_probe_large_partition", bracket_n, partition=0)

    def comm_phase() -> None:
        with torch.cuda.stream(comm_stream), phase("all_reduce"):
            comm_stream.wait_stream(main)
            marker = "tl_probe_small_partition" if comm_part else "tl_probe_large_partition"
            bracket_probe(ctx.recorder, marker, bracket_n, partition=comm_part)
            dist.all_reduce(bucket, async_op=False)  # on the current stream (torch ≥ 2.8)
            bracket_probe(ctx.recorder, marker, bracket_n, partition=comm_part)

    for _s, _m in ctx.loop():
        compute_phase()
        comm_phase()
        main.wait_stream(mm_stream)
        main.wait_stream(comm_stream)
        bucket.mul_(1.0 / world)  # keep the values bounded: the mean, like DDP
    dist.barrier()
    facts["flops_per_step"] = 2 * p["size"] ** 3 * p["matmuls"]
    facts["comm_elements"] = int(sizing["comm_elements"])
    facts["comm_bytes_per_step"] = 2 * int(sizing["comm_elements"])
    facts["nccl_max_ctas"] = int(p["comm_sms"]) if variant == "green_ctx" else None
    facts["dist_backend"] = str(p["dist_backend"])
    return facts


def finish() -> None:
    """Leave the process group (called by the runner after the trace is written)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
