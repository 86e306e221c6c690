"""A plain DistributedDataParallel training loop with one slow rank, launched by torchrun:

    torchrun --standalone --nproc-per-node=2 tests/data/programs/ddp_straggler.py [--steps 15]
        [--slow-rank 1] [--straggle-ms 4] [--mode sleep|loader]

No profiler calls, no markers: tracelab record wraps it (`tracelab record --backend torch|nsys --
torchrun ...`) and must find ranks, steps and the straggler by itself. Each rank selects its GPU from
LOCAL_RANK before any CUDA allocation; NCCL when every rank has its own GPU, else gloo (two ranks on
one GPU). The communicator is warmed up (one all-reduce and a barrier) before the loop.

`--mode sleep`: the slow rank sleeps `straggle-ms` on the host before each forward (extra host work; it
makes the rank late only when it exceeds the slack between host and GPU: the GPU step is ~30 ms on an H200,
so the recordings use 40 ms).
`--mode loader`: the slow rank's DataLoader (one worker, `straggle-ms` per batch) cannot keep up: its
GPU waits for input and the other ranks wait for it in the first gradient all-reduce.
Writes program_meta.json into $TRACELAB_RUN_DIR (rank 0) when set: the parameters and wall time per step.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for k, v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[k] = v  # NVLink multicast stays off, also in child processes

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, DEPTH, BATCH = 4096, 6, 2048


class SlowBatches(torch.utils.data.Dataset):
    """Each item is a whole batch that takes `delay_s` of host work to produce."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(BATCH, WIDTH, generator=g)


def batches(rank: int, args) -> object:
    if args.mode == "loader":
        slow = rank == args.slow_rank
        ds = SlowBatches(args.steps, args.straggle_ms / 1000.0 if slow else 0.0)
        return iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1 if slow else 2))
    x = torch.randn(BATCH, WIDTH)
    return iter([x] * args.steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--straggle-ms", type=float, default=40.0)
    ap.add_argument("--mode", choices=("sleep", "loader"), default="sleep")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    own_gpu = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    backend = "nccl" if own_gpu else "gloo"
    kw = {"device_id": torch.device("cuda", torch.cuda.current_device())} if backend == "nccl" else {}
    dist.init_process_group(backend, **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = [m for _ in range(DEPTH) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers).cuda()
    ddp = DDP(model, device_ids=[torch.cuda.current_device()], bucket_cap_mb=64)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    data = batches(rank, args)
    dist.all_reduce(torch.ones(1024, device="cuda"))  # the communicator's warm-up, before the loop
    dist.barrier()
    torch.cuda.synchronize()
    wall = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        if args.mode == "sleep" and rank == args.slow_rank:
            time.sleep(args.straggle_ms / 1000.0)
        x = next(data).cuda(non_blocking=True)
        loss = ddp(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        wall.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    dist.barrier()
    out = os.environ.get("TRACELAB_RUN_DIR")
    if out and rank == 0:
        meta = {"program": "ddp_straggler", "world_size": world, "dist_backend": backend, **vars(args),
                "width": WIDTH, "depth": DEPTH, "batch": BATCH, "step_wall_ms": [round(w, 3) for w in wall]}
        Path(out, "program_meta.json").write_text(json.dumps(meta, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
