"""Measured per-SM placement: probe records written by the workloads' own Triton kernels.

Every instrumented Triton kernel takes a `probe` pointer and a `PROBE: tl.constexpr`. When PROBE is
true each program (block) reads `%smid` and `%globaltimer` when it starts and `%globaltimer` again
after its last store, and writes one row `(smid, t_start, t_end)` at `probe + 3 * program_id`.
Nothing else changes in the kernel, so its name in the trace is the same with and without probes.

File format: `sm_probe.npz` in the run directory (numpy `savez_compressed`), one row per program of
every probed invocation:

| array        | dtype  | meaning                                                                  |
|--------------|--------|--------------------------------------------------------------------------|
| `kernel`     | int32  | index into `names`                                                       |
| `invocation` | int32  | 0-based launch index of that kernel name *in the trace* (see below)      |
| `program`    | int32  | program id (block index, linearised)                                     |
| `smid`       | int32  | `%smid` the program ran on                                               |
| `t_start`    | int64  | `%globaltimer` (ns, GPU global timer clock) when the program started     |
| `t_end`      | int64  | `%globaltimer` after the program's last store                            |
| `names`      | str    | kernel names exactly as the trace shows them (Triton: the function name) |
| `partition`  | int32  | index into `partitions` (meta.json) of the stream the launch went to; -1 none |

`invocation` counts every launch of that kernel name that appears in the trace, probed or not, in
launch order on the host (the recorder counts launches; launches made before the profiler started
are not counted for torch.profiler runs; nsys sees the whole process, so they are).
Alignment (tracelab.io.rundir.load): the trace's k-th kernel event with that name (ordered by start)
is invocation k; `offset = trace_start - min(t_start over the invocation's programs)` maps the
probe clock onto the trace clock, per invocation.

meta.json adds `probe`: {"file": "sm_probe.npz", "kernels": {name: "triton-instrumented" |
"bracket"}, "overhead": {name: {"plain_us", "probed_us", "overhead_pct"}}, "timer": "globaltimer"}.
"bracket" kernels are tiny probe-only kernels launched on the same stream before and after an
opaque library kernel (cuBLAS); they show which SMs a stream / green-context partition can use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np

PROBE_FILE = "sm_probe.npz"

try:  # Triton is needed only on the GPU machine
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - CPU-only environments
    HAVE_TRITON = False


if HAVE_TRITON:

    @triton.jit
    def probe_begin():
        """(smid, t_start) of the running program."""
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        return sm, t

    @triton.jit
    def probe_end(probe, sm, t0):
        """Read the end time and write the program's row (smid, t_start, t_end)."""
        t1 = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        base = probe + 3 * tl.program_id(0).to(tl.int64)
        tl.store(base, sm.to(tl.int64))
        tl.store(base + 1, t0)
        tl.store(base + 2, t1)

    @triton.jit
    def _probe_spin(probe, spin_ns, PROBE: tl.constexpr):
        """Probe-only kernel: each program spins `spin_ns` and records where and when it ran."""
        sm, t0 = probe_begin()
        t = t0
        while t - t0 < spin_ns:
            t = tl.inline_asm_elementwise(
                "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
            )
        if PROBE:
            probe_end(probe, sm, t0)

    # Distinct function names = distinct kernel names in the trace, so a bracket probe identifies
    # its stream (and green-context partition) in any trace.
    @triton.jit
    def tl_probe_main(probe, spin_ns, PROBE: tl.constexpr):
        _probe_spin(probe, spin_ns, PROBE)

    @triton.jit
    def tl_probe_side(probe, spin_ns, PROBE: tl.constexpr):
        _probe_spin(probe, spin_ns, PROBE)

    @triton.jit
    def tl_probe_large_partition(probe, spin_ns, PROBE: tl.constexpr):
        _probe_spin(probe, spin_ns, PROBE)

    @triton.jit
    def tl_probe_small_partition(probe, spin_ns, PROBE: tl.constexpr):
        _probe_spin(probe, spin_ns, PROBE)

    SPIN_KERNELS = {
        "tl_probe_main": tl_probe_main,
        "tl_probe_side": tl_probe_side,
        "tl_probe_large_partition": tl_probe_large_partition,
        "tl_probe_small_partition": tl_probe_small_partition,
    }


class ProbeRecorder(msgspec.Struct):
    """Hands out probe buffers to instrumented launches and collects them after the run."""

    enabled: bool = True
    max_rows: int = 4_000_000
    counts: dict[str, int] = msgspec.field(default_factory=dict)  # launches per kernel name
    base: dict[str, int] = msgspec.field(default_factory=dict)  # launches before counting reset
    _pending: list[tuple[str, int, Any, int]] = msgspec.field(default_factory=list)
    _rows: int = 0
    kinds: dict[str, str] = msgspec.field(default_factory=dict)
    active: bool = True  # probe the next launches (workloads switch it per step)
    _pool: Any = None
    discard: bool = False  # probe but keep nothing (warm-up: compiles the probed kernel variant)

    def launch(self, name: str, n_programs: int, kind: str = "triton-instrumented", partition: int = -1):
        """Call once per launch of kernel `name`; returns (buffer, PROBE flag) for the launch."""
        import torch

        idx = self.counts.get(name, 0)
        self.counts[name] = idx + 1
        self.kinds.setdefault(name, kind)
        if not (self.enabled and self.active) or self._rows + n_programs > self.max_rows:
            return _dummy(), False
        if self._pool is None or len(self._pool) < self.max_rows:
            # one allocation up front: a probe buffer never costs a kernel launch or a cudaMalloc
            self._pool = torch.empty((self.max_rows, 3), dtype=torch.int64, device="cuda")
        if self.discard:
            return self._pool[:n_programs], True
        buf = self._pool[self._rows : self._rows + n_programs]
        self._pending.append((name, idx, buf, partition))
        self._rows += n_programs
        return buf, True

    def prepare(self) -> None:
        """Allocate the probe pool (and the dummy buffer) before anything is measured."""
        import torch

        if self.enabled and self._pool is None:
            self._pool = torch.empty((self.max_rows, 3), dtype=torch.int64, device="cuda")
        _dummy()

    def reset_counts(self) -> None:
        """Forget launches so far (torch.profiler starts after warm-up: its trace does not see them)."""
        self.counts.clear()
        self._pending.clear()
        self._rows = 0

    def save(self, path: Path) -> int:
        """Write sm_probe.npz; returns the number of rows."""
        names = sorted({p[0] for p in self._pending})
        index = {n: i for i, n in enumerate(names)}
        parts = []
        for name, inv, buf, partition in self._pending:
            a = buf.cpu().numpy()
            n = len(a)
            parts.append(
                (
                    np.full(n, index[name], np.int32),
                    np.full(n, inv, np.int32),
                    np.arange(n, dtype=np.int32),
                    a[:, 0].astype(np.int32),
                    a[:, 1],
                    a[:, 2],
                    np.full(n, partition, np.int32),
                )
            )
        cols = list(zip(*parts)) if parts else [[] for _ in range(7)]

        def cat(i, dtype):
            return np.concatenate(cols[i]).astype(dtype) if parts else np.zeros(0, dtype)

        np.savez_compressed(
            path,
            kernel=cat(0, np.int32),
            invocation=cat(1, np.int32),
            program=cat(2, np.int32),
            smid=cat(3, np.int32),
            t_start=cat(4, np.int64),
            t_end=cat(5, np.int64),
            partition=cat(6, np.int32),
            names=np.array(names, dtype=str),
        )
        return int(sum(len(p[0]) for p in parts))


_DUMMY: dict[str, Any] = {}


def _dummy():
    import torch

    if "t" not in _DUMMY:
        _DUMMY["t"] = torch.empty(3, dtype=torch.int64, device="cuda")
    return _DUMMY["t"]


def bracket_probe(
    recorder: ProbeRecorder, name: str, n_programs: int, spin_ns: int = 2000, partition: int = -1
):
    """Launch the probe-only kernel `name` on the current stream: `n_programs` tiny programs that
    each spin `spin_ns` and record their SM. Used around opaque library kernels."""
    buf, on = recorder.launch(name, n_programs, kind="bracket", partition=partition)
    SPIN_KERNELS[name][(n_programs,)](buf, spin_ns, PROBE=on, num_warps=1)

