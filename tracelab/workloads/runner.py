"""Run one variant of one workload in this process and write its run directory.

    python -m tracelab.workloads.runner WORKLOAD VARIANT --out DIR [--backend torch|nsys|none]
        [--quick] [--seed N] [--param KEY=VALUE ...] [--no-probe]

`--backend torch` starts torch.profiler (CPU + CUDA activities, shapes, CUDA sync events) after
warm-up and writes `trace.json.gz`; `--backend nsys` expects to run under `nsys profile` (record/workload.py
builds that command) and writes only meta.json and the probe file. Always writes `meta.json`
(workload, variant, backend, GPU, driver, versions, parameters, wall time per step) and, when
probes ran, `sm_probe.npz` (format: probes.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import BadInput
from . import get_workload
from .base import RunContext
from .probes import PROBE_FILE, ProbeRecorder

META_FILE = "meta.json"
TORCH_TRACE = "trace.json.gz"
NSYS_TRACE = "trace.sqlite"


def gpu_facts() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    facts: dict[str, Any] = {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "cc": f"{props.major}.{props.minor}",
        "total_memory": int(props.total_memory),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
    }
    for attr in (
        "max_threads_per_multi_processor",
        "regs_per_multiprocessor",
        "shared_memory_per_multiprocessor",
        "shared_memory_per_block_optin",
        "warp_size",
    ):
        if hasattr(props, attr):
            facts[attr] = int(getattr(props, attr))
    try:
        import triton
    except ImportError:
        triton = None
    facts["triton"] = getattr(triton, "__version__", None)
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        facts["driver"] = v.decode() if isinstance(v, bytes) else v
    except Exception:  # noqa: BLE001
        facts["driver"] = None
    from importlib.metadata import PackageNotFoundError, version

    try:
        facts["cuda_bindings"] = version("cuda-bindings")
    except PackageNotFoundError:
        facts["cuda_bindings"] = None
    return facts


def _profiler(memory: bool = False):
    """torch.profiler for a run; `memory` (or TRACELAB_PROFILE_MEMORY=1): profile_memory=True."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    kw: dict[str, Any] = {}
    note = "enable_cuda_sync_events=True"
    try:
        from torch.profiler import _ExperimentalConfig

        kw["experimental_config"] = _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception as e:  # noqa: BLE001 - older torch: no sync events
        note = f"no CUDA sync events ({e})"
    if memory or os.environ.get("TRACELAB_PROFILE_MEMORY") == "1":  # [memory] instants for the memory timeline
        kw["profile_memory"] = True
        note += ", profile_memory=True"
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, **kw)
    del torch
    return prof, note


def measure_overhead(reps: int = 20) -> dict[str, Any]:
    """Time the instrumented kernels with and without probes (CUDA events, median of `reps`)."""
    import torch

    from . import kernels as K

    n = 1 << 22
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    w = torch.rand(n, device="cuda")
    progs = n // 1024
    probe = torch.empty((n // 1024 + 1, 3), dtype=torch.int64, device="cuda")
    cases = {
        "busy_kernel": lambda on: K.busy_kernel[(progs,)](
            x, y, n, 200, 1.0001, 0.0001, probe, BLOCK=1024, PROBE=on, num_warps=4
        ),
        "sigmoid_kernel": lambda on: K.sigmoid_kernel[(n // 4096,)](
            x, y, n, probe, BLOCK=4096, PROBE=on, num_warps=8
        ),
        "chain_kernel": lambda on: K.chain_kernel[(progs,)](
            x, w, y, n, 16, probe, BLOCK=1024, USE_PDL=False, PROBE=on, num_warps=4
        ),
    }
    out: dict[str, Any] = {}
    for name, fn in cases.items():
        res = {}
        for on in (False, True):
            fn(on)
            times = []
            for _ in range(reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn(on)
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) * 1e3)
            times.sort()
            res["probed_us" if on else "plain_us"] = round(times[len(times) // 2], 2)
        res["overhead_pct"] = round(100.0 * (res["probed_us"] - res["plain_us"]) / res["plain_us"], 2)
        res["elements"] = n
        out[name] = res
    return out


def run_variant(
    workload: str,
    variant: str,
    out: Path,
    backend: str = "none",
    quick: bool = False,
    seed: int = 0,
    overrides: dict[str, str] | None = None,
    probe: bool = True,
    trace_file: str | None = None,
) -> Path:
    """Run one variant in this process (one rank of it under torchrun) under `backend` and write its run
    directory: the torch.profiler trace, meta.json, the probe file. Returns `out`."""
    import importlib

    import torch

    wl = get_workload(workload)
    wl.resolve_variants(variant)
    params = wl.parameters(quick, overrides)
    if not torch.cuda.is_available():
        from ..errors import MissingDependency

        raise MissingDependency("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    out.mkdir(parents=True, exist_ok=True)
    rank, world = _dist_rank()
    # Before any CUDA allocation (the probe pool, its dummy buffer, the workload's tensors): a rank's
    # memory must live on the rank's own GPU. Allocated first on GPU 0, rank 1's probe buffers made
    # its first Triton launch fail ("Pointer argument cannot be accessed from Triton").
    select_rank_device()
    if world > 1:  # one process per GPU under torchrun: per-rank traces, meta.json from rank 0
        probe = False  # the probe file holds one process's blocks
        if wl.world_size <= 1:
            raise BadInput(
                f"workload {workload!r} runs in one process; it was started with WORLD_SIZE={world}"
            )
    torch.manual_seed(seed)
    ctx = _context(workload, variant, params, seed, probe)
    prof, prof_note = _open_window(ctx, backend, wl.traces_memory(variant), world)
    module = importlib.import_module(wl.module)
    t0 = time.time()
    facts = module.run(ctx, variant)
    torch.cuda.synchronize()
    if backend == "nsys":
        torch.cuda.profiler.stop()
    if world > 1:
        return _finish_rank(out, rank, world, prof, backend, trace_file, module, wl, ctx, facts, quick)
    meta = _variant_meta(wl, ctx, backend, quick, facts, gpu_facts(), t0=t0)
    if prof is not None:
        _write_torch_trace(prof, out / "trace.json", out / TORCH_TRACE)
        meta["trace_file"] = TORCH_TRACE
        meta["profiler"] = {
            "tool": "torch.profiler",
            "activities": ["CPU", "CUDA"],
            "record_shapes": True,
            "sync_events": prof_note,
            "profile_memory": "profile_memory=True" in prof_note,
        }
    elif backend == "nsys":
        meta["trace_file"] = trace_file or NSYS_TRACE
        meta["profiler"] = {"tool": "nsys", "cuda_memory_usage": wl.traces_memory(variant)}
    probe_meta = _save_probes(ctx, out, backend)
    if probe_meta is not None:
        meta["probe"] = probe_meta
    (out / META_FILE).write_text(json.dumps(meta, indent=1, default=str))
    return out


def _context(workload: str, variant: str, params: dict[str, Any], seed: int, probe: bool) -> RunContext:
    """The run's context: its probe recorder (prepared), two warm-up steps, probes in the last two steps."""
    steps = int(params["steps"])
    recorder = ProbeRecorder(enabled=probe, max_rows=int(os.environ.get("TRACELAB_PROBE_ROWS", "2000000")))
    recorder.prepare()
    return RunContext(
        workload=workload,
        variant=variant,
        params=params,
        seed=seed,
        recorder=recorder,
        steps=steps,
        warmup=2,
        probe_steps=tuple(range(max(0, steps - 2), steps)),
    )


def _open_window(ctx: RunContext, backend: str, memory: bool, world: int) -> tuple[Any, str]:
    """What opens the measured window after warm-up (ctx.on_measure_start): torch.profiler's start (the
    profiler and a note on its options are returned), cudaProfilerStart under nsys; with several ranks,
    followed by a barrier."""
    import torch

    prof = None
    prof_note = ""
    if backend == "torch":
        prof, prof_note = _profiler(memory)

        ctx.on_measure_start = prof.start
    elif backend == "nsys":
        # recorded with --capture-range=cudaProfilerApi: nsys sees the measured window only
        ctx.on_measure_start = torch.cuda.profiler.start
    if world > 1 and ctx.on_measure_start is not None:
        ctx.on_measure_start = _together(ctx.on_measure_start)
    return prof, prof_note


def _variant_meta(
    wl: Any, ctx: RunContext, backend: str, quick: bool, facts: dict[str, Any], gpu: dict[str, Any], world: int = 1,
    t0: float = 0.0,
) -> dict[str, Any]:
    """meta.json of a run (rank 0's of a multi-rank one): what ran, on which GPU, how long each step took,
    the facts."""
    from .ranges import nvtx_backend

    one = world == 1
    return {
        "tracelab_run": 1,
        "workload": ctx.workload,
        "variant": ctx.variant,
        "backend": backend,
        "quick": quick,
        "seed": ctx.seed,
        "params": ctx.params,
        "steps": ctx.steps,
        "warmup": ctx.warmup,
        **({} if one else {"world_size": world}),
        "description": wl.description,
        "variant_description": {v.name: v.description for v in wl.variants}[ctx.variant],
        "gpu": gpu,
        **({"nvtx": nvtx_backend()} if one else {}),
        "step_wall_ms": [round(x, 4) for x in ctx.step_wall_ms],
        "loop_wall_ms": round(sum(ctx.step_wall_ms), 4),
        "mean_step_ms": round(sum(ctx.step_wall_ms) / max(1, len(ctx.step_wall_ms)), 4),
        "facts": facts,
        "partitions": facts.get("partitions", []),
        "pdl_kernels": facts.get("pdl_kernels", []) if one else [],
        **({"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))} if one else {}),
        "command": [sys.executable, "-m", "tracelab.workloads.runner", *sys.argv[1:]],
    }


def _write_torch_trace(prof: Any, tmp: Path, dst: Path) -> None:
    """Stop the profiler and write its trace gzipped to `dst` (through `tmp`, removed after)."""
    prof.stop()
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(dst, "wb", compresslevel=6) as out:
        shutil.copyfileobj(src, out)
    tmp.unlink()


def _save_probes(ctx: RunContext, out: Path, backend: str) -> dict[str, Any] | None:
    """Write the probe file when probes recorded anything; its entry of meta.json (None: no probes)."""
    from .kernels import TRACE_NAMES

    recorder = ctx.recorder
    if not (recorder._pending or recorder.kinds):
        return None
    rows = recorder.save(out / PROBE_FILE)
    probe: dict[str, Any] = {
        "file": PROBE_FILE,
        "rows": rows,
        "kernels": recorder.kinds,
        "trace_names": {k: TRACE_NAMES.get(k, k) for k in recorder.kinds},
        "probe_steps": list(ctx.probe_steps),
        "invocation_base": "profiler window start (torch.profiler start / cudaProfilerStart)",
        "timer": "globaltimer",
    }
    if backend == "torch" and any(v == "triton-instrumented" for v in recorder.kinds.values()):
        probe["overhead"] = measure_overhead()
    return probe


def _together(start):
    """Open the profiler window, then wait for every rank: a profiler's own start takes a different
    time on each rank (up to hundreds of ms), and without the barrier the first measured collective
    waits for the slowest start. The barrier lies before the first step, in the set-up."""

    def start_then_barrier() -> None:
        import torch
        import torch.distributed as dist

        start()
        if dist.is_initialized():
            dist.barrier()
        torch.cuda.synchronize()

    return start_then_barrier


def rank_device_index(env: dict[str, str] | None = None, device_count: int = 1) -> int:
    """The GPU a process of a multi-process job uses: LOCAL_RANK (as torchrun sets it) modulo the
    visible devices; 0 in a plain process or when LOCAL_RANK is not a number."""
    env = os.environ if env is None else env
    try:
        local = int(env.get("LOCAL_RANK", "0"))
    except ValueError:
        local = 0
    return local % max(1, int(device_count))


def select_rank_device() -> int:
    """Make this process's GPU (rank_device_index) the current CUDA device; returns its index."""
    import torch

    index = rank_device_index(device_count=torch.cuda.device_count())
    torch.cuda.set_device(index)
    return index


def _dist_rank() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as torchrun sets them; (0, 1) in a plain process."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


RANKS_DIR = "ranks"


def _finish_rank(
    out: Path, rank: int, world: int, prof, backend: str, trace_file, module, wl, ctx, facts, quick: bool
) -> Path:
    """A multi-rank variant: rank R writes `ranks/rank<R>.json.gz` (torch backend) and
    `meta_rank<R>.json`; rank 0 also writes meta.json naming the ranks directory (torch) or
    the one nsys export of all processes."""
    ranks = out / RANKS_DIR
    if prof is not None:
        ranks.mkdir(parents=True, exist_ok=True)
        _write_torch_trace(prof, ranks / f"rank{rank}.json", ranks / f"rank{rank}.json.gz")
    per_rank = {
        "rank": rank,
        "world_size": world,
        "step_wall_ms": [round(x, 4) for x in ctx.step_wall_ms],
        "facts": facts,
        "gpu": gpu_facts(),
    }
    # beside, not inside, the ranks directory: that one holds only traces (it is loaded as per-rank traces)
    (out / f"meta_rank{rank}.json").write_text(json.dumps(per_rank, indent=1, default=str))
    if hasattr(module, "finish"):
        module.finish()
    if rank == 0:
        meta = _variant_meta(wl, ctx, backend, quick, facts, per_rank["gpu"], world)
        meta["trace_file"] = RANKS_DIR if backend == "torch" else (trace_file or NSYS_TRACE)
        (out / META_FILE).write_text(json.dumps(meta, indent=1, default=str))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracelab.workloads.runner")
    ap.add_argument("workload")
    ap.add_argument("variant")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--backend", default="none", choices=["torch", "nsys", "none"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-probe", action="store_true")
    ap.add_argument("--trace-file", default=None)
    a = ap.parse_args(argv)
    from ..errors import TracelabError

    try:
        overrides = dict(kv.split("=", 1) for kv in a.param)
    except ValueError:
        print(f"error: --param wants KEY=VALUE, got {a.param}", file=sys.stderr)
        return 2
    try:
        run_variant(
            a.workload, a.variant, a.out, a.backend, a.quick, a.seed, overrides, not a.no_probe, a.trace_file
        )
    except TracelabError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
