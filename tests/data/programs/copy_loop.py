"""An input-copy loop without a per-step sync, as a data-feeding loop is often written:

    python tests/data/programs/copy_loop.py [--memory pageable|pinned] [--iters 20] [--kernels 13]

Each iteration copies a batch from host memory to the GPU (`.to("cuda", non_blocking=True)`; from
pageable memory the copy is staged and the host waits for it, from pinned memory it is a DMA the host
does not wait for) and runs `kernels` kernels on it (matmul, then elementwise ops). No marker, no sync
until the end: tracelab must find the 20 iterations by itself. Writes program_meta.json into
$TRACELAB_RUN_DIR when set.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memory", choices=("pageable", "pinned"), default="pageable")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=13)
    ap.add_argument("--mib", type=int, default=256)
    args = ap.parse_args()
    n = args.mib * (1 << 20) // 4
    side = 2048
    host = [torch.randn(n) for _ in range(2)]
    if args.memory == "pinned":
        host = [h.pin_memory() for h in host]
    w = torch.randn(side, side, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = None
    for i in range(args.iters):
        x = host[i % 2].to("cuda", non_blocking=True)
        y = x[: side * side].view(side, side) @ w
        for _ in range(args.kernels - 2):
            y = torch.relu(y * 1.0001 + 0.5)
        out = y.sum()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    print(f"{args.memory}: {args.iters} iterations in {wall:.2f} ms, last {out.item():.3f}")
    run_dir = os.environ.get("TRACELAB_RUN_DIR")
    if run_dir:
        Path(run_dir, "program_meta.json").write_text(
            json.dumps({"program": "copy_loop", **vars(args), "loop_wall_ms": round(wall, 3)}, indent=1)
        )


if __name__ == "__main__":
    main()
