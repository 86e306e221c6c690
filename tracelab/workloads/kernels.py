"""The workloads' own Triton kernels, each instrumented with the SM probe (probes.py).

Launch them through `launch()`, which takes a probe buffer from the recorder for every launch and
remembers the kernel's name as the trace shows it.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from .probes import ProbeRecorder, probe_begin, probe_end

TRACE_NAMES: dict[str, str] = {}  # function name -> kernel name in the trace


@triton.jit
def busy_kernel(x, y, n, iters, a, b, probe, BLOCK: tl.constexpr, PROBE: tl.constexpr):
    """y = iters fused multiply-adds of x: compute-bound with a tunable length."""
    sm, t0 = probe_begin()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    for _ in range(iters):
        v = v * a + b
    tl.store(y + offs, v, mask=mask)
    if PROBE:
        probe_end(probe, sm, t0)


@triton.jit
def latency_kernel(x, y, n, iters, a, b, probe, BLOCK: tl.constexpr, PROBE: tl.constexpr):
    """busy_kernel under its own name: the latency-critical kernel of the priorities workload."""
    sm, t0 = probe_begin()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    for _ in range(iters):
        v = v * a + b
    tl.store(y + offs, v, mask=mask)
    if PROBE:
        probe_end(probe, sm, t0)


@triton.jit
def sigmoid_kernel(x, y, n, probe, BLOCK: tl.constexpr, PROBE: tl.constexpr):
    """y = sigmoid(x): memory-bound elementwise."""
    sm, t0 = probe_begin()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    tl.store(y + offs, tl.sigmoid(v), mask=mask)
    if PROBE:
        probe_end(probe, sm, t0)


@triton.jit
def chain_kernel(x, w, y, n, iters, probe, BLOCK: tl.constexpr, USE_PDL: tl.constexpr, PROBE: tl.constexpr):
    """y = f(x, w) where x is the previous kernel's output. With USE_PDL the preamble (offsets,
    loading w) runs before `gdc_wait` (so it overlaps the previous kernel's tail) and the next kernel
    is released with `gdc_launch_dependents` once this program's compute is done."""
    sm, t0 = probe_begin()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    wv = tl.load(w + offs, mask=mask)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    v = tl.load(x + offs, mask=mask)
    for _ in range(iters):
        v = v * wv + 0.5
    if USE_PDL:
        # release the next kernel once this program's work is done: its programs become resident
        # while this kernel's last programs store (an earlier trigger lets the waiting programs
        # crowd the SMs — measured 50% slower on an H200, see tracelab/workloads/pdl.py)
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(y + offs, v, mask=mask)
    if PROBE:
        probe_end(probe, sm, t0)


@triton.jit
def matmul_kernel(
    a,
    b,
    c,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    probe,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    PROBE: tl.constexpr,
):
    """C = A @ B (bf16 in, fp32 accumulate), grouped tile order; instrumented stand-in for cuBLAS."""
    sm, t0 = probe_begin()
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    gid = pid // group
    first_m = gid * GROUP_M
    gsize = min(num_m - first_m, GROUP_M)
    pm = first_m + (pid % group) % gsize
    pn = (pid % group) // gsize
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None] * sam + rk[None, :] * sak
    pb = b + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _k in range(tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(pa), tl.load(pb))
        pa += BK * sak
        pb += BK * sbk
    pc = c + rm[:, None] * scm + rn[None, :] * scn
    tl.store(pc, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
    if PROBE:
        probe_end(probe, sm, t0)


def launch(
    recorder: ProbeRecorder, kernel: Any, n_programs: int, *args: Any, partition: int = -1, **kw: Any
) -> None:
    """Launch a 1-D grid of an instrumented kernel, probing it when the recorder says so."""
    name = kernel.fn.__name__
    buf, on = recorder.launch(name, n_programs, partition=partition)
    compiled = kernel[(n_programs,)](*args, buf, PROBE=on, **kw)
    if name not in TRACE_NAMES:
        TRACE_NAMES[name] = getattr(compiled, "name", None) or getattr(
            getattr(compiled, "metadata", None), "name", name
        )


def matmul(recorder: ProbeRecorder, a: Any, b: Any, c: Any, partition: int = -1) -> None:
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = 128, 256, 64
    n = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    launch(
        recorder,
        matmul_kernel,
        n,
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=8,
        num_warps=8,
        num_stages=3,
        partition=partition,
    )
