"""Record the built-in workloads: the runner's command line for one variant (through torchrun for a
workload of several processes), under nsys or torch.profiler, each variant in its own subprocess."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..workloads import get_workload
from .nsys import NSYS_MEMORY, finish_nsys, note_nsys_host, nsys_command, require_nsys, workload_host_flags
from .process import check_backend, check_gpu, check_world, fresh_dir, run_logged, safe_name


def workload_command(
    name: str, variant: str, backend: str, quick: bool, run_dir: str | Path, params: Mapping[str, Any] | None = None,
    seed: int = 0, probe: bool = True,
) -> list[str]:
    """The runner command line for one variant (without the nsys prefix); a workload of several
    processes is started through torchrun, one process per GPU."""
    world = get_workload(name).world_size
    launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m"] if world > 1 else ["-m"]
    cmd = [sys.executable, *launch, "tracelab.workloads.runner", name, variant, "--out", str(run_dir),
           "--backend", backend, "--seed", str(seed)]
    if quick:
        cmd.append("--quick")
    if not probe:
        cmd.append("--no-probe")
    for key, value in (params or {}).items():
        cmd += ["--param", f"{key}={value}"]
    if backend == "nsys":
        cmd += ["--trace-file", "trace.sqlite"]
    return cmd


def build_command(
    name: str,
    variant: str,
    backend: str,
    quick: bool,
    run_dir: str | Path,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    nsys: str | Path = "nsys",
    probe: bool = True,
    nsys_extra: Sequence[str] = (),
    os_calls: bool = True,
) -> list[str]:
    """The full command that records one variant with `backend` (`nsys_extra`: more nsys flags)."""
    check_backend(backend)
    inner = workload_command(name, variant, backend, quick, run_dir, params, seed, probe)
    if backend == "nsys":
        # a variant with memory tracing (Variant.memory): CUDA memory usage events in the export
        memory = (NSYS_MEMORY,) if get_workload(name).traces_memory(variant) else ()
        return nsys_command(nsys, Path(run_dir) / "trace", inner, window=True, extra=(*nsys_extra, *memory),
                            os_calls=os_calls)
    return inner


def record_workload(
    name: str,
    variant: str | None = "all",
    backend: str = "nsys",
    quick: bool = False,
    out_dir: str | Path | None = None,
    *,
    params: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Record each selected variant in its own subprocess; returns the run directories.

    Under nsys the workload (a Python program) also gets `--pytorch=autograd-nvtx` (when this nsys has
    the option), as `record_command` gives any Python program, so an nsys run sees the host side of
    PyTorch as a torch.profiler run does; meta.json's "nsys_host" says what was done."""
    wl = get_workload(name)
    variants = wl.resolve_variants(variant)
    check_backend(backend)
    wl.parameters(quick, params)  # validates overrides before anything runs
    nsys = require_nsys() if backend == "nsys" else None
    check_gpu()
    check_world(wl.name, wl.world_size, wl.parameters(quick, params))
    if out_dir is None:
        from ..settings import runs_dir

        out_dir = runs_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    host_flags, host_note = workload_host_flags(nsys) if nsys is not None else ((), "")
    runs = []
    for v in variants:
        suffix = "".join(f"-{safe_name(str(k))}={safe_name(str(val))}" for k, val in sorted((params or {}).items()))
        run_dir = fresh_dir(out / f"{name}-{v}-{backend}{suffix}")
        run_dir.mkdir(parents=True)
        run_logged(build_command(name, v, backend, quick, run_dir, params, nsys=nsys or "nsys", nsys_extra=host_flags),
                   run_dir, 900)
        if backend == "nsys":
            finish_nsys(run_dir)
            note_nsys_host(run_dir, host_flags, host_note, True)
        runs.append(run_dir)
    return runs

