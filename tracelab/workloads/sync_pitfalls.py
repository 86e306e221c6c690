"""sync_pitfalls: a training loop whose host waits for the GPU, in four ways.

A small MLP trains on batches that a copy stream uploads from pinned memory while the previous
step computes. `item_every_step` logs `loss.item()` each step (what `print(loss)` does): the host
blocks until the step's kernels finish, so the next step's launches start from an empty queue and
the GPU idles for the launch latency of every step. `deferred_sync` keeps the losses on the device
and reads them once every `log_every` steps: the queue never drains. `synchronize_in_loop` calls
`torch.cuda.synchronize()` each step (same stall as `.item()`, without a copy).
`nonzero_sync` selects the hardest samples with `torch.nonzero`, whose output shape depends on the
data: the host must wait for the count before it can launch the rest of the step.
`keep_outputs` (recorded with GPU memory tracing) syncs like `deferred_sync` but also keeps every step's
logits on the GPU for epoch metrics: allocated memory grows by batch x classes x 4 bytes a step, which the
memory timeline shows as a staircase whose peak is at the last step.
"""

from __future__ import annotations

import sys
from typing import Any

from .base import RunContext, Variant, declare

WORKLOAD = declare(
    __name__, __doc__,
    description="host syncs in a training loop: .item() every step, deferred sync, synchronize(), nonzero()",
    variants=(
        Variant("item_every_step", "loss.item() (print(loss)) every step: one blocking sync per step"),
        Variant("deferred_sync", "losses stay on the GPU, one sync every log_every steps"),
        Variant("synchronize_in_loop", "torch.cuda.synchronize() every step"),
        Variant("nonzero_sync", "torch.nonzero on a data-dependent mask forces a sync each step"),
        Variant("keep_outputs", "deferred sync, and every step's logits kept on the GPU (memory traced: "
                "allocated memory grows each step)", memory=True),
    ),
)


def run(ctx: RunContext, variant: str) -> dict[str, Any]:
    import torch

    from .ranges import phase

    p = ctx.params
    torch.manual_seed(ctx.seed)
    layers = []
    for i in range(p["layers"]):
        layers.append(torch.nn.Linear(p["width"], p["width"] if i < p["layers"] - 1 else p["classes"]))
        if i < p["layers"] - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    host_x = [torch.randn(p["batch"], p["width"]).pin_memory() for _ in range(p["batches"])]
    host_y = [torch.randint(0, p["classes"], (p["batch"],)).pin_memory() for _ in range(p["batches"])]
    copy = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    losses: list[Any] = []
    kept: list[Any] = []  # keep_outputs: every step's logits, on the GPU until the loop ends
    syncs = 0

    def upload(i: int):
        with torch.cuda.stream(copy), phase("h2d batch"):
            x = host_x[i % p["batches"]].to("cuda", non_blocking=True)
            y = host_y[i % p["batches"]].to("cuda", non_blocking=True)
        return x, y

    nxt = upload(0)
    for step, measured in ctx.loop():
        main.wait_stream(copy)
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        nxt = upload(step + 1)  # overlaps this step's compute
        with phase("forward"):
            logits = model(x)
            per_sample = torch.nn.functional.cross_entropy(logits, y, reduction="none")
            if variant == "nonzero_sync":
                hard = torch.nonzero(per_sample > per_sample.mean()).squeeze(1)  # host waits for the count
                loss = per_sample[hard].mean()
                syncs += measured
            else:
                loss = per_sample.mean()
            if variant == "keep_outputs":
                kept.append(logits.detach())  # batch x classes float32 a step, never freed in the loop
        with phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with phase("optimizer"):
            opt.step()
        with phase("log"):
            if variant == "item_every_step":
                print(f"step {step} loss {loss.item():.4f}", file=sys.stderr)
                syncs += measured
            elif variant == "synchronize_in_loop":
                torch.cuda.synchronize()
                syncs += measured
            else:
                losses.append(loss.detach())
                if variant in ("deferred_sync", "keep_outputs") and len(losses) == p["log_every"]:
                    vals = torch.stack(losses).cpu()
                    print(f"step {step} mean loss {vals.mean().item():.4f}", file=sys.stderr)
                    losses.clear()
                    syncs += measured
    facts: dict[str, Any] = {"host_syncs_in_loop": syncs, "pinned": True, "copy_stream": True}
    if variant == "keep_outputs":
        facts["kept_bytes_per_step"] = int(p["batch"]) * int(p["classes"]) * 4
        facts["kept_steps"] = len(kept)
    return facts
