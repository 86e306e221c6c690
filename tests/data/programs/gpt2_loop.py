"""A marker-free GPT-2 training loop (transformers' GPT2LMHeadModel, built from a small config: no
download), printing the loss every step:

    python tests/data/programs/gpt2_loop.py [--steps 10]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=256, vocab_size=8192)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(0, cfg.vocab_size, (args.steps, 8, 257), device="cuda")
    for step in range(args.steps):
        tokens = data[step]
        out = model(tokens[:, :-1], labels=tokens[:, 1:])
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        print(f"step {step} loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
