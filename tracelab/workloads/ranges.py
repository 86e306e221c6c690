"""One helper for step and phase ranges, seen by both profilers.

`rng("step 3")` opens an NVTX range (the `nvtx` package when it is importable, else
`torch.cuda.nvtx`) — what nsys records — and a `torch.profiler.record_function` — what
torch.profiler records as a `user_annotation` (and projects onto the GPU streams). Both are cheap
when no profiler is attached. Workloads use only this module for ranges.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

try:  # the `nvtx` package (NVIDIA's Python NVTX bindings): domains, colors, cheap
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the environment
    _nvtx = None

DOMAIN = "tracelab"


def nvtx_backend() -> str:
    """Which NVTX implementation ranges go through: 'nvtx' (package), 'torch' or 'none'."""
    if _nvtx is not None:
        return "nvtx"
    try:
        import torch
    except ImportError:  # pragma: no cover
        return "none"
    return "torch" if torch.cuda.is_available() else "none"


@contextlib.contextmanager
def rng(name: str) -> Iterator[None]:
    """A named range: NVTX for nsys plus record_function for torch.profiler."""
    import torch

    backend = nvtx_backend()
    if backend == "nvtx":
        _nvtx.push_range(name, domain=DOMAIN)
    elif backend == "torch":
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if backend == "nvtx":
            _nvtx.pop_range(domain=DOMAIN)
        elif backend == "torch":
            torch.cuda.nvtx.range_pop()


def step(i: int) -> contextlib.AbstractContextManager[None]:
    """The range around one step of a workload's loop (`step 0`, `step 1`, ...)."""
    return rng(f"step {i}")


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """A range around one phase inside a step (`copy`, `compute`, `matmul`, ...)."""
    return rng(name)
