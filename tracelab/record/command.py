"""Profile any program (`tracelab record -- CMD ...`): nsys wraps any command, torch.profiler a Python
script or a torchrun launch; then meta.json says what ran and how."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import BadInput
from .nsys import record_nsys
from .process import check_backend, gpu_from_smi
from .profiler import record_torch


def record_command(
    cmd: Sequence[str],
    backend: str = "nsys",
    out_dir: str | Path | None = None,
    *,
    pytorch_host: bool = True,
    os_calls: bool = True,
) -> Path:
    """Profile any program: nsys wraps any command; torch.profiler wraps a Python script
    (`python script.py ...` or `script.py ...`). Returns the run directory.

    Under nsys a Python command also gets `--pytorch=autograd-nvtx` (when `pytorch_host` and this
    nsys has the option): meta.json's "nsys_host" says what was done. A program may leave
    program_meta.json in $TRACELAB_RUN_DIR; it is copied into meta.json under "program"."""
    check_backend(backend)
    cmd = list(cmd)
    if not cmd:
        raise BadInput("record needs a command after --")
    if out_dir is None:
        from ..settings import runs_dir

        out_dir = runs_dir()
    nsys_host = None
    if backend == "nsys":
        run_dir, nsys_host = record_nsys(cmd, Path(out_dir), pytorch_host, os_calls)
        trace = "trace.sqlite"
    else:
        run_dir, trace = record_torch(cmd, Path(out_dir))
    write_command_meta(run_dir, cmd, backend, trace, nsys_host)
    return run_dir


def write_command_meta(
    run_dir: Path, cmd: list[str], backend: str, trace: str, nsys_host: dict[str, Any] | None
) -> None:
    """meta.json of a recorded command: what the program left (program_meta.json), the nsys host flags,
    the command, backend and trace file, and the GPU from nvidia-smi when the program named none."""
    meta_path = run_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update(_program_meta(run_dir))
    if nsys_host is not None:
        meta["nsys_host"] = nsys_host
    meta.update(
        {
            "tracelab_run": 1,
            "workload": "",
            "variant": "",
            "backend": backend,
            "command": cmd,
            "trace_file": trace,
        }
    )
    if not meta.get("gpu"):
        meta["gpu"] = gpu_from_smi()
    meta_path.write_text(json.dumps(meta, indent=1, default=str))


def _program_meta(run_dir: Path) -> dict[str, Any]:
    """What the program left in run_dir/program_meta.json: its partitions and PDL kernels, and the whole
    of it under "program" ({} when there is none or it is not a JSON object)."""
    extra = run_dir / "program_meta.json"
    if not extra.exists():
        return {}
    try:
        program = json.loads(extra.read_text())
    except ValueError:
        return {}
    if not isinstance(program, dict):
        return {}
    return {**{k: v for k, v in program.items() if k in ("partitions", "pdl_kernels")}, "program": program}
