"""A training loop whose DataLoader cannot keep up with the GPU (issue 29's input-pipeline stall):

    python tests/data/programs/loader_stall.py [--loader slow|fast] [--steps 12]

`slow`: 2 worker processes, a dataset that takes 5 ms per sample, batches of 4 samples: a batch every
~10 ms while the GPU step takes a few ms, so the main thread waits in `DataLoader.__next__` and the GPU
idles. `fast`: 8 workers, pinned memory, prefetch_factor 4, persistent workers, non_blocking copies.
No markers. Writes program_meta.json into $TRACELAB_RUN_DIR when set.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

WIDTH = 4096


class SlowSamples(torch.utils.data.Dataset):
    def __init__(self, n: int, delay_s: float = 0.005) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay_s)  # decoding / augmentation on the host
        return torch.full((256, WIDTH), float(i % 7))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loader", choices=("slow", "fast"), default="slow")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    batch = 4
    ds = SlowSamples(args.steps * batch)
    if args.loader == "slow":
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=2)
    else:
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch, num_workers=8, pin_memory=True, prefetch_factor=4, persistent_workers=True
        )
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(6)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    wall = []
    t0 = time.perf_counter()
    for x in loader:
        x = x.view(-1, WIDTH).cuda(non_blocking=True)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        wall.append((now - t0) * 1e3)
        t0 = now
    torch.cuda.synchronize()
    run_dir = os.environ.get("TRACELAB_RUN_DIR")
    if run_dir:
        Path(run_dir, "program_meta.json").write_text(
            json.dumps({"program": "loader_stall", **vars(args), "step_wall_ms": [round(w, 3) for w in wall]})
        )


if __name__ == "__main__":
    main()
