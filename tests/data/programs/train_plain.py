"""A plain, marker-free training loop, as a new user would write it: a small pure-PyTorch
transformer language model, AdamW, and `print(f"... {loss.item()}")` every step. No ProfilerStep,
no NVTX, no record_function: tracelab must find the steps by itself (tracelab.analyses.steps.infer).

    python tests/data/programs/train_plain.py            (uses CUDA when available, else the CPU)

TRAIN_PLAIN_STEPS (default 10) sets the number of steps. When TRACELAB_RUN_DIR is set (tracelab
record sets it) the program writes program_meta.json there: the number of steps it ran and the wall
time of each, which `tracelab record` copies into meta.json under "program".
"""

import json
import os
import time
from pathlib import Path

import torch
from torch import nn

STEPS = int(os.environ.get("TRAIN_PLAIN_STEPS", "10"))
VOCAB, SEQ, BATCH, WIDTH, HEADS, LAYERS = 512, 64, 8, 128, 4, 2


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(
            WIDTH, HEADS, dim_feedforward=4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def main() -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), device=device)
    step_ms = []
    for step in range(STEPS):
        t0 = time.perf_counter()
        x, y = data[step, :, :-1], data[step, :, 1:]
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
        step_ms.append((time.perf_counter() - t0) * 1e3)
    out = os.environ.get("TRACELAB_RUN_DIR")
    if out:
        later = sorted(step_ms[2:]) or step_ms
        meta = {
            "program": "train_plain",
            "steps": STEPS,
            "syncs_per_step": 1,
            "step_wall_ms": [round(t, 3) for t in step_ms],
            "median_step_ms_after_warmup": round(later[len(later) // 2], 3),
            "device": device,
        }
        (Path(out) / "program_meta.json").write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
