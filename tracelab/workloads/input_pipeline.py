"""input_pipeline: a training loop fed by a DataLoader that cannot keep up with the GPU, and its fix.

Each sample costs the dataset `sample_ms` of CPU work (decoding, augmentation); a batch of `batch` samples
therefore takes one worker `batch * sample_ms` (40 ms by default), while the GPU step (a small MLP forward,
backward and optimizer step, padded by a calibrated spin kernel to `gpu_step_ms`) takes a few ms.
`slow_loader` gives the DataLoader `slow_workers` (2) worker processes and nothing else: they deliver a batch
every ~20 ms, so every step the main thread waits in `DataLoader.__next__` (torch.profiler records it as the
op `enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`; nsys with OS runtime calls shows the
thread in poll / sem_wait on the workers' queue) and the GPU idles: gap cause `input_wait`, rule
`input_bound`. `fast_loader` uses enough workers for the step (`fast_workers`), pinned host memory with
non-blocking copies, `prefetch_factor` batches in flight per worker and persistent workers: the next batch
is ready when the step ends, and the GPU does not wait for input.
"""

from __future__ import annotations

import time
from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="a DataLoader too slow for the GPU step (2 workers, 5 ms/sample) vs enough workers, pinned, prefetched",
    variants=(
        Variant("slow_loader", "2 DataLoader workers for a dataset of 5 ms/sample: the GPU waits for every batch"),
        Variant("fast_loader", "enough workers, pin_memory + non_blocking, prefetch_factor, persistent_workers"),
    ),
)


class SlowDataset:
    """`n` samples, each `sample_ms` of CPU work (a spin, as decoding would be) yielding a (rows, width)
    float tensor and a label. A torch Dataset by duck typing (__len__, __getitem__)."""

    def __init__(self, n: int, rows: int, width: int, sample_ms: float, seed: int) -> None:
        self.n, self.rows, self.width, self.sample_ms, self.seed = n, rows, width, sample_ms, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        t_end = time.perf_counter() + self.sample_ms / 1e3
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.randn(self.rows, self.width, generator=g)
        while time.perf_counter() < t_end:  # the rest of the sample's CPU time
            pass
        return x, int(i % 10)


def loader_for(variant: str, p: dict[str, Any], seed: int, steps: int, cuda: bool):
    """The variant's DataLoader over enough samples for `steps` steps."""
    import torch

    ds = SlowDataset((steps + 4) * int(p["batch"]), int(p["sample_rows"]), int(p["width"]), float(p["sample_ms"]), seed)
    if variant == "slow_loader":
        return torch.utils.data.DataLoader(ds, batch_size=int(p["batch"]), num_workers=int(p["slow_workers"]))
    return torch.utils.data.DataLoader(
        ds, batch_size=int(p["batch"]), num_workers=int(p["fast_workers"]), pin_memory=cuda,
        prefetch_factor=int(p["prefetch_factor"]), persistent_workers=True,
    )


def _cycles_per_ms(torch: Any) -> float:
    """Clock cycles of torch.cuda._sleep per millisecond on this GPU (measured once with CUDA events)."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(2_000_000)
    b.record()
    b.synchronize()
    return 2_000_000 / max(a.elapsed_time(b), 1e-3)


def train(variant: str, p: dict[str, Any], seed: int, steps_iter, device: str) -> dict[str, Any]:
    """The loop, on `device` ('cuda' or 'cpu'): `steps_iter` yields (step, measured) (RunContext.loop on a
    GPU; a plain range on CPU for the smoke test). Returns the facts for meta.json."""
    import torch

    from .ranges import phase

    cuda = device == "cuda"
    width, layers = int(p["width"]), int(p["layers"])
    mods: list[Any] = []
    for i in range(layers):
        mods.append(torch.nn.Linear(width, width if i < layers - 1 else 10))
        if i < layers - 1:
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    spin = int(_cycles_per_ms(torch) * float(p["gpu_step_ms"])) if cuda and float(p["gpu_step_ms"]) > 0 else 0
    loader = loader_for(variant, p, seed, int(p["steps"]) + 4, cuda)
    it = iter(loader)
    waits: list[float] = []
    non_blocking = variant == "fast_loader" and cuda
    for step, measured in steps_iter:
        t0 = time.perf_counter()
        with phase("load batch"):  # also a user range named for loading (input_wait under any profiler)
            x, y = next(it)  # torch.profiler: enumerate(DataLoader)#..._DataLoaderIter.__next__
        if measured:
            waits.append((time.perf_counter() - t0) * 1e3)
        if variant == "fast_loader" and not measured and step == 1 and cuda:
            # the last warm-up step: let the prefetch queue fill (workers are persistent) before measuring:
            # 3 batch-times, 3 batches per worker (36 with 12 workers, more than --quick's 12 steps)
            time.sleep(3 * int(p["batch"]) * float(p["sample_ms"]) / 1e3)
        with phase("h2d"):
            x = x.to(device, non_blocking=non_blocking).reshape(-1, width)
            y = y.to(device, non_blocking=non_blocking).repeat_interleave(int(p["sample_rows"]))
        with phase("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with phase("optimizer"):
            opt.step()
            if spin:
                torch.cuda._sleep(spin)  # the rest of a few-ms GPU step
    del it
    return {
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor if loader.num_workers else None,
        "persistent_workers": bool(loader.persistent_workers),
        "batch_s_per_worker": int(p["batch"]) * float(p["sample_ms"]) / 1e3,
        "loader_wait_ms": [round(w, 3) for w in waits],
        "gpu_step_ms": float(p["gpu_step_ms"]) if spin else 0.0,
    }


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    torch.manual_seed(ctx.seed)
    return train(variant, ctx.params, ctx.seed, ctx.loop(), "cuda")

