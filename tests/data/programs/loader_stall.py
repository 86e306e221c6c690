"""A plain training loop whose DataLoader cannot keep up (issue 29), for recording under both profilers:

    tracelab record --backend nsys  -- python3 tests/data/programs/loader_stall.py
    tracelab record --backend torch -- python3 tests/data/programs/loader_stall.py
    LOADER_DDP=1 tracelab record --backend torch -- torchrun --nproc-per-node 2 tests/data/programs/loader_stall.py

The dataset costs LOADER_SAMPLE_MS (5) ms of CPU per sample, a batch is LOADER_BATCH (8) samples, the
DataLoader has LOADER_WORKERS (2) worker processes: a batch every ~20 ms, while the GPU step (an MLP forward,
backward and SGD step) takes a few ms. So most steps start with the main thread waiting in
`DataLoader.__next__` (torch.profiler: the op `enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`;
nsys: poll / sem_wait on the workers' queue) while the GPU idles: gap cause `input_wait`, rule `input_bound`.
No ProfilerStep, no NVTX, no record_function of its own; nothing waits for the GPU inside the loop.

With LOADER_DDP=1 under torchrun (2 ranks, NCCL when there are 2 GPUs, else gloo on one GPU) the model is
wrapped in DDP and only rank 1 has the slow loader (rank 0 gets LOADER_FAST_WORKERS, 12, and a prefetch):
rank 1 reaches every all-reduce last, and the straggler explanation names input_wait.

LOADER_STEPS (default 12) steps after 2 warm-up steps. When TRACELAB_RUN_DIR is set (tracelab record sets
it) the program writes program_meta.json there (program_meta_rank<R>.json under DDP): per step the time the
main thread spent in next(loader) by its own clock.
"""

import json
import os
import time
from pathlib import Path

import torch

STEPS = int(os.environ.get("LOADER_STEPS", "12"))
SAMPLE_MS = float(os.environ.get("LOADER_SAMPLE_MS", "5"))
BATCH = int(os.environ.get("LOADER_BATCH", "8"))
WORKERS = int(os.environ.get("LOADER_WORKERS", "2"))
FAST_WORKERS = int(os.environ.get("LOADER_FAST_WORKERS", "12"))
DDP = os.environ.get("LOADER_DDP") == "1"
ROWS, WIDTH = 256, 2048


class Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return (STEPS + 4) * BATCH

    def __getitem__(self, i: int):
        t_end = time.perf_counter() + SAMPLE_MS / 1e3
        x = torch.randn(ROWS, WIDTH, generator=torch.Generator().manual_seed(i))
        while time.perf_counter() < t_end:  # decoding / augmentation
            pass
        return x, i % 10


def main() -> None:
    rank, world = 0, 1
    if DDP:
        import torch.distributed as dist

        backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
        dist.init_process_group(backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                                torch.nn.ReLU(), torch.nn.Linear(WIDTH, 10)).cuda()
    if DDP:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    slow = not DDP or rank == 1
    loader = (torch.utils.data.DataLoader(Slow(), batch_size=BATCH, num_workers=WORKERS) if slow else
              torch.utils.data.DataLoader(Slow(), batch_size=BATCH, num_workers=FAST_WORKERS, prefetch_factor=4,
                                          persistent_workers=True))
    it = iter(loader)
    steps = []
    for step in range(STEPS + 2):
        t0 = time.perf_counter()
        x, y = next(it)  # the main thread waits here when the workers are behind
        waited = (time.perf_counter() - t0) * 1e3
        x = x.cuda(non_blocking=True).reshape(-1, WIDTH)
        y = y.cuda(non_blocking=True).repeat_interleave(ROWS)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= 2:
            steps.append({"step": step - 2, "loader_wait_ms": round(waited, 4),
                          "step_ms": round((time.perf_counter() - t0) * 1e3, 4)})
    torch.cuda.synchronize()
    out = os.environ.get("TRACELAB_RUN_DIR")
    if out:
        meta = {"program": "loader_stall", "steps": STEPS, "sample_ms": SAMPLE_MS, "batch": BATCH,
                "num_workers": loader.num_workers, "rank": rank, "world_size": world, "per_step": steps}
        name = f"program_meta_rank{rank}.json" if DDP else "program_meta.json"
        Path(out, name).write_text(json.dumps(meta, indent=1))
    if DDP:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
