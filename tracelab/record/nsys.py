"""The nsys backend: finding nsys, its command line and flags (the measured window, PyTorch host ranges, OS
calls, memory), the SQLite export (with NCCL's payloads for several processes), and recording any program
under it (`record_nsys`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MissingDependency
from .process import RecordError, fresh_dir, run_logged, safe_name
from .torchrun import torchrun_split

NSYS_TRACE = "cuda,nvtx,osrt"  # CUDA API + activity, NVTX ranges, OS runtime calls (OSRT_API)
NSYS_FLAGS = (
    "-t",
    NSYS_TRACE,
    "--sample=none",
    "--cpuctxsw=none",
    "--cuda-graph-trace=node",
    "--export=sqlite",
    "--force-overwrite=true",
)


def find_nsys() -> Path | None:
    """The nsys binary (tracelab.io.nsys's finder: TRACELAB_NSYS, PATH, the standard install directories)."""
    from tracelab.io.nsys import load

    found = load.find_nsys()
    return Path(found) if found else None


# workloads open their measured window with cudaProfilerStart/Stop (warm-up and set-up stay out)
NSYS_WINDOW = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")
# For PyTorch programs: an NVTX range around every autograd operator (forward and backward), so that
# the host side between CUDA calls is visible in the nsys trace as it is in a torch.profiler trace
# (CPU ops). Without it the host shows only inside CUDA calls and Python time looks like "nothing".
NSYS_PYTORCH_HOST = "--pytorch=autograd-nvtx"
# a workload variant recorded with memory tracing (Variant.memory) under nsys: CUDA_GPU_MEMORY_USAGE_EVENTS
NSYS_MEMORY = "--cuda-memory-usage=true"


def nsys_command(
    nsys: str | Path,
    out_prefix: str | Path,
    cmd: Sequence[str],
    window: bool = False,
    extra: Sequence[str] = (),
    os_calls: bool = True,
) -> list[str]:
    """`nsys profile` with tracelab's flags (small traces: no CPU sampling, no context switches);
    `window`: record only between cudaProfilerStart and cudaProfilerStop; `extra`: more flags;
    `os_calls`: trace OS runtime calls (osrt: what tells "blocked in the OS" from "busy" in gap causes)."""
    flags = NSYS_FLAGS if os_calls else tuple("cuda,nvtx" if f == NSYS_TRACE else f for f in NSYS_FLAGS)
    return [str(nsys), "profile", *flags, *(NSYS_WINDOW if window else ()), *extra, "-o", str(out_prefix), *cmd]


def is_python_command(cmd: Sequence[str]) -> bool:
    """`python[3[.x]] ...`, `torchrun ...` or `script.py ...`."""
    return bool(cmd) and (
        Path(cmd[0]).name.startswith("python") or Path(cmd[0]).name == "torchrun" or str(cmd[0]).endswith(".py")
    )


def nsys_supports(nsys: str | Path, option: str, command: str = "profile") -> bool:
    """Whether `nsys COMMAND --help` lists `option` (e.g. "--pytorch"); False when it cannot run."""
    try:
        out = subprocess.run([str(nsys), command, "--help"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in (out.stdout + out.stderr)


def pytorch_host_flags(nsys: str | Path, cmd: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The nsys flags that make a PyTorch program's host side visible, and a note saying what was
    done: `--pytorch=autograd-nvtx` for Python commands when this nsys has the option."""
    if not is_python_command(cmd):
        return (), "not a Python command: no PyTorch host ranges requested"
    if not nsys_supports(nsys, "--pytorch"):
        return (), "this nsys has no --pytorch option: host time between CUDA calls is not recorded"
    return (NSYS_PYTORCH_HOST,), f"{NSYS_PYTORCH_HOST}: an NVTX range per autograd operator"


def workload_host_flags(nsys: str | Path, pytorch_host: bool = True) -> tuple[tuple[str, ...], str]:
    """The nsys host flags for a built-in workload (the runner is a Python program: the same
    `--pytorch=autograd-nvtx` any Python program gets, when this nsys has it) and a note."""
    if not pytorch_host:
        return (), "PyTorch host ranges not requested"
    return pytorch_host_flags(nsys, [sys.executable, "-m", "tracelab.workloads.runner"])


def require_nsys() -> Path:
    """The nsys binary, or MissingDependency saying how to get one."""
    nsys = find_nsys()
    if nsys is None:
        raise MissingDependency(
            "nsys (Nsight Systems) not found: install it, put it on PATH or set TRACELAB_NSYS, "
            "or record with --backend torch"
        )
    return nsys


def finish_nsys(run_dir: Path) -> None:
    """Make sure trace.sqlite exists (export the .nsys-rep when nsys did not)."""
    sqlite = run_dir / "trace.sqlite"
    rep = run_dir / "trace.nsys-rep"
    if sqlite.exists():
        return
    if not rep.exists():
        raise RecordError(f"{run_dir}: nsys wrote no trace.nsys-rep (see record.log)")
    from tracelab.io.nsys.load import export_nsys_rep

    export_nsys_rep(rep, run_dir)
    if not sqlite.exists():
        raise RecordError(f"{run_dir}: exporting {rep.name} to SQLite failed")


def export_payloads(run_dir: Path, nsys: Path) -> None:
    """Export the report again with NVTX payloads as JSON (`--include-json true`: NCCL's
    ncclCommInitRank* payloads carry each process's rank; parsers/nsys_ranks.py reads them). Kept only
    when the export succeeds; the plain export stays otherwise, and meta.json's nsys_payloads says so."""
    rep, sqlite = run_dir / "trace.nsys-rep", run_dir / "trace.sqlite"
    tmp = run_dir / "trace.payloads.sqlite"
    note = "exported with --include-json true (NCCL payloads)"
    if not rep.exists() or not nsys_supports(nsys, "--include-json", "export"):
        note = "this nsys has no export --include-json: ranks from device order"
    else:
        res = subprocess.run(
            [str(nsys), "export", "--type", "sqlite", "--include-json", "true", "--force-overwrite", "true",
             "-o", str(tmp), str(rep)],
            capture_output=True,
            check=False,
        )
        if res.returncode == 0 and tmp.exists():
            tmp.replace(sqlite)
        else:
            tmp.unlink(missing_ok=True)
            note = f"export --include-json failed (exit {res.returncode}): ranks from device order"
    (run_dir / "nsys_payloads.txt").write_text(note + "\n")


def note_nsys_host(run_dir: Path, flags: Sequence[str], note: str, os_calls: bool) -> None:
    """Record in meta.json which host-side data nsys was asked for (PyTorch ranges, OS calls)."""
    meta_path = run_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except ValueError:
        return
    if isinstance(meta, dict):
        meta["nsys_host"] = {"flags": list(flags), "note": note, "os_calls": os_calls}
        meta_path.write_text(json.dumps(meta, indent=1, default=str))


def record_nsys(cmd: list[str], out_dir: Path, pytorch_host: bool, os_calls: bool) -> tuple[Path, dict[str, Any]]:
    """Profile `cmd` under nsys into a fresh run directory (`cmd-NAME-nsys`) with trace.sqlite; a torchrun
    launch is exported again with NCCL's payloads. Returns the directory and meta.json's "nsys_host"."""
    nsys = require_nsys()
    base = Path(cmd[0]).name if not cmd[0].endswith(".py") else Path(cmd[0]).stem
    run_dir = fresh_dir(out_dir / f"cmd-{safe_name(base)}-nsys")
    run_dir.mkdir(parents=True)
    host_flags, host_note = pytorch_host_flags(nsys, cmd) if pytorch_host else ((), "PyTorch host ranges not requested")
    run_logged(nsys_command(nsys, run_dir / "trace", cmd, extra=host_flags, os_calls=os_calls), run_dir, None)
    finish_nsys(run_dir)
    if torchrun_split(cmd) is not None:  # several processes: NCCL's payloads name each one's rank
        export_payloads(run_dir, nsys)
    return run_dir, {"flags": list(host_flags), "note": host_note, "os_calls": os_calls}
