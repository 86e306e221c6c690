"""A marker-free inference loop whose host blocks in OS calls between steps, as a program waiting for
its input does: before each step the main thread either reads the next batch from a pipe that a
feeder thread fills only after BLOCK_MS (the main thread is blocked in `read`), or sleeps BLOCK_MS
(`time.sleep`: blocked in `clock_nanosleep`). Then it uploads the batch and launches a small MLP's
forward pass; it never waits for the GPU inside the loop (one `.item()` after it). So every step
starts with one long idle gap on the GPU during which the only launching thread is blocked in the
OS: under nsys with OS-runtime tracing that gap is `no_work`, and it names the call.

    python tests/data/programs/host_blocked.py            (needs a CUDA GPU)

HOST_BLOCKED_STEPS (default 8) and HOST_BLOCKED_MS (default 3) set the number of steps and the
blocking time. When TRACELAB_RUN_DIR is set (tracelab record sets it) the program writes
program_meta.json there: per step how it blocked (`read` / `sleep`) and for how long by its own clock.
No ProfilerStep, no NVTX, no record_function.
"""

import json
import os
import threading
import time
from pathlib import Path

import torch

STEPS = int(os.environ.get("HOST_BLOCKED_STEPS", "8"))
BLOCK_MS = float(os.environ.get("HOST_BLOCKED_MS", "3"))
BATCH, WIDTH = 256, 512


def feeder(requests: int, replies: int, n: int) -> None:
    """Answer each one-byte request with a batch of n bytes, BLOCK_MS later (a slow input source)."""
    payload = os.urandom(n)
    while os.read(requests, 1):
        time.sleep(BLOCK_MS / 1e3)
        os.write(replies, payload)


def read_exact(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += os.read(fd, n - len(out))
    return out


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 10),
    ).cuda()
    n = 4096  # bytes of one "batch" on the pipe (below the pipe buffer: one write, no partial reads)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    threading.Thread(target=feeder, args=(req_r, rep_w, n), daemon=True).start()
    host = torch.empty(BATCH, WIDTH).pin_memory()
    total = torch.zeros((), device="cuda")
    with torch.no_grad():
        for _ in range(2):  # warm-up (cuBLAS handles, allocator) outside the measured steps
            total += model(host.cuda(non_blocking=True)).sum()
        torch.cuda.synchronize()
        steps = []
        for step in range(STEPS):
            t0 = time.perf_counter()
            if step % 2 == 0:
                os.write(req_w, b"x")
                data = read_exact(rep_r, n)  # blocked in read() until the feeder answers
                how = "read"
            else:
                time.sleep(BLOCK_MS / 1e3)  # blocked in clock_nanosleep()
                data = b"\x01"
                how = "sleep"
            blocked = (time.perf_counter() - t0) * 1e3
            host.fill_(float(data[0]) / 255.0)
            x = host.cuda(non_blocking=True)
            total += model(x).sum()
            steps.append({"step": step, "blocked_in": how, "blocked_ms": round(blocked, 4),
                          "step_ms": round((time.perf_counter() - t0) * 1e3, 4)})
        print(f"checksum {total.item():.3f}")  # the one wait for the GPU, after the loop
    os.close(req_w)  # the feeder reads EOF and ends
    out = os.environ.get("TRACELAB_RUN_DIR")
    if out:
        meta = {"program": "host_blocked", "steps": STEPS, "block_ms": BLOCK_MS, "per_step": steps}
        Path(out, "program_meta.json").write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
