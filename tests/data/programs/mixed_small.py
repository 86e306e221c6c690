"""A small mixed program recorded as a fixture (tests/data/README.md): two streams, a pinned and a
pageable host-to-device copy per step, a per-step `.item()`, a CUDA-graph replay and a kernel on a
green-context stream. Deterministic launch counts: STEPS steps, everything below once per step.

    python tests/data/programs/mixed_small.py            (needs a CUDA GPU, cuda.bindings)
"""

import json
import os
import sys
from pathlib import Path

import torch

from tracelab.workloads.green_contexts import make_partitions
from tracelab.workloads.probes import ProbeRecorder, bracket_probe
from tracelab.workloads.ranges import rng

STEPS = 5


def main() -> None:
    torch.manual_seed(0)
    n = 1 << 20
    main_s = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    pinned = torch.randn(n).pin_memory()
    pageable = torch.randn(n)
    d1 = torch.empty(n, device="cuda")
    d2 = torch.empty(n, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    gx = torch.randn(256, 256, device="cuda")
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(main_s)
    with torch.cuda.stream(side):
        for _ in range(2):
            gx.copy_(torch.tanh(gx @ w))
    main_s.wait_stream(side)
    with rng("capture"), torch.cuda.graph(g):
        for _ in range(4):  # 4 x (matmul, tanh, copy) per replay
            gx.copy_(torch.tanh(gx @ w))
    parts = make_partitions(16)
    green = parts["partitions"][1]["_stream"]
    with torch.cuda.stream(green):  # one marker kernel: names the green stream in any trace
        bracket_probe(ProbeRecorder(enabled=False), "tl_probe_small_partition", 64)
    torch.cuda.synchronize()
    for step in range(STEPS):
        with rng(f"step {step}"):
            with torch.cuda.stream(s1), rng("pinned copy"):
                s1.wait_stream(main_s)
                d1.copy_(pinned, non_blocking=True)
                y1 = (d1 * 2.0).sum()
            with torch.cuda.stream(s2), rng("pageable copy"):
                s2.wait_stream(main_s)
                d2.copy_(pageable, non_blocking=True)
                y2 = torch.sigmoid(d2).sum()
            main_s.wait_stream(s1)
            main_s.wait_stream(s2)
            with rng("graph replay"):
                g.replay()
            with torch.cuda.stream(green), rng("green context"):
                green.wait_stream(main_s)
                z = torch.sigmoid(d1).sum()
            main_s.wait_stream(green)
            loss = y1 + y2 + z + gx.sum()
            print(f"step {step} loss {loss.item():.3f}", file=sys.stderr)  # one D2H sync per step
    torch.cuda.synchronize()
    run_dir = os.environ.get("TRACELAB_RUN_DIR")
    if run_dir:  # tracelab record merges this into meta.json
        small = {k: v for k, v in parts["partitions"][1].items() if not k.startswith("_")}
        Path(run_dir, "program_meta.json").write_text(json.dumps({"partitions": [small]}))
    print(
        f"green partitions: {[(p['name'], p['sm_count'], p['context_id']) for p in parts['partitions']]}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
