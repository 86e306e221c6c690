"""Record a real 2-rank DistributedDataParallel run under torch.profiler, both ranks on ONE GPU.

NCCL refuses two ranks on one GPU, so the process group is gloo (it all-reduces CUDA tensors through
host memory). Rank 1 is made the straggler on purpose: it spends STRAGGLE_MS of host time
(time.sleep) before each step's forward pass, so rank 0 reaches each step's first gradient
all-reduce about that much earlier and waits for rank 1 there.

    python tests/data/ddp/record_ddp.py OUT_DIR [--steps 6] [--straggle-ms 3]

writes OUT_DIR/rank0.json.gz, OUT_DIR/rank1.json.gz (Kineto traces, distributedInfo rank 0 / 1) and
OUT_DIR/meta.txt (versions, GPU, parameters).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import socket
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, out: str, port: int, steps: int, straggle_ms: float) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    width = 1024
    model = torch.nn.Sequential(
        *[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    ).cuda()
    ddp = DDP(model, device_ids=[0], bucket_cap_mb=4)  # 4 MB buckets: one all-reduce per layer
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(512, width, device="cuda")
    path = Path(out) / f"rank{rank}.json"

    def export(prof) -> None:
        prof.export_chrome_trace(str(path))

    sched = schedule(wait=1, warmup=1, active=steps, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, on_trace_ready=export
    ) as prof:
        for _ in range(steps + 2):
            if rank == 1 and straggle_ms > 0:
                time.sleep(straggle_ms / 1000.0)  # the straggler's extra host work
            loss = ddp(x).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    with open(path, "rb") as f, gzip.open(str(path) + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--straggle-ms", type=float, default=3.0)
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp

    Path(args.out).mkdir(parents=True, exist_ok=True)
    port = _free_port()
    mp.spawn(worker, args=(2, args.out, port, args.steps, args.straggle_ms), nprocs=2, join=True)
    (Path(args.out) / "meta.txt").write_text(
        f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda}\n"
        f"gpu {torch.cuda.get_device_name(0)}\nbackend gloo, world 2, both ranks on cuda:0\n"
        f"steps profiled {args.steps}, rank 1 sleeps {args.straggle_ms} ms before each forward\n"
        f"recorded {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n"
    )


if __name__ == "__main__":
    main()
